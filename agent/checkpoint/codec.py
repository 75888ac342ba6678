"""The checkpoint file's bytes: the reference driver's exact format, both ways.

Writing: `{"checksum": C1, "v1": V1, "v2": V2}` where V2 holds every entry and V1 (for
downgrades) only PrepareCompleted ones; C1 = checksum of `{"checksum":0,"v1":V1}`, V2's own
checksum = checksum of V2 with its checksum 0 (see `checksum.py`). Because the reference can
read what we write and we can read what it writes, a node switches drivers in place.

Reading: parse as Go would, rebuild what Go would re-marshal (`wire.py`), verify both
checksums on that, then take v2 if present, else v1 (all PrepareCompleted), else nothing.
A file that does not fit the current layout is tried as the 25.3-RC2 layout (`legacy.py`).
Every failure is a `CheckpointCorruptError`; nothing is ever silently reset.
"""

from __future__ import annotations

import difflib
import json
import logging
from typing import Any

from agent.checkpoint import godecode as go
from agent.checkpoint import gojson, legacy, wire
from agent.checkpoint.checkpoint_errors import CheckpointCorruptError
from agent.checkpoint.checksum import checksum
from agent.checkpoint.model import (
    Checkpoint,
    ClaimEntry,
    ClaimState,
    PreparedDevice,
    PreparedGroup,
)
from api import names

log = logging.getLogger(__name__)

_KINDS = (names.DEVICE_TYPE_CHANNEL, names.DEVICE_TYPE_DAEMON)


# --- encoding ------------------------------------------------------------------------------


def encode(cp: Checkpoint) -> bytes:
    """The file content for `cp`, byte for byte what the reference would write."""
    claims = {uid: cp.claims[uid] for uid in sorted(cp.claims)}
    v1_claims = {
        uid: _claim_v1(entry)
        for uid, entry in claims.items()
        if entry.state == ClaimState.PREPARE_COMPLETED
    }
    v1: dict[str, Any] = {"preparedClaims": v1_claims} if v1_claims else {}
    v2: dict[str, Any] = {"checksum": 0}
    if claims:
        v2["preparedClaims"] = {uid: _claim_v2(entry) for uid, entry in claims.items()}
    if cp.boot_id:
        v2["nodeBootID"] = cp.boot_id
    return _assemble(gojson.dumps(v1), gojson.dumps(v2))


_V2_HASHED_HEAD = b'{"checksum":0'


def _assemble(v1_text: bytes, v2_hashed: bytes) -> bytes:
    """The file from the Go JSON of V1 and of V2 with checksum 0 (its first member), each
    encoded once: what `gojson.dumps` gives for the whole document with both checksums
    filled in, byte for byte, without encoding V1 and V2 a second time (every checkpoint
    write is on the path of a Prepare)."""
    if not v2_hashed.startswith(_V2_HASHED_HEAD):
        raise ValueError("v2 must start with its checksum member")
    top = checksum(b'{"checksum":0,"v1":' + v1_text + b"}")
    v2_text = b'{"checksum":%d' % checksum(v2_hashed) + v2_hashed[len(_V2_HASHED_HEAD):]
    return b'{"checksum":%d,"v1":%s,"v2":%s}' % (top, v1_text, v2_text)


def _claim_v1(entry: ClaimEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"status": entry.status}
    if entry.prepared:
        out["preparedDevices"] = [_group(group) for group in entry.prepared]
    return out


def _claim_v2(entry: ClaimEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"checkpointState": str(entry.state), "status": entry.status}
    if entry.prepared:
        out["preparedDevices"] = [_group(group) for group in entry.prepared]
    if entry.name:
        out["name"] = entry.name
    if entry.namespace:
        out["namespace"] = entry.namespace
    if entry.aborted_at is not None:
        out["abortedAt"] = go.format_rfc3339(entry.aborted_at)
    return out


def _group(group: PreparedGroup) -> dict[str, Any]:
    return {
        "devices": [_device(device) for device in group.devices],
        "configState": {"Type": group.config_type, "ComputeDomain": group.domain_id},
    }


