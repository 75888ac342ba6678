"""What the checkpoint records about prepared claims, and the questions Prepare asks it.

One entry per claim UID moves through the reference's states (`ClaimCheckpointState` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/checkpointv.go):
(none) -> PrepareStarted -> PrepareCompleted -> (deleted by Unprepare), or
PrepareStarted -> PrepareAborted (Unprepare before completion) -> (deleted after 90 s).
The aborted "tombstone" makes a late retry of the same Prepare fail instead of re-creating
device state after its Unprepare.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from api import names

# Two kubelet call timeouts: a Prepare retry still in flight when Unprepare ran is over by then.
TOMBSTONE_TTL: Final = timedelta(seconds=2 * names.KUBELET_CALL_TIMEOUT_S)


class ClaimState(StrEnum):
    """`checkpointState` values (a file may hold others; they compare as plain strings)."""

    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    PREPARE_ABORTED = "PrepareAborted"


@dataclass
class PreparedDevice:
    """One prepared channel or daemon device and what kubelet was told about it."""

    kind: str  # names.DEVICE_TYPE_CHANNEL or names.DEVICE_TYPE_DAEMON
    id: int
    requests: list[str]
    pool: str
    device: str
    cdi_device_ids: list[str] = field(default_factory=list)
    share_id: str | None = None
    # kubeletplugin.DeviceMetadata; neither driver sets it, kept verbatim if a file has it.
    metadata: dict[str, Any] | None = None


@dataclass
class PreparedGroup:
    """The devices one opaque config was applied to (container edits are not persisted)."""

    config_type: str  # names.DEVICE_TYPE_CHANNEL or names.DEVICE_TYPE_DAEMON
    domain_id: str
    devices: list[PreparedDevice] = field(default_factory=list)


@dataclass
class ClaimEntry:
    """A claim's checkpoint record; `status` is its resource.k8s.io/v1 status JSON verbatim."""

    state: str
    status: dict[str, Any] = field(default_factory=dict)
    prepared: list[PreparedGroup] | None = None
    name: str = ""
    namespace: str = ""
    aborted_at: datetime | None = None

    def devices(self) -> list[PreparedDevice]:
        """All prepared devices in group order (what an idempotent Prepare returns again)."""
        return [device for group in self.prepared or () for device in group.devices]

    def non_admin_devices(self) -> set[str]:
        return non_admin_devices(self.status)

    def status_matches(self, status: Mapping[str, Any] | None) -> bool:
        """Whether `status` is semantically the stored one (a stale retry of an aborted claim)."""
        return same_status(self.status, status)


