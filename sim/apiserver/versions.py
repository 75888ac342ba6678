"""Built-in groups served in a version other than the one stored, as kube-apiserver does.

The emulator stores resource.k8s.io objects in v1 shape (its validation, defaults, printers
and patch rules are v1's) and can serve the group as Kubernetes 1.32 (v1beta1 only) or 1.33
(v1beta1 and v1beta2) does: a request body in a served version is decoded against that
version's schema, converted to v1 and then admitted; what goes out is converted back
(api/draconvert.py). `resource_versions` picks what discovery lists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from api import draconvert
from sim.apiserver.resources import BUILTIN_RESOURCES, ResourceInfo

Obj = dict[str, Any]

STORAGE_VERSIONS = {draconvert.GROUP: "v1"}


def builtin_resources(resource_versions: Iterable[str] = ("v1",)) -> list[ResourceInfo]:
    """The built-in resources with resource.k8s.io served in `resource_versions`."""
    versions = [draconvert.check_version(v) for v in resource_versions]
    if not versions:
        raise ValueError("serve resource.k8s.io in at least one version")
    out: list[ResourceInfo] = []
    for info in BUILTIN_RESOURCES:
        if info.group != draconvert.GROUP:
            out.append(info)
            continue
        out += [dataclasses.replace(info, version=v) for v in versions]
    return out


def converted(info: ResourceInfo) -> bool:
    """Whether objects of `info` are stored in another version than `info` serves."""
    storage = STORAGE_VERSIONS.get(info.group)
    return info.builtin and storage is not None and info.version != storage


def storage_info(info: ResourceInfo) -> ResourceInfo:
    """`info` at its storage version: what the admission and lifecycle code works with."""
    if not converted(info):
        return info
    return dataclasses.replace(info, version=STORAGE_VERSIONS[info.group])


def to_storage(info: ResourceInfo, obj: Any) -> Any:
    """A served-version body in storage shape; a body naming another apiVersion (or not an
    object) is left for the lifecycle code to refuse with its usual message."""
    if not converted(info) or not isinstance(obj, dict):
        return obj
    if obj.get("apiVersion") not in (None, info.api_version):
        return obj
    out = draconvert.to_v1(obj, info.kind, info.version)
    out["apiVersion"] = storage_info(info).api_version
    return out


def from_storage(info: ResourceInfo, obj: Obj) -> Obj:
    """A stored object as the version `info` serves it."""
    if not converted(info) or not isinstance(obj, dict):
        return obj
    return draconvert.from_v1(obj, info.kind, info.version)
