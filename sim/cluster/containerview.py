"""What a container runtime makes of CDI devices: the simulated kubelet's stand-in for a
real container, published where tests, users and `diagnose --sim-root` read it."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdi import container_edits_for, resolve_devices


@dataclass(frozen=True)
class DeviceNodeView:
    """A device node inside the container, with the numbers the runtime settled on."""

    path: str
    type: str
    major: int
    minor: int
    host_path: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "type": self.type,
            "major": self.major,
            "minor": self.minor,
            "hostPath": self.host_path,
        }


@dataclass(frozen=True)
class MountView:
    """A bind mount from the host into the container."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "hostPath": self.host_path,
            "containerPath": self.container_path,
            "options": list(self.options),
        }
        if self.type:
            out["type"] = self.type
        return out


@dataclass(frozen=True)
class ContainerView:
    """What a container gets from its CDI devices, as a runtime would set it up."""

    cdi_ids: tuple[str, ...]
    device_nodes: tuple[DeviceNodeView, ...]
    env: dict[str, str]
    mounts: tuple[MountView, ...]
    hooks: tuple[dict[str, Any], ...] = ()
    additional_gids: tuple[int, ...] = ()

    def mount_at(self, container_path: str) -> MountView | None:
        """The mount at `container_path`, if any."""
        return next((m for m in self.mounts if m.container_path == container_path), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form, for publishing where tests and users read it."""
        return {
            "cdiDevices": list(self.cdi_ids),
            "deviceNodes": [d.to_dict() for d in self.device_nodes],
            "env": dict(self.env),
            "mounts": [m.to_dict() for m in self.mounts],
            "hooks": [dict(h) for h in self.hooks],
            "additionalGids": list(self.additional_gids),
        }


def _node_numbers(host_path: str, type_: str, major: int, minor: int) -> tuple[str, int, int]:
    """Fill a device node's type and numbers from the host file when the spec omits them,
    as runtimes do; a missing host file leaves what the spec said."""
    if type_ and (major or minor or type_ == "p"):
        return type_, major, minor
    try:
        st = Path(host_path).stat()
    except OSError:
        return type_, major, minor
    if stat.S_ISCHR(st.st_mode):
        found = "c"
    elif stat.S_ISBLK(st.st_mode):
        found = "b"
    elif stat.S_ISFIFO(st.st_mode):
        found = "p"
    else:
        return type_, major, minor
    return type_ or found, os.major(st.st_rdev), os.minor(st.st_rdev)


def container_view(cdi_ids: Sequence[str], cdi_dirs: Sequence[Path]) -> ContainerView:
    """Resolve `cdi_ids` against the node's CDI spec dirs and apply them as a runtime does.

    Env entries set later win; a later device node or mount at the same container path
    replaces an earlier one; mounts end up sorted parent-first, as the CDI library sorts
    them. An unresolvable or ambiguous ID raises `cdi.CDIError`, which in a real runtime
    fails the container's creation.
    """
    ids = list(dict.fromkeys(cdi_ids))
    edits = container_edits_for(resolve_devices(ids, list(cdi_dirs)))
    env: dict[str, str] = {}
    for entry in edits.env:
        key, _, value = entry.partition("=")
        env.pop(key, None)
        env[key] = value
    nodes: dict[str, DeviceNodeView] = {}
    for node in edits.device_nodes:
        host = node.host_path or node.path
        type_, major, minor = _node_numbers(host, node.type, node.major, node.minor)
        nodes.pop(node.path, None)
        nodes[node.path] = DeviceNodeView(node.path, type_, major, minor, host)
    mounts: dict[str, MountView] = {}
    for mount in edits.mounts:
        mounts.pop(mount.container_path, None)
        mounts[mount.container_path] = MountView(
            mount.host_path, mount.container_path, tuple(mount.options), mount.type
        )
    ordered = sorted(mounts.values(), key=lambda m: len(Path(m.container_path).parts))
    return ContainerView(
        cdi_ids=tuple(ids),
        device_nodes=tuple(nodes.values()),
        env=env,
        mounts=tuple(ordered),
        hooks=tuple(h.to_dict() for h in edits.hooks),
        additional_gids=tuple(edits.additional_gids),
    )
