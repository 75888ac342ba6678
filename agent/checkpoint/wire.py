"""The reference's on-disk checkpoint layout (v1 + v2), as Go would re-marshal it.

Each `*_shape` function takes parsed JSON and returns exactly the JSON value Go's
`json.Marshal` produces after `json.Unmarshal` into the reference's structs: fields in
struct order, `omitempty` applied, `null`s where Go writes them, map keys sorted, unknown
keys dropped. Hashing that value is how the reference verifies a checksum, and these
shapes are also what the encoder builds from the model, so both directions agree by
construction.

    Checkpoint      {"checksum", "v1"?, "v2"?}
    CheckpointV1    {"preparedClaims"?: {uid: {"status", "preparedDevices"?}}}
    CheckpointV2    {"checksum", "preparedClaims"?: {uid: ClaimV2}, "nodeBootID"?}
    ClaimV2         {"checkpointState", "status", "preparedDevices"?, "name"?, "namespace"?,
                     "abortedAt"?}
    group           {"devices": [{"channel": X | null, "daemon": X | null}], "configState":
                     {"Type", "ComputeDomain"}}
    X               {"info": {"id"} | null, "device": DEV | null}
    DEV             {"Requests", "PoolName", "DeviceName", "CDIDeviceIDs", "ShareID"?,
                     "Metadata"?}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.checkpoint import godecode as go

TOP_FIELDS = ("checksum", "v1", "v2")
V1_FIELDS = ("preparedClaims",)
V2_FIELDS = ("checksum", "preparedClaims", "nodeBootID")
CLAIM_V1_FIELDS = ("status", "preparedDevices")
CLAIM_V2_FIELDS = ("checkpointState", "status", "preparedDevices", "name", "namespace", "abortedAt")
GROUP_FIELDS = ("devices", "configState")
CONFIG_STATE_FIELDS = ("Type", "ComputeDomain")
DEVICE_FIELDS = ("channel", "daemon")
PREPARED_FIELDS = ("info", "device")
INFO_FIELDS = ("id",)
DEV_FIELDS = ("Requests", "PoolName", "DeviceName", "CDIDeviceIDs", "ShareID", "Metadata")

# Decodes the device message a prepared channel/daemon carries: `dev_shape` here, the
# protobuf-keyed message in the 25.3-RC2 layout (legacy.py).
DevShape = Callable[[Any, str], dict[str, Any]]


def top_shape(raw: Any) -> dict[str, Any]:
    """`Checkpoint`; `v1` and `v2` omitted when absent or null."""
    f = go.fields(raw, "checkpoint", TOP_FIELDS)
    out: dict[str, Any] = {"checksum": go.uint64(f.get("checksum"), "checksum")}
    if f.get("v1") is not None:
        out["v1"] = v1_shape(f["v1"])
    if f.get("v2") is not None:
        out["v2"] = v2_shape(f["v2"])
    return out


def v1_shape(raw: Any) -> dict[str, Any]:
    f = go.fields(raw, "v1", V1_FIELDS)
    claims = go.mapping(f.get("preparedClaims"), "v1.preparedClaims", claim_v1_shape)
    return {"preparedClaims": claims} if claims else {}


def v2_shape(raw: Any) -> dict[str, Any]:
    f = go.fields(raw, "v2", V2_FIELDS)
    out: dict[str, Any] = {"checksum": go.uint64(f.get("checksum"), "v2.checksum")}
    claims = go.mapping(f.get("preparedClaims"), "v2.preparedClaims", claim_v2_shape)
    if claims:
        out["preparedClaims"] = claims
    boot_id = go.string(f.get("nodeBootID"), "v2.nodeBootID")
    if boot_id:
        out["nodeBootID"] = boot_id
    return out


def claim_v1_shape(raw: Any, where: str) -> dict[str, Any]:
    f = go.fields(raw, where, CLAIM_V1_FIELDS)
    out: dict[str, Any] = {"status": go.verbatim_object(f.get("status"), f"{where}.status")}
    groups = groups_shape(f.get("preparedDevices"), f"{where}.preparedDevices", dev_shape)
    if groups:
        out["preparedDevices"] = groups
    return out


def claim_v2_shape(raw: Any, where: str) -> dict[str, Any]:
    f = go.fields(raw, where, CLAIM_V2_FIELDS)
    out: dict[str, Any] = {
        "checkpointState": go.string(f.get("checkpointState"), f"{where}.checkpointState"),
        "status": go.verbatim_object(f.get("status"), f"{where}.status"),
    }
    groups = groups_shape(f.get("preparedDevices"), f"{where}.preparedDevices", dev_shape)
    if groups:
        out["preparedDevices"] = groups
    for key in ("name", "namespace"):
        value = go.string(f.get(key), f"{where}.{key}")
        if value:
            out[key] = value
    aborted_at = go.rfc3339(f.get("abortedAt"), f"{where}.abortedAt")
    if aborted_at is not None:
        out["abortedAt"] = go.format_rfc3339(aborted_at)
    return out


def groups_shape(raw: Any, where: str, dev: DevShape) -> list[Any] | None:
    """`[]*PreparedDeviceGroup`: a null element stays null (Go keeps a nil pointer)."""
    return go.array(raw, where, lambda g, w: None if g is None else group_shape(g, w, dev))


def group_shape(raw: Any, where: str, dev: DevShape) -> dict[str, Any]:
    f = go.fields(raw, where, GROUP_FIELDS)
    return {
        "devices": go.array(
            f.get("devices"), f"{where}.devices", lambda d, w: device_shape(d, w, dev)
        ),
        "configState": config_state_shape(f.get("configState"), f"{where}.configState"),
    }


def config_state_shape(raw: Any, where: str) -> dict[str, str]:
    f = go.fields(raw, where, CONFIG_STATE_FIELDS)
    return {
        "Type": go.string(f.get("Type"), f"{where}.Type"),
        "ComputeDomain": go.string(f.get("ComputeDomain"), f"{where}.ComputeDomain"),
    }


def device_shape(raw: Any, where: str, dev: DevShape) -> dict[str, Any]:
    f = go.fields(raw, where, DEVICE_FIELDS)
    return {key: prepared_shape(f.get(key), f"{where}.{key}", dev) for key in DEVICE_FIELDS}


def prepared_shape(raw: Any, where: str, dev: DevShape) -> dict[str, Any] | None:
    """`*PreparedComputeDomainChannel` / `*PreparedComputeDomainDaemon`."""
    if raw is None:
        return None
    f = go.fields(raw, where, PREPARED_FIELDS)
    info = f.get("info")
    if info is not None:
        info_fields = go.fields(info, f"{where}.info", INFO_FIELDS)
        info = {"id": go.int64(info_fields.get("id"), f"{where}.info.id")}
    device = f.get("device")
    return {"info": info, "device": None if device is None else dev(device, f"{where}.device")}


def dev_shape(raw: Any, where: str) -> dict[str, Any]:
    """`CheckpointedDevice`: `ShareID` and `Metadata` only when non-nil."""
    f = go.fields(raw, where, DEV_FIELDS)
    out: dict[str, Any] = {
        "Requests": go.strings(f.get("Requests"), f"{where}.Requests"),
        "PoolName": go.string(f.get("PoolName"), f"{where}.PoolName"),
        "DeviceName": go.string(f.get("DeviceName"), f"{where}.DeviceName"),
        "CDIDeviceIDs": go.strings(f.get("CDIDeviceIDs"), f"{where}.CDIDeviceIDs"),
    }
    if f.get("ShareID") is not None:
        out["ShareID"] = go.string(f["ShareID"], f"{where}.ShareID")
    if f.get("Metadata") is not None:
        out["Metadata"] = go.verbatim_object(f["Metadata"], f"{where}.Metadata")
    return out
