"""Dedupe and sort container edits as the toolkit's spec simplifier does, so specs are stable.

Device nodes (by path) and mounts (by container path) are ordered by path depth, then
lexicographically: parents are mounted before their children, and 2048 channels read
channel0, channel1, channel10, channel100, ... Environment and hooks keep their order,
which is meaningful.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from cdi import ContainerEdits, DeviceNode, Hook, Mount, Spec

T = TypeVar("T")


def _already_clean(path: str) -> bool:
    """Whether normpath would return `path` unchanged: absolute, no empty, `.` or `..`
    component, no trailing `/` (it skips normpath for 2048 channel paths)."""
    return path.startswith("/") and "//" not in path and "/." not in path and path[-1] != "/"


def path_order(path: str) -> tuple[int, str]:
    """Sort key: depth (number of `/` in the cleaned path), then the path itself."""
    clean = posixpath.normpath(path) if path and not _already_clean(path) else path
    return clean.count("/"), clean


def _dedupe(items: Iterable[T], key: Callable[[T], Hashable]) -> list[T]:
    seen: set[Hashable] = set()
    out = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


# Exact duplicates are items with equal fields, hence the same JSON in the spec: for the
# fields' declared types a tuple of them is as exact a key as the JSON text, and ~20x
# cheaper to build for 2048 channels.


def _node_key(node: DeviceNode) -> Hashable:
    return (node.path, node.host_path, node.type, node.major, node.minor, node.file_mode,
            node.permissions, node.uid, node.gid)  # fmt: skip


def _mount_key(mount: Mount) -> Hashable:
    return (mount.host_path, mount.container_path, tuple(mount.options), mount.type)


def _hook_key(hook: Hook) -> Hashable:
    return (hook.hook_name, hook.path, tuple(hook.args), tuple(hook.env), hook.timeout)


def _node_order(node: DeviceNode) -> tuple[int, str]:
    return path_order(node.path)


def _mount_order(mount: Mount) -> tuple[int, str]:
    return path_order(mount.container_path)


def simplify_edits(edits: ContainerEdits) -> ContainerEdits:
    """A copy of `edits` without exact duplicates, device nodes and mounts sorted."""
    nodes = _dedupe(edits.device_nodes, _node_key)
    mounts = _dedupe(edits.mounts, _mount_key)
    return dataclasses.replace(
        edits,
        env=_dedupe(edits.env, lambda entry: entry),
        device_nodes=sorted(nodes, key=_node_order),
        hooks=_dedupe(edits.hooks, _hook_key),
        mounts=sorted(mounts, key=_mount_order),
    )


def simplify_spec(spec: Spec) -> Spec:
    """`simplify_edits` applied to the spec-level edits and to every device."""
    return dataclasses.replace(
        spec,
        devices=[
            dataclasses.replace(dev, container_edits=simplify_edits(dev.container_edits))
            for dev in spec.devices
        ],
        container_edits=simplify_edits(spec.container_edits),
    )