@dataclass
class Checkpoint:
    """All claim entries of this node plus the boot they belong to."""

    claims: dict[str, ClaimEntry] = field(default_factory=dict)
    boot_id: str = ""

    # --- queries --------------------------------------------------------------------------

    def completed_devices_owned_by_others(self, uid: str) -> dict[str, str]:
        """Device name -> owning claim UID, over every other PrepareCompleted entry's
        non-admin devices of this driver (from its stored status): what Prepare's overlap
        check compares a new claim's devices with."""
        owners: dict[str, str] = {}
        for other in sorted(self.claims):
            entry = self.claims[other]
            if other == uid or entry.state != ClaimState.PREPARE_COMPLETED:
                continue
            for device in sorted(entry.non_admin_devices()):
                owners.setdefault(device, other)
        return owners

    def device_overlap(self, uid: str, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        """The first (device, other claim UID) that claim `uid` with `status` would share
        without admin access on either side, or None. Entries not PrepareCompleted, the
        claim itself and other drivers' devices never overlap, as in the reference's
        `validateNoOverlappingPreparedDevices`
        (https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/device_state.go)."""
        wanted = non_admin_devices(status)
        if not wanted:
            return None
        owners = self.completed_devices_owned_by_others(uid)
        for device in sorted(wanted):
            if device in owners:
                return device, owners[device]
        return None

    def channel_owner(self, channel_id: int, exclude_uid: str | None = None) -> str | None:
        """The PrepareCompleted claim holding IMEX channel `channel_id`, if any: entries in
        other states hold no channel, as in the reference's `assertImexChannelNotAllocated`
        (https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/device_state.go)."""
        for uid in sorted(self.claims):
            entry = self.claims[uid]
            if uid == exclude_uid or entry.state != ClaimState.PREPARE_COMPLETED:
                continue
            for device in entry.devices():
                if device.kind == names.DEVICE_TYPE_CHANNEL and device.id == channel_id:
                    return uid
        return None

    def expired_tombstones(self, now: datetime, ttl: timedelta = TOMBSTONE_TTL) -> list[str]:
        """PrepareAborted UIDs aborted at least `ttl` ago, or with no abortedAt."""
        return sorted(
            uid
            for uid, entry in self.claims.items()
            if entry.state == ClaimState.PREPARE_ABORTED
            and (entry.aborted_at is None or now - entry.aborted_at >= ttl)
        )

    def prepared_device_counts(self) -> dict[str, int]:
        """Devices of PrepareCompleted claims per kind (the `prepared_devices` gauge)."""
        counts = {names.DEVICE_TYPE_CHANNEL: 0, names.DEVICE_TYPE_DAEMON: 0}
        for entry in self.claims.values():
            if entry.state == ClaimState.PREPARE_COMPLETED:
                for device in entry.devices():
                    counts[device.kind] = counts.get(device.kind, 0) + 1
        return counts

    # --- transitions ----------------------------------------------------------------------

    def start(self, uid: str, *, status: dict[str, Any], name: str, namespace: str) -> ClaimEntry:
        """Record that Prepare begins (before any side effect: a crash leaves an entry to undo)."""
        entry = ClaimEntry(ClaimState.PREPARE_STARTED, status, None, name, namespace)
        self.claims[uid] = entry
        return entry

    def complete(
        self,
        uid: str,
        *,
        status: dict[str, Any],
        prepared: list[PreparedGroup],
        name: str,
        namespace: str,
    ) -> ClaimEntry:
        """Record that Prepare finished (after the last side effect, the CDI spec write)."""
        entry = ClaimEntry(ClaimState.PREPARE_COMPLETED, status, prepared, name, namespace)
        self.claims[uid] = entry
        return entry

    def mark_aborted(
        self,
        uid: str,
        *,
        name: str,
        namespace: str,
        now: datetime,
        status: dict[str, Any] | None = None,
    ) -> ClaimEntry:
        """Turn an unprepared PrepareStarted entry into a tombstone: devices
        cleared, name/namespace from the Unprepare request, abortedAt = now. `status`
        replaces the stored one when given (a legacy entry whose status was fetched);
        without it, `uid` must have an entry (KeyError otherwise)."""
        if now.tzinfo is None:
            raise ValueError("abortedAt must be timezone-aware")
        if status is None:
            status = self.claims[uid].status
        entry = ClaimEntry(ClaimState.PREPARE_ABORTED, status, None, name, namespace, now)
        self.claims[uid] = entry
        return entry

    def delete(self, uid: str) -> bool:
        """Drop an entry (Unprepare of a completed claim); False if it was absent."""
        return self.claims.pop(uid, None) is not None

    def delete_expired_tombstones(self, now: datetime, ttl: timedelta = TOMBSTONE_TTL) -> list[str]:
        """Delete and return `expired_tombstones(now, ttl)`."""
        expired = self.expired_tombstones(now, ttl)
        for uid in expired:
            del self.claims[uid]
        return expired


def non_admin_devices(status: Mapping[str, Any] | None) -> set[str]:
    """Names of this driver's devices allocated without admin access (the reference's
    `requestedNonAdminDevices` in
    https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/device_state.go).

    A status without allocation yields nothing (the reference crashes there).
    """
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    found: set[str] = set()
    for result in results if isinstance(results, list) else ():
        if not isinstance(result, Mapping) or result.get("driver") != names.DRIVER_NAME:
            continue
        if result.get("adminAccess") is True:
            continue
        device = result.get("device")
        if device is None or isinstance(device, str):
            found.add(device or "")
    return found


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Semantic equality of two claim statuses: absent, null, `[]` and `{}` (also once their
    own empty members are dropped) are alike, as Kubernetes' `Semantic.DeepEqual` treats nil
    and empty slices and maps the same."""
    return _semantic(a or {}) == _semantic(b or {})


def _semantic(value: object) -> object:
    if isinstance(value, Mapping):
        items = ((key, _semantic(item)) for key, item in value.items())
        return {key: item for key, item in items if item is not None and item != {} and item != []}
    if isinstance(value, list):
        return [_semantic(item) for item in value]
    return value
