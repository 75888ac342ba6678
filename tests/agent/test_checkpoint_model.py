"""The questions Prepare/Unprepare/cleanup ask the checkpoint, with the reference's cases.

Those are tests of device_state_test.go and cleanup_test.go in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/tree/main/cmd/compute-domain-kubelet-plugin.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.checkpoint import (
    TOMBSTONE_TTL,
    Checkpoint,
    ClaimEntry,
    ClaimState,
    PreparedDevice,
    PreparedGroup,
    decode,
    encode,
    non_admin_devices,
    same_status,
)

DRIVER = "compute-domain.nvidia.com"
COMPLETED = ClaimState.PREPARE_COMPLETED
STARTED = ClaimState.PREPARE_STARTED
ABORTED = ClaimState.PREPARE_ABORTED
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


def result(request: str, driver: str, device: str, admin: bool | None = None) -> dict:
    out = {"request": request, "driver": driver, "pool": "pool", "device": device}
    if admin is not None:
        out["adminAccess"] = admin
    return out


def status(*results: dict) -> dict:
    return {"allocation": {"devices": {"results": list(results)}}}


def prepared(kind: str, device_id: int) -> list[PreparedGroup]:
    device = PreparedDevice(kind, device_id, ["request"], "pool", f"{kind}-{device_id}", [])
    return [PreparedGroup(kind, "cd-uid", [device])]


# --- requested non-admin devices -----------------------------------------------------------


def test_requested_non_admin_devices():
    st = status(
        result("request-1", DRIVER, "channel-0"),
        result("request-2", DRIVER, "daemon-0", admin=False),
        result("request-3", DRIVER, "admin-device", admin=True),
        result("request-4", "other.example.com", "other-device"),
    )
    assert non_admin_devices(st) == {"channel-0", "daemon-0"}


@pytest.mark.parametrize(
    "st",
    [None, {}, {"allocation": None}, {"allocation": {"devices": {}}}, {"allocation": "x"}],
)
def test_non_admin_devices_of_a_status_without_allocation_is_empty(st):
    assert non_admin_devices(st) == set()


# --- no overlapping prepared devices ---------------------------------------------------------


@pytest.mark.parametrize(
    ("existing_uid", "existing", "incoming_uid", "incoming", "conflict"),
    [
        pytest.param(
            "existing-uid",
            ClaimEntry(COMPLETED, status(result("request", DRIVER, "channel-0"))),
            "incoming-uid",
            status(result("request", DRIVER, "channel-0")),
            ("channel-0", "existing-uid"),
            id="rejects-non-admin-overlap-with-completed-different-claim",
        ),
        pytest.param(
            "same-uid",
            ClaimEntry(COMPLETED, status(result("request", DRIVER, "channel-0"))),
            "same-uid",
            status(result("request", DRIVER, "channel-0")),
            None,
            id="allows-overlap-with-same-claim",
        ),
        pytest.param(
            "existing-uid",
            ClaimEntry(STARTED, status(result("request", DRIVER, "channel-0"))),
            "incoming-uid",
            status(result("request", DRIVER, "channel-0")),
            None,
            id="ignores-incomplete-prepared-claims",
        ),
        pytest.param(
            "existing-uid",
            ClaimEntry(ABORTED, status(result("request", DRIVER, "channel-0")), aborted_at=NOW),
            "incoming-uid",
            status(result("request", DRIVER, "channel-0")),
            None,
            id="ignores-aborted-claims",
        ),
        pytest.param(
            "existing-uid",
            ClaimEntry(COMPLETED, status(result("request", DRIVER, "channel-0"))),
            "incoming-uid",
            status(result("request", DRIVER, "channel-0", admin=True)),
            None,
            id="allows-current-admin-access-overlap",
        ),
        pytest.param(
            "existing-uid",
            ClaimEntry(COMPLETED, status(result("request", DRIVER, "channel-0", admin=True))),
            "incoming-uid",
            status(result("request", DRIVER, "channel-0")),
            None,
            id="allows-existing-admin-access-overlap",
        ),
        pytest.param(
            "existing-uid",
            ClaimEntry(COMPLETED, status(result("request", "other.example.com", "channel-0"))),
            "incoming-uid",
            status(result("request", DRIVER, "channel-0")),
            None,
            id="ignores-other-drivers",
        ),
        pytest.param(
            "existing-uid",
            ClaimEntry(COMPLETED, {}, prepared("channel", 0)),
            "incoming-uid",
            status(result("request", DRIVER, "channel-0")),
            None,
            id="completed-entry-without-stored-allocation-does-not-crash",
        ),
        pytest.param(
            "existing-uid",
            ClaimEntry(COMPLETED, {"allocation": None}, prepared("channel", 0)),
            "incoming-uid",
            status(result("request", DRIVER, "channel-0")),
            None,
            id="completed-entry-with-null-allocation-does-not-crash",
        ),
    ],
)
def test_no_overlapping_prepared_devices(existing_uid, existing, incoming_uid, incoming, conflict):
    cp = Checkpoint(claims={existing_uid: existing})
    assert cp.device_overlap(incoming_uid, incoming) == conflict
    if conflict is not None:
        device, owner = conflict
        message = f"requested device {device} is already allocated to different claim {owner}"
        assert message == (
            "requested device channel-0 is already allocated to different claim existing-uid"
        )


def test_completed_devices_owned_by_others():
    cp = Checkpoint(
        claims={
            "a": ClaimEntry(COMPLETED, status(result("r", DRIVER, "channel-0"))),
            "b": ClaimEntry(COMPLETED, status(result("r", DRIVER, "daemon-0"))),
            "c": ClaimEntry(STARTED, status(result("r", DRIVER, "channel-1"))),
            "d": ClaimEntry(COMPLETED, {}),
        }
    )
    assert cp.completed_devices_owned_by_others("b") == {"channel-0": "a"}
    assert cp.completed_devices_owned_by_others("x") == {"channel-0": "a", "daemon-0": "b"}


def test_overlap_of_a_claim_without_driver_devices_is_none():
    cp = Checkpoint(claims={"a": ClaimEntry(COMPLETED, status(result("r", DRIVER, "channel-0")))})
    assert cp.device_overlap("b", {}) is None
    assert cp.device_overlap("b", status(result("r", "other.example.com", "channel-0"))) is None


# --- IMEX channel not allocated --------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "check", "owner"),
    [
        pytest.param(ClaimEntry(COMPLETED, {}, prepared("channel", 0)), 0, "existing-uid",
                     id="rejects-completed-claim-using-channel"),
        pytest.param(ClaimEntry(COMPLETED, {}, prepared("channel", 1)), 0, None,
                     id="allows-different-channel"),
        pytest.param(ClaimEntry(STARTED, {}, prepared("channel", 0)), 0, None,
                     id="ignores-incomplete-claim"),
        pytest.param(ClaimEntry(COMPLETED, {}, prepared("daemon", 0)), 0, None,
                     id="ignores-daemon-devices"),
        pytest.param(ClaimEntry(COMPLETED, {}, prepared("channel", 2)), 2, "existing-uid",
                     id="host-managed-checks-the-allocated-id"),
        pytest.param(ClaimEntry(COMPLETED, {}, None), 0, None,
                     id="completed-without-devices"),
    ],
)  # fmt: skip
def test_imex_channel_not_allocated(entry, check, owner):
    cp = Checkpoint(claims={"existing-uid": entry})
    assert cp.channel_owner(check) == owner
    if owner is not None:
        assert cp.channel_owner(check, exclude_uid=owner) is None


# --- state machine -----------------------------------------------------------------------------


def test_completed_claim_returns_exactly_its_checkpointed_devices():
    device = PreparedDevice("channel", 0, ["request"], "pool", "channel-0", ["claim-device"])
    cp = Checkpoint(
        claims={"claim-uid": ClaimEntry(COMPLETED, {}, [PreparedGroup("channel", "", [device])])}
    )
    entry = cp.claims["claim-uid"]
    assert entry.state == "PrepareCompleted"
    assert entry.devices() == [device]


def test_aborted_entry_with_equal_status_is_a_stale_prepare():
    st = status(result("request", DRIVER, "channel-0"))
    cp = Checkpoint(
        claims={"claim-uid": ClaimEntry(ABORTED, st, None, "claim-uid", "default", NOW)}
    )
    entry = cp.claims["claim-uid"]
    assert entry.state == ABORTED and entry.status_matches(st)
    assert cp.claims["claim-uid"].state == ABORTED  # the check changes nothing


@pytest.mark.parametrize(
    ("stored", "current", "match"),
    [
        (status(result("request", DRIVER, "channel-0")),
         status(result("request", DRIVER, "channel-0")), True),
        (status(result("request", DRIVER, "daemon-0")),
         status(result("request", DRIVER, "channel-0")), False),
        ({}, None, True),
        ({"allocation": {"devices": {"results": [], "config": None}}},
         {"allocation": {"devices": {}}}, True),
        ({"reservedFor": []}, {}, True),
        ({"a": 1}, {"a": 2}, False),
    ],
)  # fmt: skip
def test_claim_status_match(stored, current, match):
    assert ClaimEntry(ABORTED, stored).status_matches(current) is match
    assert same_status(stored, current) is match


def test_mark_aborted_clears_devices_and_records_the_request():
    cp = Checkpoint(
        claims={
            "claim-uid": ClaimEntry(
                STARTED, status(result("request", DRIVER, "channel-0")), prepared("channel", 0)
            )
        }
    )
    cp.mark_aborted("claim-uid", name="claim", namespace="default", now=NOW)
    stored = cp.claims["claim-uid"]
    assert stored.state == ABORTED
    assert (stored.name, stored.namespace) == ("claim", "default")
    assert stored.prepared is None
    assert stored.aborted_at == NOW
    assert stored.status == status(result("request", DRIVER, "channel-0"))
    assert decode(encode(cp)) == cp


def test_mark_aborted_requires_an_aware_time():
    cp = Checkpoint(claims={"u": ClaimEntry(STARTED)})
    with pytest.raises(ValueError, match="timezone-aware"):
        cp.mark_aborted("u", name="n", namespace="ns", now=datetime(2025, 1, 1))


def test_delete():
    cp = Checkpoint(claims={"claim-uid": ClaimEntry(COMPLETED)})
    assert cp.delete("claim-uid") is True
    assert "claim-uid" not in cp.claims
    assert cp.delete("claim-uid") is False


def test_delete_expired_tombstones():
    cp = Checkpoint(
        claims={
            "old": ClaimEntry(ABORTED, aborted_at=NOW - TOMBSTONE_TTL - timedelta(seconds=1)),
            "fresh": ClaimEntry(ABORTED, aborted_at=NOW - TOMBSTONE_TTL + timedelta(seconds=1)),
            "completed": ClaimEntry(COMPLETED),
        }
    )
    assert cp.delete_expired_tombstones(NOW, TOMBSTONE_TTL) == ["old"]
    assert set(cp.claims) == {"fresh", "completed"}


@pytest.mark.parametrize(
    ("entry", "expired"),
    [
        (ClaimEntry(ABORTED, aborted_at=NOW - timedelta(seconds=91)), True),
        (ClaimEntry(ABORTED, aborted_at=NOW - timedelta(seconds=90)), True),
        (ClaimEntry(ABORTED, aborted_at=NOW - timedelta(seconds=89)), False),
        (ClaimEntry(ABORTED, aborted_at=NOW - timedelta(seconds=45)), False),
        (ClaimEntry(ABORTED, aborted_at=None), True),
        (ClaimEntry(ABORTED, aborted_at=NOW + timedelta(seconds=5)), False),
        (ClaimEntry(STARTED, aborted_at=NOW - timedelta(days=1)), False),
        (ClaimEntry(COMPLETED), False),
    ],
)
def test_tombstone_expiry(entry, expired):
    cp = Checkpoint(claims={"u": entry})
    assert cp.expired_tombstones(NOW) == (["u"] if expired else [])


def test_tombstone_ttl_is_90_seconds():
    assert timedelta(seconds=90) == TOMBSTONE_TTL


def test_cleanup_run_keeps_fresh_and_removes_old_aborted():
    # The reference's cleanup case: old-aborted at now-91s, fresh-aborted at now-45s, TTL 90 s.
    cp = Checkpoint(
        claims={
            "old-aborted": ClaimEntry(ABORTED, aborted_at=NOW - timedelta(seconds=91)),
            "fresh-aborted": ClaimEntry(ABORTED, aborted_at=NOW - timedelta(seconds=45)),
        }
    )
    assert cp.delete_expired_tombstones(NOW) == ["old-aborted"]
    assert list(cp.claims) == ["fresh-aborted"]


def test_unprepare_of_unknown_uid_finds_nothing():
    cp = Checkpoint()
    assert cp.claims.get("missing-uid") is None
    assert cp.delete("missing-uid") is False


def test_start_then_complete():
    cp = Checkpoint()
    st = status(result("request", DRIVER, "channel-0"))
    cp.start("u", status=st, name="n", namespace="ns")
    assert cp.claims["u"] == ClaimEntry(STARTED, st, None, "n", "ns")
    cp.complete("u", status=st, prepared=prepared("channel", 0), name="n", namespace="ns")
    assert cp.claims["u"] == ClaimEntry(COMPLETED, st, prepared("channel", 0), "n", "ns")


def test_prepared_device_counts_only_count_completed_claims():
    cp = Checkpoint(
        claims={
            "a": ClaimEntry(COMPLETED, {}, prepared("channel", 0)),
            "b": ClaimEntry(COMPLETED, {}, prepared("daemon", 0)),
            "c": ClaimEntry(STARTED, {}, prepared("channel", 1)),
        }
    )
    assert cp.prepared_device_counts() == {"channel": 1, "daemon": 1}
