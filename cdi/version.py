"""Which cdiVersion a spec needs, so we write the oldest version runtimes can still read.

Older container runtimes refuse specs whose cdiVersion they do not know, so a spec
should claim the lowest version whose features it uses. The rules mirror
tags.cncf.io/container-device-interface/specs-go/version.go.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator

from cdi.cdi_error import CDIError
from cdi.spec import ContainerEdits, Spec

KNOWN_VERSIONS: tuple[str, ...] = (
    "0.1.0",
    "0.2.0",
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)
CURRENT_VERSION = KNOWN_VERSIONS[-1]
EARLIEST_VERSION = "0.3.0"


def _edits(spec: Spec) -> Iterator[ContainerEdits]:
    yield spec.container_edits
    for device in spec.devices:
        yield device.container_edits


def _requires_v110(spec: Spec) -> bool:
    return any(
        edits.net_devices
        or (
            edits.intel_rdt is not None
            and (bool(edits.intel_rdt.schemata) or edits.intel_rdt.enable_monitoring)
        )
        for edits in _edits(spec)
    )


def _requires_v070(spec: Spec) -> bool:
    return any(edits.intel_rdt is not None or edits.additional_gids for edits in _edits(spec))


def _requires_v060(spec: Spec) -> bool:
    if spec.annotations or any(device.annotations for device in spec.devices):
        return True
    vendor, _, class_ = spec.kind.partition("/")
    return bool(vendor) and "." in class_


def _requires_v050(spec: Spec) -> bool:
    if any(device.name[:1] and device.name[0] in string.digits for device in spec.devices):
        return True
    return any(node.host_path for edits in _edits(spec) for node in edits.device_nodes)


def _requires_v040(spec: Spec) -> bool:
    return any(mount.type for edits in _edits(spec) for mount in edits.mounts)


# Newest first: the first rule that matches decides. 1.0.0 and 0.8.0 added no
# features a spec can use, so nothing ever requires them.
_RULES: tuple[tuple[str, Callable[[Spec], bool]], ...] = (
    ("1.1.0", _requires_v110),
    ("0.7.0", _requires_v070),
    ("0.6.0", _requires_v060),
    ("0.5.0", _requires_v050),
    ("0.4.0", _requires_v040),
)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def normalize_version(version: str) -> str:
    """`version` without a leading `v`, or CDIError if it is not a released CDI version."""
    bare = version.removeprefix("v")
    if bare not in KNOWN_VERSIONS:
        raise CDIError(
            f"unknown CDI version {version!r} (known versions: {', '.join(KNOWN_VERSIONS)})"
        )
    return bare


def minimum_version(spec: Spec) -> str:
    """The lowest cdiVersion that can express everything `spec` uses, e.g. "0.5.0"."""
    for version, required in _RULES:
        if required(spec):
            return version
    return EARLIEST_VERSION


def check_version(spec: Spec) -> None:
    """Raise CDIError if the spec's cdiVersion is unknown or too old for its content."""
    declared = normalize_version(spec.cdi_version)
    needed = minimum_version(spec)
    if _key(declared) < _key(needed):
        raise CDIError(
            f"the spec version must be at least v{needed} "
            f"(it declares {spec.cdi_version!r} but uses features added in v{needed})"
        )
