"""Dedupe and sort container edits as the toolkit's spec simplifier does, so specs are stable.

Device nodes (by path) and mounts (by container path) are ordered by path depth, then
lexicographically: parents are mounted before their children, and 2048 channels read
channel0, channel1, channel10, channel100, ... Environment and hooks keep their order,
which is meaningful.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from cdi import ContainerEdits, Spec

T = TypeVar("T")


def path_order(path: str) -> tuple[int, str]:
    """Sort key: depth (number of `/` in the cleaned path), then the path itself."""
    clean = posixpath.normpath(path) if path else path
    return clean.count("/"), clean


def _dedupe(items: Iterable[T], key: Callable[[T], Any]) -> list[T]:
    seen: set[Any] = set()
    out = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


def _as_key(item: Any) -> str:
    return json.dumps(item.to_dict(), sort_keys=True)


def simplify_edits(edits: ContainerEdits) -> ContainerEdits:
    """A copy of `edits` without exact duplicates, device nodes and mounts sorted."""
    nodes = _dedupe(edits.device_nodes, _as_key)
    mounts = _dedupe(edits.mounts, _as_key)
    return dataclasses.replace(
        edits,
        env=_dedupe(edits.env, lambda e: e),
        device_nodes=sorted(nodes, key=lambda n: path_order(n.path)),
        hooks=_dedupe(edits.hooks, _as_key),
        mounts=sorted(mounts, key=lambda m: path_order(m.container_path)),
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
