"""Test helper: admit objects against the shipped CRDs roughly the way kube-apiserver does.

The API server prunes unknown fields, applies schema defaults, then validates (OpenAPI
schema, list-map key uniqueness, CEL rules on update). We mimic the parts our CRDs use so
tests can assert what a cluster admin would see, without a cluster. The openAPIV3Schema is
JSON-Schema compatible once ``x-kubernetes-*`` keys are ignored, which jsonschema does.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRD_DIR = Path(__file__).resolve().parents[2] / "packaging" / "crds"
GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

Schema = dict[str, Any]
# Root fields the API server handles itself (ObjectMeta is never pruned by the CRD schema).
_ROOT_PASSTHROUGH = frozenset({"apiVersion", "kind", "metadata"})


@dataclass(frozen=True)
class FieldError:
    """One rejection, with the field path formatted like kube-apiserver (``a.b[0].c``)."""

    field: str
    message: str


class RejectedError(Exception):
    """Raised when the API server would refuse the object; carries every field error."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{e.field}: {e.message}" for e in errors))

    @property
    def fields(self) -> list[str]:
        return [e.field for e in self.errors]


def crd_path(plural: str) -> Path:
    return CRD_DIR / f"{GROUP}_{plural}.yaml"


def load_crd(plural: str) -> dict[str, Any]:
    """Parse a shipped CRD file with the same safe loader kubectl-equivalent tooling uses."""
    with crd_path(plural).open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    assert isinstance(data, dict)
    return data


def served_version(crd: dict[str, Any], name: str = VERSION) -> dict[str, Any]:
    for version in crd["spec"]["versions"]:
        if version["name"] == name:
            return version
    raise KeyError(name)


def schema_of(crd: dict[str, Any], name: str = VERSION) -> Schema:
    return served_version(crd, name)["schema"]["openAPIV3Schema"]


def format_path(parts: Iterator[Any] | list[Any]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def walk(schema: Schema, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Schema]]:
    """Yield every sub-schema with its path (``[]`` marks array items)."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from walk(sub, (*path, name))
    if "items" in schema:
        yield from walk(schema["items"], (*path, "[]"))


def prune(obj: Any, schema: Schema, *, root: bool = True) -> Any:
    """Drop fields the schema does not declare, as the API server does for structural schemas."""
    if isinstance(obj, dict) and schema.get("type") == "object" and "properties" in schema:
        props = schema["properties"]
        out = {}
        for key, value in obj.items():
            if root and key in _ROOT_PASSTHROUGH:
                out[key] = value
            elif key in props:
                out[key] = prune(value, props[key], root=False)
        return out
    if isinstance(obj, list) and "items" in schema:
        return [prune(item, schema["items"], root=False) for item in obj]
    return obj


def apply_defaults(obj: Any, schema: Schema) -> Any:
    """Fill absent properties that carry a ``default``, recursively, like API-server defaulting.

    Defaults only apply inside objects that exist: an absent ``status`` stays absent.
    """
    if isinstance(obj, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key not in obj and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])
            if key in obj:
                obj[key] = apply_defaults(obj[key], sub)
    elif isinstance(obj, list) and "items" in schema:
        return [apply_defaults(item, schema["items"]) for item in obj]
    return obj


def _schema_errors(obj: Any, schema: Schema) -> list[FieldError]:
    validator = jsonschema.Draft7Validator(schema)
    errors = []
    for err in validator.iter_errors(obj):
        parts = list(err.absolute_path)
        if err.validator == "required":
            # Name the missing field itself, as kube-apiserver's "Required value" does.
            missing = set(err.validator_value) - set(err.instance)
            for name in sorted(missing):
                errors.append(FieldError(format_path([*parts, name]), "Required value"))
            continue
        errors.append(FieldError(format_path(parts), err.message))
    return errors


def _list_map_errors(obj: Any, schema: Schema, path: list[Any]) -> list[FieldError]:
    """kube-apiserver rejects list-type=map entries that repeat the same key tuple."""
    errors: list[FieldError] = []
    if isinstance(obj, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in obj:
                errors += _list_map_errors(obj[key], sub, [*path, key])
    elif isinstance(obj, list) and "items" in schema:
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen: set[tuple[Any, ...]] = set()
        for i, item in enumerate(obj):
            if schema.get("x-kubernetes-list-type") == "map" and isinstance(item, dict):
                ident = tuple(item.get(k) for k in keys)
                if ident in seen:
                    errors.append(FieldError(format_path([*path, i]), f"Duplicate value: {ident}"))
                seen.add(ident)
            errors += _list_map_errors(item, schema["items"], [*path, i])
    return errors


def admit(crd: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """Return the object as stored on create (pruned, defaulted), or raise RejectedError."""
    schema = schema_of(crd)
    stored = apply_defaults(prune(copy.deepcopy(obj), schema), schema)
    errors = _schema_errors(stored, schema) + _list_map_errors(stored, schema, [])
    if errors:
        raise RejectedError(errors)
    return stored


def admit_update(crd: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Like admit, plus the CRD's transition rules. Only ``self == oldSelf`` is understood."""
    schema = schema_of(crd)
    old_stored = admit(crd, old)
    new_stored = admit(crd, new)
    errors = []
    for path, sub in walk(schema):
        if "[]" in path:
            continue  # our CRDs carry no rules inside lists
        for rule in sub.get("x-kubernetes-validations", []):
            if rule["rule"] != "self == oldSelf":
                raise NotImplementedError(rule["rule"])
            old_val, new_val = _lookup(old_stored, path), _lookup(new_stored, path)
            # Transition rules only run when both the old and new value exist.
            if old_val is not _ABSENT and new_val is not _ABSENT and old_val != new_val:
                errors.append(
                    FieldError(format_path(list(path)), f"Invalid value: {rule['message']}")
                )
    if errors:
        raise RejectedError(errors)
    return new_stored


_ABSENT = object()


def _lookup(obj: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _ABSENT
        obj = obj[part]
    return obj
