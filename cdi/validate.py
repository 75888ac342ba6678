"""Semantic checks of a spec, so we never write a file a container runtime would reject.

The checks follow tags.cncf.io/container-device-interface (pkg/cdi/spec.go, device.go,
container-edits.go) plus the integer ranges of the official JSON schema. Each error
names the place in the document, in the same `spec.devices[0]...` form that decoding
errors use.
"""

from __future__ import annotations

from collections.abc import Iterable

from cdi.annotations import validate_annotations
from cdi.cdi_error import CDIError
from cdi.names import parse_kind, validate_device_name
from cdi.spec import ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec
from cdi.version import check_version

DEVICE_NODE_TYPES: tuple[str, ...] = ("b", "c", "u", "p")
HOOK_NAMES: tuple[str, ...] = (
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
)
_UINT32_MAX = 2**32 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _check_range(where: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise CDIError(f"{where}: {value} is out of range [{low}, {high}]")


def _check_env(where: str, env: Iterable[str]) -> None:
    for index, entry in enumerate(env):
        if entry.find("=") <= 0:
            raise CDIError(
                f"{where}[{index}]: invalid environment variable {entry!r} (expected NAME=VALUE)"
            )


def _check_device_node(where: str, node: DeviceNode) -> None:
    if not node.path:
        raise CDIError(f"{where}: missing device path")
    if node.type and node.type not in DEVICE_NODE_TYPES:
        raise CDIError(
            f"{where}: device {node.path!r} has invalid type {node.type!r} "
            f"(expected one of {', '.join(DEVICE_NODE_TYPES)})"
        )
    if any(bit not in "rwm" for bit in node.permissions):
        raise CDIError(
            f"{where}: device {node.path!r} has invalid permissions "
            f"{node.permissions!r} (expected letters from 'rwm')"
        )
    _check_range(f"{where}.major", node.major, _INT64_MIN, _INT64_MAX)
    _check_range(f"{where}.minor", node.minor, _INT64_MIN, _INT64_MAX)
    _check_range(f"{where}.fileMode", node.file_mode, 0, _UINT32_MAX)
    _check_range(f"{where}.uid", node.uid, 0, _UINT32_MAX)
    _check_range(f"{where}.gid", node.gid, 0, _UINT32_MAX)


_NODE_TYPES_OR_UNSET = ("", *DEVICE_NODE_TYPES)


def _plainly_valid_node(node: DeviceNode) -> bool:
    """True only for a node `_check_device_node` accepts: the quick test for the common
    case (a claim spec has 2048), which builds no error location strings."""
    perms, major, minor = node.permissions, node.major, node.minor
    mode, uid, gid = node.file_mode, node.uid, node.gid
    return (
        type(node.path) is str
        and node.path != ""
        and node.type in _NODE_TYPES_OR_UNSET
        and type(perms) is str
        and not perms.strip("rwm")
        and type(major) is int
        and _INT64_MIN <= major <= _INT64_MAX
        and type(minor) is int
        and _INT64_MIN <= minor <= _INT64_MAX
        and (mode is None or (type(mode) is int and 0 <= mode <= _UINT32_MAX))
        and (uid is None or (type(uid) is int and 0 <= uid <= _UINT32_MAX))
        and (gid is None or (type(gid) is int and 0 <= gid <= _UINT32_MAX))
    )


def _check_hook(where: str, hook: Hook) -> None:
    if hook.hook_name not in HOOK_NAMES:
        raise CDIError(
            f"{where}: invalid hook name {hook.hook_name!r} "
            f"(expected one of {', '.join(HOOK_NAMES)})"
        )
    if not hook.path:
        raise CDIError(f"{where}: {hook.hook_name} hook has an empty path")
    _check_env(f"{where}.env", hook.env)
    _check_range(f"{where}.timeout", hook.timeout, 0, _UINT32_MAX)


def _check_mount(where: str, mount: Mount) -> None:
    if not mount.host_path:
        raise CDIError(f"{where}: mount has an empty hostPath")
    if not mount.container_path:
        raise CDIError(f"{where}: mount has an empty containerPath")


def _check_net_devices(where: str, devices: list[NetDevice]) -> None:
    hosts: dict[str, int] = {}
    names: dict[str, int] = {}
    for index, dev in enumerate(devices):
        here = f"{where}[{index}]"
        if not dev.host_interface_name:
            raise CDIError(f"{here}: net device has an empty hostInterfaceName")
        if not dev.name:
            raise CDIError(f"{here}: net device has an empty name")
        if dev.host_interface_name in hosts:
            raise CDIError(
                f"{here}: hostInterfaceName {dev.host_interface_name!r} is "
                f"already used by {where}[{hosts[dev.host_interface_name]}]"
            )
        if dev.name in names:
            raise CDIError(
                f"{here}: name {dev.name!r} is already used by {where}[{names[dev.name]}]"
            )
        hosts[dev.host_interface_name] = index
        names[dev.name] = index


def _check_intel_rdt(where: str, rdt: IntelRdt) -> None:
    # closID names a resctrl directory: a file name, except that "/" means the root group.
    clos = rdt.clos_id
    if clos != "/" and (len(clos) >= 4096 or clos in (".", "..") or "/" in clos or "\n" in clos):
        raise CDIError(f"{where}.closID: {clos!r} is not a valid file name")


def validate_container_edits(edits: ContainerEdits, where: str = "containerEdits") -> None:
    """Raise CDIError naming the first edit a runtime would refuse to apply."""
    _check_env(f"{where}.env", edits.env)
    for index, node in enumerate(edits.device_nodes):
        if not _plainly_valid_node(node):
            _check_device_node(f"{where}.deviceNodes[{index}]", node)
    for index, hook in enumerate(edits.hooks):
        _check_hook(f"{where}.hooks[{index}]", hook)
    for index, mount in enumerate(edits.mounts):
        _check_mount(f"{where}.mounts[{index}]", mount)
    if edits.intel_rdt is not None:
        _check_intel_rdt(f"{where}.intelRdt", edits.intel_rdt)
    _check_net_devices(f"{where}.netDevices", edits.net_devices)
    for index, gid in enumerate(edits.additional_gids):
        _check_range(f"{where}.additionalGids[{index}]", gid, 0, _UINT32_MAX)


def validate_device(device: Device, where: str = "device") -> None:
    """Raise CDIError unless `device` is valid on its own (uniqueness is the spec's job)."""
    try:
        validate_device_name(device.name)
    except CDIError as err:
        raise CDIError(f"{where}: {err}") from None
    validate_annotations(device.annotations, f"{where}.annotations")
    if device.container_edits.is_empty():
        raise CDIError(f"{where}: device {device.name!r} has empty containerEdits")
    validate_container_edits(device.container_edits, f"{where}.containerEdits")


def validate_spec(spec: Spec) -> None:
    """Raise CDIError unless every runtime that knows the spec's cdiVersion would load it."""
    try:
        check_version(spec)
    except CDIError as err:
        raise CDIError(f"spec.cdiVersion: {err}") from None
    try:
        parse_kind(spec.kind)
    except CDIError as err:
        raise CDIError(f"spec.kind: {err}") from None
    validate_annotations(spec.annotations, "spec.annotations")
    validate_container_edits(spec.container_edits, "spec.containerEdits")
    if not spec.devices:
        raise CDIError("spec.devices: a spec must define at least one device")
    seen: dict[str, int] = {}
    for index, device in enumerate(spec.devices):
        where = f"spec.devices[{index}]"
        validate_device(device, where)
        if device.name in seen:
            raise CDIError(
                f"{where}: device name {device.name!r} is already used by "
                f"spec.devices[{seen[device.name]}]"
            )
        seen[device.name] = index
