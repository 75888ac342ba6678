"""Finding qualified devices in CDI spec directories, as a container runtime does.

Unlike the Go cache, which silently prefers the later directory when two specs define
a device, any duplicate definition is an error here: for this driver it always means
a stale or foreign spec file, which should be noticed rather than shadowed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cdi.cdi_error import CDIError
from cdi.container_edits import device_edits, merge_edits
from cdi.files import SPEC_SUFFIXES, StrPath, load_spec
from cdi.names import QualifiedName, parse_kind
from cdi.spec import ContainerEdits, Device, Spec

SpecDirs = StrPath | Sequence[StrPath]


@dataclass(frozen=True)
class LoadedSpec:
    """A valid spec and the file it came from, so errors can point at the file."""

    path: Path
    spec: Spec


@dataclass(frozen=True)
class ResolvedDevice:
    """A qualified device found in a spec file."""

    name: QualifiedName
    spec: Spec
    device: Device
    path: Path

    def container_edits(self) -> ContainerEdits:
        """What a runtime applies for this device alone: the spec's edits, then the device's."""
        return device_edits(self.spec, self.device)


def _directories(dirs: SpecDirs) -> list[Path]:
    # A lone path is accepted too; iterating a str would silently yield characters.
    if isinstance(dirs, str | os.PathLike):
        return [Path(dirs)]
    return [Path(directory) for directory in dirs]


def spec_files(dirs: SpecDirs) -> list[Path]:
    """Spec files in each directory, in name order, directory by directory.

    Missing directories are skipped (a node may not have created them yet), as are
    subdirectories and hidden files such as the temporaries of an atomic write.
    """
    found: list[Path] = []
    for directory in _directories(dirs):
        if not directory.is_dir():
            continue
        found.extend(
            entry
            for entry in sorted(directory.iterdir())
            if entry.suffix.lower() in SPEC_SUFFIXES
            and not entry.name.startswith(".")
            and entry.is_file()
        )
    return found


def load_specs(dirs: SpecDirs) -> list[LoadedSpec]:
    """Every spec in `dirs`; one invalid file is an error naming it, not a silent skip."""
    return [LoadedSpec(path, load_spec(path)) for path in spec_files(dirs)]


def resolve_devices(names: Iterable[str | QualifiedName], dirs: SpecDirs) -> list[ResolvedDevice]:
    """Resolve each qualified device name, reading the directories only once."""
    wanted = [
        name if isinstance(name, QualifiedName) else QualifiedName.parse(name) for name in names
    ]
    loaded = load_specs(dirs)
    index: dict[QualifiedName, list[ResolvedDevice]] = {}
    for item in loaded:
        vendor, class_ = parse_kind(item.spec.kind)
        for device in item.spec.devices:
            qualified = QualifiedName(vendor, class_, device.name)
            index.setdefault(qualified, []).append(
                ResolvedDevice(qualified, item.spec, device, item.path)
            )
    searched = ", ".join(str(directory) for directory in _directories(dirs)) or "(none)"
    resolved: list[ResolvedDevice] = []
    for name in wanted:
        matches = index.get(name, [])
        if not matches:
            raise CDIError(
                f"unresolvable CDI device {name}: no spec in {searched} defines it "
                f"({len(loaded)} spec files read)"
            )
        if len(matches) > 1:
            files = ", ".join(str(match.path) for match in matches)
            raise CDIError(f"CDI device {name} is defined by more than one spec: {files}")
        resolved.append(matches[0])
    return resolved


def resolve_device(name: str | QualifiedName, dirs: SpecDirs) -> ResolvedDevice:
    """Resolve one qualified device name to the single spec and device defining it."""
    return resolve_devices([name], dirs)[0]


def container_edits_for(devices: Iterable[ResolvedDevice]) -> ContainerEdits:
    """What a runtime applies to a container given these devices.

    As in the Go cache's InjectDevices, a spec's shared edits are applied once, before
    the first of its devices, however many of its devices the container gets.
    """
    parts: list[ContainerEdits] = []
    seen: set[Path] = set()
    for resolved in devices:
        if resolved.path not in seen:
            seen.add(resolved.path)
            parts.append(resolved.spec.container_edits)
        parts.append(resolved.device.container_edits)
    return merge_edits(*parts)
