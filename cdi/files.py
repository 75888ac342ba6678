"""Spec files on disk: where a spec lives, and writing, removing and loading it.

File names follow the Go library's GenerateTransientSpecName so the files this
driver writes sit next to, and never collide with, those of other CDI producers.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from cdi.atomic import atomic_write, remove_durably
from cdi.cdi_error import CDIError
from cdi.codec import spec_from_text, spec_to_yaml
from cdi.names import parse_kind
from cdi.spec import Spec
from cdi.validate import validate_spec
from cdi.version import minimum_version, normalize_version

StrPath = str | os.PathLike[str]

YAML_SUFFIXES: tuple[str, ...] = (".yaml", ".yml")
JSON_SUFFIXES: tuple[str, ...] = (".json",)
SPEC_SUFFIXES: tuple[str, ...] = YAML_SUFFIXES + JSON_SUFFIXES


def spec_file_name(kind: str, name: str) -> str:
    """`<vendor>-<class>_<name>.yaml` for a spec of `kind` identified by `name`.

    `name` is the writer's own identifier (a claim UID, "base"); `/` in it becomes `_`
    so that it can never leave the directory. An empty name gives `<vendor>-<class>.yaml`.
    """
    vendor, class_ = parse_kind(kind)
    if "\0" in name:
        raise CDIError(f"invalid spec file name {name!r}: it contains a NUL character")
    stem = f"{vendor}-{class_}"
    if name:
        stem += "_" + name.replace("/", "_")
    return stem + ".yaml"


def spec_path(directory: StrPath, kind: str, name: str) -> Path:
    """The full path `write_spec` uses for this kind and name."""
    return Path(directory) / spec_file_name(kind, name)


def write_spec(
    spec: Spec, directory: StrPath, name: str, *, mode: int = 0o600, version: str | None = None
) -> Path:
    """Validate `spec` and atomically (re)write it as YAML; returns the file's path.

    The file's cdiVersion is the minimum the content needs, so the widest range of
    runtimes can read it, unless `version` pins one (which must then be high enough).
    The caller's `spec` object is not modified. The directory is created if missing.
    """
    declared = minimum_version(spec) if version is None else normalize_version(version)
    spec = dataclasses.replace(spec, cdi_version=declared)
    validate_spec(spec)
    path = spec_path(directory, spec.kind, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, spec_to_yaml(spec).encode(), mode)
    return path


def remove_spec(directory: StrPath, kind: str, name: str) -> bool:
    """Durably delete the spec `write_spec` wrote for this kind and name.

    Returns whether a file was there; a missing file is not an error, so unprepare
    can be retried safely.
    """
    return remove_durably(spec_path(directory, kind, name))


def load_spec(path: StrPath) -> Spec:
    """Read, decode and validate a spec file (`.yaml`, `.yml` or `.json`).

    Errors are CDIError prefixed with the path; a missing file raises FileNotFoundError.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SPEC_SUFFIXES:
        raise CDIError(f"{path}: not a CDI spec file (expected one of {', '.join(SPEC_SUFFIXES)})")
    data = path.read_bytes()
    try:
        spec = spec_from_text(data.decode("utf-8"), is_json=suffix in JSON_SUFFIXES)
        validate_spec(spec)
    except UnicodeDecodeError as err:
        raise CDIError(f"{path}: not UTF-8 text: {err}") from None
    except CDIError as err:
        raise CDIError(f"{path}: {err}") from None
    return spec
