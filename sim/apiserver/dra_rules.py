"""Hand-written rules of DRA objects (resource.k8s.io/v1) that the JSON schemas miss.

Claims and claim templates (requests, sub-requests, constraints, config, allocation and
reservations), device classes and resource slices, with the limits and messages of the
real server's `validateDeviceClaim` and friends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import (
    child,
    duplicate,
    forbidden,
    index,
    invalid_each,
    invalid_value,
    not_supported,
    required,
    too_long,
    too_many,
)
from sim.apiserver.go_format import GoRepr, go_repr
from sim.apiserver.json_values import as_list, as_str, get_in, json_equal
from sim.apiserver.names_validation import dns1123_label_problems, dns1123_subdomain_problems
from sim.apiserver.object_meta import validate_annotations, validate_labels

_ALLOCATION_MODES: Final = ("All", "ExactCount")


def _driver_name(value: Any, path: str) -> list[Cause]:
    """`ValidateCSIDriverName`, which DRA reuses for driver names."""
    name = as_str(value)
    if not name:
        return [required(path)]
    out = []
    if len(name) > 63:
        out.append(too_long(path, 63))
    out += invalid_each(path, name, dns1123_subdomain_problems(name.lower()))
    return out


def _opaque(config: Any, path: str) -> list[Cause]:
    opaque = get_in(config, "opaque")
    if not isinstance(opaque, Mapping):
        return [required(child(path, "opaque"))]
    opath = child(path, "opaque")
    out = _driver_name(opaque.get("driver"), child(opath, "driver"))
    params = opaque.get("parameters")
    ppath = child(opath, "parameters")
    if params is None:
        out.append(required(ppath))
    elif len(json.dumps(params, separators=(",", ":"))) > 10 * 1024:
        out.append(too_long(ppath, 10 * 1024))
    elif not isinstance(params, Mapping):
        out.append(invalid_value(ppath, "<value omitted>", "must be a valid JSON object"))
    return out


def _request_names(devices: Any) -> dict[str, set[str] | None]:
    names: dict[str, set[str] | None] = {}
    for request in as_list(get_in(devices, "requests")):
        name = as_str(get_in(request, "name"))
        subs = as_list(get_in(request, "firstAvailable"))
        names[name] = {as_str(get_in(s, "name")) for s in subs} if subs else None
    return names


def _request_ref(name: Any, path: str, names: dict[str, set[str] | None]) -> list[Cause]:
    text = as_str(name)
    detail = (
        "must be the name of a request in the claim or the name of a request and a "
        "subrequest separated by '/'"
    )
    segments = text.split("/")
    if len(segments) > 2:
        return [invalid_value(path, text, detail)]
    out = []
    for segment in segments:
        out += invalid_each(path, segment, dns1123_label_problems(segment))
    subs = names.get(segments[0], set())
    known = segments[0] in names and (
        len(segments) == 1 or (subs is not None and segments[1] in subs)
    )
    if not known:
        out.append(invalid_value(path, text, detail))
    return out


def _allocation_mode(request: Mapping[str, Any], path: str) -> list[Cause]:
    mode = request.get("allocationMode") or "ExactCount"  # defaulted
    count = request.get("count")
    if mode == "All":
        if count not in (None, 0):
            return [
                invalid_value(
                    child(path, "count"),
                    count,
                    "must not be specified when allocationMode is 'All'",
                )
            ]
    elif mode == "ExactCount":
        if isinstance(count, int) and count <= 0:
            return [invalid_value(child(path, "count"), count, "must be greater than zero")]
    else:
        return [not_supported(child(path, "allocationMode"), mode, _ALLOCATION_MODES)]
    return []


def _device_class_request(request: Mapping[str, Any], path: str) -> list[Cause]:
    out: list[Cause] = []
    cls = as_str(request.get("deviceClassName"))
    if not cls:
        out.append(required(child(path, "deviceClassName")))
    else:
        out += invalid_each(child(path, "deviceClassName"), cls, dns1123_subdomain_problems(cls))
    out += _selectors(request.get("selectors"), child(path, "selectors"))
    out += _allocation_mode(request, path)
    return out


def _selectors(selectors: Any, path: str) -> list[Cause]:
    out: list[Cause] = []
    items = as_list(selectors)
    if len(items) > 32:
        out.append(too_many(path, len(items), 32))
    for i, sel in enumerate(items):
        spath = index(path, i)
        cel = get_in(sel, "cel")
        if not isinstance(cel, Mapping):
            out.append(required(child(spath, "cel")))
            continue
        expr = cel.get("expression")
        if isinstance(expr, str) and len(expr) > 10 * 1024:
            out.append(too_long(child(child(spath, "cel"), "expression"), 10 * 1024))
    return out


def validate_device_claim(devices: Any, path: str) -> list[Cause]:
    """`validateDeviceClaim`: requests, constraints and config of a claim (or template)."""
    if not isinstance(devices, Mapping):
        return []
    out: list[Cause] = []
    names = _request_names(devices)
    requests = as_list(devices.get("requests"))
    rpath = child(path, "requests")
    if len(requests) > 32:
        out.append(too_many(rpath, len(requests), 32))
    seen: set[str] = set()
    for i, request in enumerate(requests):
        if not isinstance(request, Mapping):
            continue
        qpath = index(rpath, i)
        name = as_str(request.get("name"))
        out += (
            invalid_each(child(qpath, "name"), name, dns1123_label_problems(name))
            if name
            else [required(child(qpath, "name"))]
        )
        exactly = request.get("exactly")
        first = as_list(request.get("firstAvailable"))
        if exactly is None and not first:
            out.append(required(qpath, "exactly one of `exactly` or `firstAvailable` is required"))
        elif exactly is not None and first:
            out.append(
                invalid_value(
                    qpath,
                    None,
                    "exactly one of `exactly` or `firstAvailable` "
                    "is required, but multiple fields are set",
                )
            )
        elif first:
            sub_seen: set[str] = set()
            for j, sub in enumerate(first):
                if not isinstance(sub, Mapping):
                    continue
                spath = index(child(qpath, "firstAvailable"), j)
                sname = as_str(sub.get("name"))
                out += (
                    invalid_each(child(spath, "name"), sname, dns1123_label_problems(sname))
                    if sname
                    else [required(child(spath, "name"))]
                )
                if sname in sub_seen:
                    out.append(duplicate(spath, sname))
                sub_seen.add(sname)
                out += _device_class_request(sub, spath)
        elif isinstance(exactly, Mapping):
            out += _device_class_request(exactly, child(qpath, "exactly"))
        if name and name in seen:
            out.append(duplicate(qpath, name))
        seen.add(name)
    for i, constraint in enumerate(as_list(devices.get("constraints"))):
        cpath = index(child(path, "constraints"), i)
        for j, ref in enumerate(as_list(get_in(constraint, "requests"))):
            out += _request_ref(ref, index(child(cpath, "requests"), j), names)
        if (
            get_in(constraint, "matchAttribute") is None
            and get_in(constraint, "distinctAttribute") is None
        ):
            out.append(required(child(cpath, "matchAttribute")))
    for i, config in enumerate(as_list(devices.get("config"))):
        cpath = index(child(path, "config"), i)
        ref_seen: set[str] = set()
        for j, ref in enumerate(as_list(get_in(config, "requests"))):
            out += _request_ref(ref, index(child(cpath, "requests"), j), names)
            if isinstance(ref, str) and ref in ref_seen:
                out.append(duplicate(index(child(cpath, "requests"), j), ref))
            ref_seen.add(as_str(ref))
        out += _opaque(config, cpath)
    return out


def _pool_name(value: Any, path: str) -> list[Cause]:
    name = as_str(value)
    if not name:
        return [required(path)]
    out = [too_long(path, 253)] if len(name) > 253 else []
    for part in name.split("/"):
        out += invalid_each(path, part, dns1123_subdomain_problems(part))
    return out


def _allocation(allocation: Any, path: str, names: dict[str, set[str] | None]) -> list[Cause]:
    if not isinstance(allocation, Mapping):
        return []
    out: list[Cause] = []
    dpath = child(path, "devices")
    for i, result in enumerate(as_list(get_in(allocation, "devices", "results"))):
        if not isinstance(result, Mapping):
            continue
        rpath = index(child(dpath, "results"), i)
        out += _request_ref(result.get("request"), child(rpath, "request"), names)
        out += _driver_name(result.get("driver"), child(rpath, "driver"))
        out += _pool_name(result.get("pool"), child(rpath, "pool"))
        device = as_str(result.get("device"))
        out += invalid_each(child(rpath, "device"), device, dns1123_label_problems(device))
    for i, config in enumerate(as_list(get_in(allocation, "devices", "config"))):
        cpath = index(child(dpath, "config"), i)
        source = get_in(config, "source")
        if not source:
            out.append(required(child(cpath, "source")))
        elif source not in ("FromClaim", "FromClass"):
            out.append(not_supported(child(cpath, "source"), source, ("FromClaim", "FromClass")))
        for j, ref in enumerate(as_list(get_in(config, "requests"))):
            out += _request_ref(ref, index(child(cpath, "requests"), j), names)
        out += _opaque(config, cpath)
    return out


def check_resource_claim(obj: Mapping[str, Any]) -> list[Cause]:
    """A ResourceClaim: its device requests, reservations and allocation."""
    devices = get_in(obj, "spec", "devices")
    out = validate_device_claim(devices, "spec.devices")
    status = obj.get("status")
    if isinstance(status, Mapping):
        names = _request_names(devices)
        reserved = as_list(status.get("reservedFor"))
        uids: set[str] = set()
        for i, ref in enumerate(reserved):
            rpath = index("status.reservedFor", i)
            for key in ("resource", "name", "uid"):
                if not as_str(get_in(ref, key)):
                    out.append(required(child(rpath, key)))
            uid = as_str(get_in(ref, "uid"))
            if uid and uid in uids:
                out.append(duplicate(rpath, uid))
            uids.add(uid)
        if reserved and status.get("allocation") is None:
            out.append(
                forbidden("status.reservedFor", "may not be specified when `allocated` is not set")
            )
        out += _allocation(status.get("allocation"), "status.allocation", names)
    return out


# ObjectMeta's fields in Go struct order: a template's claim metadata may set only labels
# and annotations (ValidateTemplateObjectMeta); every other one set is refused.
_TEMPLATE_META_FORBIDDEN: Final = (
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
    "ownerReferences", "finalizers", "managedFields",
)  # fmt: skip


def check_resource_claim_template(obj: Mapping[str, Any]) -> list[Cause]:
    """A ResourceClaimTemplate: the claim's metadata and device requests."""
    template = get_in(obj, "spec")
    out = validate_annotations(
        get_in(template, "metadata", "annotations"), "spec.metadata.annotations"
    )
    out += validate_labels(get_in(template, "metadata", "labels"), "spec.metadata.labels")
    meta = get_in(template, "metadata")
    if isinstance(meta, Mapping):
        out += [forbidden(f"spec.metadata.{key}", "cannot be set")
                for key in _TEMPLATE_META_FORBIDDEN if meta.get(key) not in (None, "", 0, [])]
    return out + validate_device_claim(get_in(template, "spec", "devices"), "spec.spec.devices")


