"""Conversion of resource.k8s.io objects between v1 and the beta versions Kubernetes 1.32 and
1.33 serve (v1beta1, v1beta2).

The driver reasons about v1 shapes only; the wire speaks whatever the cluster serves. The
versions differ, for the kinds the driver touches, in two places
(https://github.com/kubernetes/kubernetes/blob/master/pkg/apis/resource/v1beta1/conversion.go):
- a v1beta1 ResourceSlice device keeps its fields under `basic`; v1beta2 and v1 inline them;
- a v1beta1 claim request holds the exact request's fields itself; v1beta2 and v1 put them
  under `exactly` (a request with `firstAvailable` looks the same in all three).
Everything else (claim status and allocation, DeviceClass, slice pools) is the same JSON.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final

Obj = dict[str, Any]

GROUP: Final = "resource.k8s.io"
# Newest first: the version a client picks when the server offers several.
VERSIONS: Final = ("v1", "v1beta2", "v1beta1")
KINDS: Final = {"resourceslices": "ResourceSlice", "resourceclaims": "ResourceClaim",
                "resourceclaimtemplates": "ResourceClaimTemplate",
                "deviceclasses": "DeviceClass"}


def api_version(version: str) -> str:
    return f"{GROUP}/{version}"


def check_version(version: str) -> str:
    """`version` itself, or a ValueError that lists what exists ("v1beta1" or
    "resource.k8s.io/v1beta1" both name v1beta1)."""
    short = version.removeprefix(f"{GROUP}/")
    if short not in VERSIONS:
        raise ValueError(f"resource API version {version!r} is not one of "
                         f"{', '.join(api_version(v) for v in VERSIONS)}")
    return short


def to_v1(obj: Obj, kind: str, version: str) -> Obj:
    """`obj` of `kind` as served in `version`, in v1 shape (a copy; v1 returns it as is)."""
    return _convert(obj, kind, version, "v1", _inline_basic, _wrap_exactly)


def from_v1(obj: Obj, kind: str, version: str) -> Obj:
    """A v1-shaped `obj` of `kind` as `version` serves it (a copy; v1 returns it as is)."""
    return _convert(obj, kind, version, version, _nest_basic, _unwrap_exactly)


def _convert(obj: Obj, kind: str, version: str, target: str,
             device: Callable[[Obj], Obj], request: Callable[[Obj], Obj]) -> Obj:
    """The copy in `target`'s apiVersion; only v1beta1 differs in shape."""
    if version == "v1":
        return obj
    out = copy.deepcopy(obj)
    if "apiVersion" in out:
        out["apiVersion"] = api_version(target)
    if version == "v1beta1":
        _devices(out, kind, device)
        _requests(out, kind, request)
    return out


def _devices(obj: Obj, kind: str, convert: Callable[[Obj], Obj]) -> None:
    if kind != "ResourceSlice":
        return
    spec = obj.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("devices"), list):
        spec["devices"] = [convert(d) if isinstance(d, dict) else d for d in spec["devices"]]


def _inline_basic(device: Obj) -> Obj:
    basic = device.get("basic")
    rest = {k: v for k, v in device.items() if k != "basic"}
    return {**rest, **basic} if isinstance(basic, dict) else rest


def _nest_basic(device: Obj) -> Obj:
    fields = {k: v for k, v in device.items() if k != "name"}
    out: Obj = {"name": device["name"]} if "name" in device else {}
    if fields:
        out["basic"] = fields
    return out


def _requests(obj: Obj, kind: str, convert: Callable[[Obj], Obj]) -> None:
    if kind == "ResourceClaim":
        spec = obj.get("spec")
    elif kind == "ResourceClaimTemplate":
        spec = (obj.get("spec") or {}).get("spec")
    else:
        return
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if isinstance(devices, dict) and isinstance(devices.get("requests"), list):
        devices["requests"] = [convert(r) if isinstance(r, dict) else r
                               for r in devices["requests"]]


def _wrap_exactly(request: Obj) -> Obj:
    if "firstAvailable" in request:
        return {k: v for k, v in request.items()
                if k in ("name", "firstAvailable")}
    exact = {k: v for k, v in request.items() if k != "name"}
    return {"name": request["name"], "exactly": exact} if "name" in request else {
        "exactly": exact}


def _unwrap_exactly(request: Obj) -> Obj:
    exact = request.get("exactly")
    rest = {k: v for k, v in request.items() if k != "exactly"}
    return {**rest, **exact} if isinstance(exact, dict) else rest
