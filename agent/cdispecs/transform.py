"""The host-root transform: paths seen in the plugin container → host paths.

The plugin sees the host's driver installation under the container driver root
(`/driver-root`); a spec must name host paths, since the runtime reads it on the host.
This mirrors the NVIDIA container toolkit's host root transformer, which the reference
applies to every spec it writes
(https://github.com/NVIDIA/nvidia-container-toolkit/tree/main/pkg/nvcdi/transform/root),
with one fix: a prefix matches only whole path components, so `/driver-root` does not
rewrite `/driver-root-old/x` (the toolkit's `strings.HasPrefix` would turn it into `/-old/x`).
"""

from __future__ import annotations

import dataclasses
import posixpath
from dataclasses import dataclass

from cdi import ContainerEdits, DeviceNode, Hook, Mount, Spec

# Hooks that run in the container's namespaces: their path must resolve there, so it
# is not rewritten (startContainer), and their arguments neither (both).
_CONTAINER_PATH_HOOKS = frozenset({"startContainer"})
_CONTAINER_ARG_HOOKS = frozenset({"createContainer", "startContainer"})


@dataclass(frozen=True)
class RootTransform:
    """Rewrites paths under `container_root` to the same paths under `host_root`."""

    container_root: str
    host_root: str

    def __post_init__(self) -> None:
        for what, root in (("container", self.container_root), ("host", self.host_root)):
            if not root.startswith("/"):
                raise ValueError(f"{what} driver root must be an absolute path, got {root!r}")

    @property
    def active(self) -> bool:
        """False when the two roots are the same string: then specs are left untouched."""
        return self.container_root != self.host_root

    def path(self, path: str) -> str:
        """`path` with the container root prefix replaced, or unchanged if outside it."""
        root = self.container_root.rstrip("/")
        if path != self.container_root and path != root and not path.startswith(root + "/"):
            return path
        rest = path[len(root) :].lstrip("/")
        return posixpath.normpath(posixpath.join(self.host_root, rest))

    def _arg(self, arg: str) -> str:
        if "::" not in arg:
            return self.path(arg)
        # create-symlinks `--link` arguments are `<target>::<link>`: both sides are paths.
        parts = arg.split("::")
        if len(parts) != 2:
            return arg
        return "::".join(self.path(part) for part in parts)

    def _node(self, node: DeviceNode) -> DeviceNode:
        # Spelled out rather than dataclasses.replace, which is twice as slow: a claim
        # spec of 2048 channels goes through here in Prepare.
        return DeviceNode(
            path=node.path,
            host_path=self.path(node.host_path or node.path),
            type=node.type,
            major=node.major,
            minor=node.minor,
            file_mode=node.file_mode,
            permissions=node.permissions,
            uid=node.uid,
            gid=node.gid,
        )

    def _mount(self, mount: Mount) -> Mount:
        return dataclasses.replace(
            mount, host_path=self.path(mount.host_path), options=list(mount.options)
        )

    def _hook(self, hook: Hook) -> Hook:
        path = hook.path if hook.hook_name in _CONTAINER_PATH_HOOKS else self.path(hook.path)
        args = (
            list(hook.args)
            if hook.hook_name in _CONTAINER_ARG_HOOKS
            else [self._arg(arg) for arg in hook.args]
        )
        return dataclasses.replace(hook, path=path, args=args, env=list(hook.env))

    def edits(self, edits: ContainerEdits) -> ContainerEdits:
        """A transformed copy of `edits` (the same object when the transform is inactive)."""
        if not self.active:
            return edits
        return dataclasses.replace(
            edits,
            env=list(edits.env),
            device_nodes=[self._node(node) for node in edits.device_nodes],
            hooks=[self._hook(hook) for hook in edits.hooks],
            mounts=[self._mount(mount) for mount in edits.mounts],
        )

    def spec(self, spec: Spec) -> Spec:
        """A transformed copy of `spec` (the same object when the transform is inactive).

        When active, every device node without a hostPath gets `hostPath = path`, so
        specs written by a transforming plugin need cdiVersion 0.5.0.
        """
        if not self.active:
            return spec
        return dataclasses.replace(
            spec,
            devices=[
                dataclasses.replace(dev, container_edits=self.edits(dev.container_edits))
                for dev in spec.devices
            ],
            container_edits=self.edits(spec.container_edits),
        )


def transform_spec(spec: Spec, container_root: str, host_root: str) -> Spec:
    """`spec` with host paths moved from `container_root` to `host_root` (unchanged if equal)."""
    return RootTransform(container_root, host_root).spec(spec)