def _device(device: PreparedDevice) -> dict[str, Any]:
    if device.kind not in _KINDS:
        raise ValueError(f"prepared device {device.device!r} has unknown kind {device.kind!r}")
    dev: dict[str, Any] = {
        "Requests": list(device.requests),
        "PoolName": device.pool,
        "DeviceName": device.device,
        "CDIDeviceIDs": list(device.cdi_device_ids),
    }
    if device.share_id is not None:
        dev["ShareID"] = device.share_id
    if device.metadata is not None:
        dev["Metadata"] = device.metadata
    prepared = {"info": {"id": device.id}, "device": dev}
    return {kind: prepared if kind == device.kind else None for kind in _KINDS}


# --- decoding ------------------------------------------------------------------------------


def decode(data: bytes) -> Checkpoint:
    """The checkpoint in `data`; `CheckpointCorruptError` for anything else (no path in it:
    the store adds that)."""
    try:
        return _decode(data)
    except gojson.GoJSONError as err:
        raise CheckpointCorruptError(str(err)) from None
    except go.LayoutError as err:
        raise CheckpointCorruptError(f"unsupported content: {err}") from None
    except RecursionError:
        raise CheckpointCorruptError("JSON nested too deeply") from None


def _decode(data: bytes) -> Checkpoint:
    raw = gojson.loads(data)
    try:
        top = wire.top_shape(raw)
    except go.LayoutError as err:
        if _has_v2(raw):  # 25.3-RC2 never wrote v2: a broken v2 must not read as that layout
            raise CheckpointCorruptError(f"not a checkpoint: {err}") from None
        try:
            old = legacy.legacy_shape(raw)
        except go.LayoutError:
            raise CheckpointCorruptError(f"not a checkpoint: {err}") from None
        _verify(old, "25.3-RC2 checkpoint")
        return _from_legacy(old)
    try:
        _verify({"checksum": top["checksum"], **({"v1": top["v1"]} if "v1" in top else {})},
                "v1")
        if "v2" in top:
            _verify(top["v2"], "v2")
    except _ChecksumMismatchError:
        _log_diff(data, top)
        raise
    if "v2" not in top:
        _refuse_damaged_v2(raw)
    if "v2" in top:
        return _from_v2(top["v2"])
    if "v1" in top:
        return _from_v1(top["v1"])
    return Checkpoint()


def _from_v2(v2: dict[str, Any]) -> Checkpoint:
    claims = v2.get("preparedClaims", {})
    return Checkpoint(
        claims={uid: _entry(c, c.get("preparedDevices"), uid) for uid, c in claims.items()},
        boot_id=v2.get("nodeBootID", ""),
    )


def _from_v1(v1: dict[str, Any]) -> Checkpoint:
    """Every v1 claim is PrepareCompleted and has no name (what `CheckpointV1.ToV2` does)."""
    completed = {"checkpointState": ClaimState.PREPARE_COMPLETED}
    claims = v1.get("preparedClaims", {})
    return Checkpoint(
        claims={
            uid: _entry({**completed, **c}, c.get("preparedDevices"), uid)
            for uid, c in claims.items()
        }
    )


def _from_legacy(old: dict[str, Any]) -> Checkpoint:
    """25.3-RC2 claims: PrepareCompleted, no status (Unprepare fetches it), no boot id."""
    claims = old.get("v1", {}).get("preparedClaims", {})
    return Checkpoint(
        claims={
            uid: _entry(
                {"checkpointState": ClaimState.PREPARE_COMPLETED, "status": {}},
                legacy.to_current_groups(groups),
                uid,
            )
            for uid, groups in claims.items()
        }
    )


def _has_v2(raw: Any) -> bool:
    """Whether the file has a non-null `v2` (matched as Go matches field names).

    The reference would fall back to the legacy layout even then, and a file whose v2 does
    not decode but whose v1 is empty would read as an empty checkpoint: a silent reset of
    the PrepareStarted/PrepareAborted entries that we refuse.
    """
    return isinstance(raw, dict) and any(
        key.casefold() == "v2" and value is not None for key, value in raw.items()
    )