def check_device_class(obj: Mapping[str, Any]) -> list[Cause]:
    """A DeviceClass: its selectors (at most 32, CEL within 10 KiB) and opaque config."""
    out = _selectors(get_in(obj, "spec", "selectors"), "spec.selectors")
    for i, config in enumerate(as_list(get_in(obj, "spec", "config"))):
        out += _opaque(config, index("spec.config", i))
    return out


def check_resource_slice(obj: Mapping[str, Any]) -> list[Cause]:
    """A ResourceSlice: driver, pool, exactly one node selection, unique devices."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    out = _driver_name(spec.get("driver"), "spec.driver")
    pool = spec.get("pool") if isinstance(spec.get("pool"), Mapping) else {}
    out += _pool_name(pool.get("name"), "spec.pool.name")
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or count <= 0:
        out.append(
            invalid_value("spec.pool.resourceSliceCount", count or 0, "must be greater than zero")
        )
    generation = pool.get("generation")
    if isinstance(generation, int) and generation < 0:
        out.append(
            invalid_value(
                "spec.pool.generation", generation, "must be greater than or equal to zero"
            )
        )
    chosen = []
    node_name = spec.get("nodeName")
    if node_name is not None:
        if node_name:
            chosen.append("`nodeName`")
            out += invalid_each(
                "spec.nodeName", as_str(node_name), dns1123_subdomain_problems(as_str(node_name))
            )
        else:
            out.append(
                invalid_value(
                    "spec.nodeName", node_name, "must be either unset or set to a non-empty string"
                )
            )
    if spec.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        terms = as_list(get_in(spec, "nodeSelector", "nodeSelectorTerms"))
        if len(terms) != 1:
            out.append(
                invalid_value(
                    "spec.nodeSelector.nodeSelectorTerms",
                    GoRepr(f"[]core.NodeSelectorTerm{{...{len(terms)} terms...}}"),
                    "must have exactly one node selector term",
                )
            )
    for key in ("allNodes", "perDeviceNodeSelection"):
        value = spec.get(key)
        if value is True:
            chosen.append(f"`{key}`")
        elif value is not None:
            out.append(invalid_value(f"spec.{key}", value, "must be either unset or set to true"))
    options = "`nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"
    if not chosen:
        out.append(required("spec", f"exactly one of {options} is required"))
    elif len(chosen) > 1:
        out.append(
            invalid_value(
                "spec",
                "{" + ", ".join(chosen) + "}",
                f"exactly one of {options} is required, but multiple fields are set",
            )
        )
    if spec.get("sharedCounters") is not None and spec.get("devices") is not None:
        out.append(
            invalid_value("spec", "", "only one of `sharedCounters` or `devices` is allowed")
        )
    seen: set[str] = set()
    for i, device in enumerate(as_list(spec.get("devices"))):
        dpath = index("spec.devices", i)
        name = as_str(get_in(device, "name"))
        out += invalid_each(child(dpath, "name"), name, dns1123_label_problems(name))
        if name in seen:
            out.append(duplicate(dpath, name))
        seen.add(name)
        attributes = get_in(device, "attributes")
        if isinstance(attributes, Mapping):
            for key, attr in attributes.items():
                apath = index(child(dpath, "attributes"), key)
                kinds = [
                    k for k in ("int", "bool", "string", "version") if get_in(attr, k) is not None
                ]
                if len(kinds) != 1:
                    out.append(
                        invalid_value(
                            apath, GoRepr(go_repr(attr)), "exactly one value must be specified"
                        )
                    )
    return out


def allocation_immutable(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """A claim's allocation may be set or cleared, never changed."""
    a, b = get_in(new, "status", "allocation"), get_in(old, "status", "allocation")
    if a is not None and b is not None and not json_equal(a, b):
        return [invalid_value("status.allocation", GoRepr(go_repr(a)), "field is immutable")]
    return []
