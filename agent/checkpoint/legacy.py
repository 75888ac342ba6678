"""The 25.3-RC2 checkpoint layout, still read (never written) so such nodes can upgrade.

    {"checksum": N, "v1"?: {"preparedClaims"?: {uid: [group | null] | null}}}

Groups are as today except that each device carries the kubelet gRPC `Device` message with
protobuf-style keys (`request_names`, `pool_name`, `device_name`, `cdi_device_ids`, all
omitempty), and claims have no status. The reference tries this layout only when the file
does not decode as the current one, verifies its single checksum the same way (hash of the
re-marshalled struct with checksum 0), and converts every claim to PrepareCompleted.
"""

from __future__ import annotations

from typing import Any

from agent.checkpoint import godecode as go
from agent.checkpoint.wire import DEVICE_FIELDS, groups_shape

PB_DEVICE_FIELDS = ("request_names", "pool_name", "device_name", "cdi_device_ids")


def legacy_shape(raw: Any) -> dict[str, Any]:
    """`Checkpoint2503RC2` as Go re-marshals it."""
    f = go.fields(raw, "checkpoint", ("checksum", "v1"))
    out: dict[str, Any] = {"checksum": go.uint64(f.get("checksum"), "checksum")}
    if f.get("v1") is not None:
        v1 = go.fields(f["v1"], "v1", ("preparedClaims",))
        claims = go.mapping(v1.get("preparedClaims"), "v1.preparedClaims", _groups)
        out["v1"] = {"preparedClaims": claims} if claims else {}
    return out


def _groups(raw: Any, where: str) -> list[Any] | None:
    """Today's groups, but each device message is the protobuf-keyed one."""
    return groups_shape(raw, where, _pb_device)


def _pb_device(raw: Any, where: str) -> dict[str, Any]:
    f = go.fields(raw, where, PB_DEVICE_FIELDS)
    out: dict[str, Any] = {}
    for key in PB_DEVICE_FIELDS:
        if key in ("request_names", "cdi_device_ids"):
            value: Any = go.strings(f.get(key), f"{where}.{key}")
        else:
            value = go.string(f.get(key), f"{where}.{key}")
        if value:
            out[key] = value
    return out


def to_current_groups(groups: list[Any] | None) -> list[Any]:
    """One claim's legacy groups in today's group shape (the reference's `ToV1`)."""
    converted = []
    for group in groups or ():
        if group is None:  # the reference would dereference nil here
            raise go.LayoutError("null device group in a 25.3-RC2 checkpoint")
        devices = []
        for device in group["devices"] or ():
            devices.append({key: _to_current(device[key]) for key in DEVICE_FIELDS})
        converted.append({"devices": devices, "configState": group["configState"]})
    return converted


def _to_current(prepared: dict[str, Any] | None) -> dict[str, Any] | None:
    if prepared is None:
        return None
    dev = prepared["device"]
    if dev is not None:
        dev = {
            "Requests": dev.get("request_names"),
            "PoolName": dev.get("pool_name", ""),
            "DeviceName": dev.get("device_name", ""),
            "CDIDeviceIDs": dev.get("cdi_device_ids"),
        }
    return {"info": prepared["info"], "device": dev}