def _refuse_damaged_v2(raw: Any) -> None:
    """A file without v2 but with an unknown top-level key is a v2 whose key got damaged.

    Go ignores unknown keys and would fall back to v1, which holds only PrepareCompleted
    claims: a one-byte change of `"v2"` (`"w2"`) would silently drop every PrepareStarted
    and PrepareAborted entry and the boot id. No driver writes other top-level keys without
    v2 (the v1-only layout is exactly `{"checksum", "v1"}`), so such a file is refused.
    """
    if not isinstance(raw, dict):
        return
    known = {name.casefold() for name in wire.TOP_FIELDS}
    unknown = sorted(key for key in raw if key.casefold() not in known)
    if unknown:
        raise CheckpointCorruptError(
            f"no v2 section but unknown top-level field(s) {', '.join(map(repr, unknown))}"
            " (a damaged v2?)"
        )


class _ChecksumMismatchError(CheckpointCorruptError):
    pass


def _log_diff(data: bytes, remarshaled: dict[str, Any]) -> None:
    """The reference's diagnostic for a checksum mismatch (its device_state.go,
    logCheckpointDiff), which its upgrade guide asks users to attach to bug reports: the
    on-disk JSON against what this binary re-marshals from it, both indented, as a unified
    diff. A field this version does not know shows up as a removed line."""
    try:
        ondisk = json.dumps(json.loads(data), indent=2).splitlines(keepends=True)
        ours = json.dumps(json.loads(gojson.dumps(remarshaled)), indent=2).splitlines(
            keepends=True)
    except ValueError as err:
        log.error("checkpoint failed checksum verification; diagnostic dump unavailable (%s)",
                  err)
        return
    diff = "".join(difflib.unified_diff(ondisk, ours, "on-disk", "re-marshaled", n=3))
    log.error("checkpoint failed checksum verification; unified diff (on-disk vs re-marshaled "
              "by current binary):\n%s", diff)


def _verify(shape: dict[str, Any], what: str) -> None:
    recorded = shape["checksum"]
    computed = checksum(gojson.dumps({**shape, "checksum": 0}))
    if recorded != computed:
        raise _ChecksumMismatchError(
            f"{what} checksum mismatch: recorded {recorded}, content hashes to {computed}"
        )


def _entry(claim: dict[str, Any], groups: list[Any] | None, uid: str) -> ClaimEntry:
    aborted_at = claim.get("abortedAt")
    return ClaimEntry(
        state=_state(claim["checkpointState"]),
        status=claim["status"],
        prepared=None if not groups else [_model_group(g, uid) for g in groups],
        name=claim.get("name", ""),
        namespace=claim.get("namespace", ""),
        aborted_at=None if aborted_at is None else go.rfc3339(aborted_at, "abortedAt"),
    )


def _state(value: str) -> str:
    try:
        return ClaimState(value)
    except ValueError:
        return value


def _model_group(group: dict[str, Any] | None, uid: str) -> PreparedGroup:
    if group is None:
        raise go.LayoutError(f"claim {uid}: null device group")
    config = group["configState"]
    return PreparedGroup(
        config_type=config["Type"],
        domain_id=config["ComputeDomain"],
        devices=[_model_device(device, uid) for device in group["devices"] or ()],
    )


def _model_device(device: dict[str, Any], uid: str) -> PreparedDevice:
    present = [kind for kind in _KINDS if device.get(kind) is not None]
    if len(present) != 1:
        raise go.LayoutError(f"claim {uid}: a device must be exactly one of channel or daemon")
    kind = present[0]
    prepared = device[kind]
    if prepared["info"] is None or prepared["device"] is None:
        raise go.LayoutError(f"claim {uid}: {kind} device without info or device")
    dev = prepared["device"]
    return PreparedDevice(
        kind=kind,
        id=prepared["info"]["id"],
        requests=list(dev["Requests"] or ()),
        pool=dev["PoolName"],
        device=dev["DeviceName"],
        cdi_device_ids=list(dev["CDIDeviceIDs"] or ()),
        share_id=dev.get("ShareID"),
        metadata=dev.get("Metadata"),
    )
