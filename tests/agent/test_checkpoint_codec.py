"""The checkpoint file format: the reference driver's JSON and checksums, byte for byte."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from agent.checkpoint import (
    Checkpoint,
    CheckpointCorruptError,
    ClaimEntry,
    ClaimState,
    PreparedDevice,
    PreparedGroup,
    decode,
    encode,
)
from agent.checkpoint.checksum import checksum

BOOT = "0f2a6e3c-1111-2222-3333-444455556666"
DRIVER = "compute-domain.nvidia.com"


def spew_fnv(text: str) -> int:
    """The reference's checksum written out independently of agent.checkpoint: go-spew
    renders a []byte as `([]uint8)[` + decimal byte values joined by single spaces + `]`,
    and the kubelet hashes that text with FNV-1a 32 (offset 2166136261, prime 16777619)."""
    rendered = "([]uint8)[" + " ".join(str(b) for b in text.encode("utf-8")) + "]"
    h = 2166136261
    for b in rendered.encode("ascii"):
        h ^= b
        h = (h * 16777619) % 2**32
    return h


def file_text(v2_body: str | None, *, hashed: str | None = None, v1: str | None = "{}") -> bytes:
    """A reference-format file with the given v1 text and v2 members; both checksums are
    computed with `spew_fnv` over `hashed` (what Go re-marshals) or the text as written."""
    top_hashed = '{"checksum":0}' if v1 is None else '{"checksum":0,"v1":' + v1 + "}"
    text = '{"checksum":' + str(spew_fnv(top_hashed))
    if v1 is not None:
        text += ',"v1":' + v1
    if v2_body is not None:
        v2_sum = spew_fnv('{"checksum":0,' + (hashed or v2_body) + "}")
        text += ',"v2":{"checksum":' + str(v2_sum) + "," + v2_body + "}"
    return (text + "}").encode()


# --- the verified vector -------------------------------------------------------------------


def test_verified_vector_checksums():
    assert checksum(b'{"checksum":0,"v1":{}}') == 1083090442
    assert checksum(b'{"checksum":0,"nodeBootID":"' + BOOT.encode() + b'"}') == 2652663942
    assert spew_fnv('{"checksum":0,"v1":{}}') == 1083090442


def test_fresh_checkpoint_is_the_verified_vector_byte_for_byte():
    expected = (
        b'{"checksum":1083090442,"v1":{},"v2":{"checksum":2652663942,'
        b'"nodeBootID":"0f2a6e3c-1111-2222-3333-444455556666"}}'
    )
    assert encode(Checkpoint(boot_id=BOOT)) == expected
    assert decode(expected) == Checkpoint(boot_id=BOOT)


def test_empty_checkpoint_without_boot_id():
    data = encode(Checkpoint())
    v2_sum = checksum(b'{"checksum":0}')
    assert data == f'{{"checksum":1083090442,"v1":{{}},"v2":{{"checksum":{v2_sum}}}}}'.encode()
    assert decode(data) == Checkpoint()


# --- a hand-written reference-format file ----------------------------------------------------

UID_A = "5f0c4c7e-aaaa-4000-8000-00000000000a"
UID_B = "5f0c4c7e-bbbb-4000-8000-00000000000b"
UID_C = "5f0c4c7e-cccc-4000-8000-00000000000c"
CD = "cd0e8a1b-0000-4000-8000-0000000000cd"

# resource.k8s.io/v1 ResourceClaimStatus fields in Go's struct order, as the API server sends.
STATUS_A = (
    '{"allocation":{"devices":{"results":[{"request":"channel","driver":"' + DRIVER + '",'
    '"pool":"node-a","device":"channel-0"}],"config":[{"source":"FromClaim","requests":'
    '["channel"],"opaque":{"driver":"' + DRIVER + '","parameters":{"apiVersion":'
    '"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"' + CD + '",'
    '"allocationMode":"Single"}}}]},"nodeSelector":{"nodeSelectorTerms":[{"matchFields":'
    '[{"key":"metadata.name","operator":"In","values":["node-a"]}]}]},'
    '"allocationTimestamp":"2025-06-01T10:00:00Z"},"reservedFor":[{"resource":"pods",'
    '"name":"worker-0","uid":"0000-pod"}]}'
)
STATUS_B = (
    '{"allocation":{"devices":{"results":[{"request":"daemon","driver":"' + DRIVER + '",'
    '"pool":"node-a","device":"daemon-0"}]}}}'
)
GROUP_A = (
    '[{"devices":[{"channel":{"info":{"id":0},"device":{"Requests":["channel"],'
    '"PoolName":"node-a","DeviceName":"channel-0","CDIDeviceIDs":'
    '["k8s.compute-domain.nvidia.com/claim=' + UID_A + '-channel-0"]}},"daemon":null}],'
    '"configState":{"Type":"channel","ComputeDomain":"' + CD + '"}}]'
)
V1_TEXT = (
    '{"preparedClaims":{"'
    + UID_A
    + '":{"status":'
    + STATUS_A
    + ',"preparedDevices":'
    + GROUP_A
    + "}}}"
)
V2_BODY = (
    '"preparedClaims":{"'
    + UID_A
    + '":{"checkpointState":"PrepareCompleted","status":'
    + STATUS_A
    + ',"preparedDevices":'
    + GROUP_A
    + ',"name":"worker-channel","namespace":"team"},"'
    + UID_B
    + '":{"checkpointState":"PrepareStarted","status":'
    + STATUS_B
    + ',"name":"cd-daemon","namespace":"nvidia-dra-driver"},"'
    + UID_C
    + '":{"checkpointState":"PrepareAborted","status":{},"name":"gone","namespace":"team",'
    '"abortedAt":"2025-06-01T10:05:07Z"}},"nodeBootID":"' + BOOT + '"'
)

EXPECTED = Checkpoint(
    boot_id=BOOT,
    claims={
        UID_A: ClaimEntry(
            state=ClaimState.PREPARE_COMPLETED,
            status=json.loads(STATUS_A),
            prepared=[
                PreparedGroup(
                    config_type="channel",
                    domain_id=CD,
                    devices=[
                        PreparedDevice(
                            kind="channel",
                            id=0,
                            requests=["channel"],
                            pool="node-a",
                            device="channel-0",
                            cdi_device_ids=[
                                f"k8s.compute-domain.nvidia.com/claim={UID_A}-channel-0"
                            ],
                        )
                    ],
                )
            ],
            name="worker-channel",
            namespace="team",
        ),
        UID_B: ClaimEntry(
            state=ClaimState.PREPARE_STARTED,
            status=json.loads(STATUS_B),
            name="cd-daemon",
            namespace="nvidia-dra-driver",
        ),
        UID_C: ClaimEntry(
            state=ClaimState.PREPARE_ABORTED,
            status={},
            name="gone",
            namespace="team",
            aborted_at=datetime(2025, 6, 1, 10, 5, 7, tzinfo=UTC),
        ),
    },
)


def reference_file(hash_text) -> str:
    """The whole file as the reference writes it (top-level checksum over v1 only, then v2
    with its own checksum), with checksums from `hash_text`."""
    top = hash_text('{"checksum":0,"v1":' + V1_TEXT + "}")
    v2 = hash_text('{"checksum":0,' + V2_BODY + "}")
    return f'{{"checksum":{top},"v1":{V1_TEXT},"v2":{{"checksum":{v2},{V2_BODY}}}}}'


@pytest.mark.parametrize(
    "hash_text",
    [lambda t: checksum(t.encode()), spew_fnv],
    ids=["checksum-from-our-code", "checksum-computed-independently"],
)
def test_hand_written_reference_file_is_read(hash_text):
    text = reference_file(hash_text)
    assert decode(text.encode()) == EXPECTED


def test_independent_checksum_agrees_and_reencoding_is_byte_identical():
    ours = reference_file(lambda t: checksum(t.encode()))
    independent = reference_file(spew_fnv)
    assert ours == independent
    assert encode(EXPECTED) == independent.encode()


def test_go_reverifies_by_remarshalling_so_indentation_is_fine():
    text = reference_file(spew_fnv)
    pretty = json.dumps(json.loads(text), indent="\t").encode()
    assert decode(pretty) == EXPECTED


def test_unknown_fields_do_not_break_reading_and_are_not_hashed():
    doc = json.loads(reference_file(spew_fnv))
    doc["version"] = "v3"
    doc["v3"] = {"checksum": 1, "anything": [1, 2]}
    doc["v2"]["future"] = True
    doc["v2"]["preparedClaims"][UID_A]["newField"] = {"x": 1}
    doc["v2"]["preparedClaims"][UID_A]["preparedDevices"][0]["devices"][0]["extra"] = 1
    doc["v1"]["preparedClaims"][UID_A]["extra"] = "y"
    assert decode(json.dumps(doc).encode()) == EXPECTED


def test_status_is_kept_verbatim_including_unknown_status_fields():
    status = (
        '{"allocation":{"devices":{"results":[{"request":"r","driver":"' + DRIVER + '",'
        '"pool":"p","device":"channel-0","futureField":{"z":1,"a":[1.50,2e3]}}]}},'
        '"devices":[{"driver":"x","pool":"p","device":"d","data":{"b":1,"a":0.1}}]}'
    )
    v2 = '"preparedClaims":{"u":{"checkpointState":"PrepareStarted","status":' + status + "}}"
    cp = decode(file_text(v2))
    assert cp.claims["u"].status == json.loads(status)
    assert list(cp.claims["u"].status["devices"][0]["data"]) == ["b", "a"]
    # Re-encoding reproduces the number literals and the key order exactly.
    assert status.encode() in encode(cp)


def test_v1_only_file_becomes_completed_claims_without_names():
    cp = decode(file_text(None, v1=V1_TEXT))
    entry = EXPECTED.claims[UID_A]
    assert cp == Checkpoint(
        claims={
            UID_A: ClaimEntry(
                state=ClaimState.PREPARE_COMPLETED, status=entry.status, prepared=entry.prepared
            )
        }
    )


def test_file_without_v1_or_v2_is_empty():
    assert decode(file_text(None, v1=None)) == Checkpoint()


def test_v2_without_v1_hashes_the_top_level_without_v1():
    v2 = '"nodeBootID":"' + BOOT + '"'
    text = file_text(v2, v1=None)
    assert decode(text) == Checkpoint(boot_id=BOOT)
    with_null_v1 = text.replace(b',"v2":', b',"v1":null,"v2":')
    assert decode(with_null_v1) == Checkpoint(boot_id=BOOT)


def test_go_null_and_omitempty_rules_apply_before_hashing():
    # An explicit empty map is dropped by omitempty, a null status is the empty struct, null
    # name is "", and keys match struct fields case-insensitively, as in Go's decoder.
    v2_hashed = '"preparedClaims":{"u":{"checkpointState":"PrepareStarted","status":{}}}'
    v2_file = (
        '"PreparedClaims":{"u":{"checkpointstate":"PrepareStarted","status":null,'
        '"name":null,"preparedDevices":[]}}'
    )
    text = file_text(v2_file, hashed=v2_hashed)  # v1 hashed as {}
    text = text.replace(b'"v1":{}', b'"v1":{"preparedClaims":{}}', 1)
    text = text.replace(b'{"checksum":', b'{"Checksum":', 1).replace(b'"v2":', b'"V2":')
    assert decode(text) == Checkpoint(
        claims={"u": ClaimEntry(state=ClaimState.PREPARE_STARTED, status={})}
    )


# --- legacy 25.3-RC2 ---------------------------------------------------------------------------

LEGACY_V1 = (
    '{"preparedClaims":{"' + UID_A + '":[{"devices":[{"channel":{"info":{"id":0},"device":'
    '{"request_names":["channel"],"pool_name":"node-a","device_name":"channel-0",'
    '"cdi_device_ids":["k8s.compute-domain.nvidia.com/claim=' + UID_A + '-channel-0"]}},'
    '"daemon":null}],"configState":{"Type":"channel","ComputeDomain":"' + CD + '"}}],'
    '"' + UID_B + '":[{"devices":[{"channel":null,"daemon":{"info":{"id":0},"device":'
    '{"request_names":["daemon"],"pool_name":"node-a","device_name":"daemon-0"}}}],'
    '"configState":{"Type":"daemon","ComputeDomain":"' + CD + '"}}]}}'
)


def test_legacy_25_3_rc2_file_is_verified_and_converted():
    cp = decode(file_text(None, v1=LEGACY_V1))
    assert cp.boot_id == ""
    assert set(cp.claims) == {UID_A, UID_B}
    assert cp.claims[UID_A] == ClaimEntry(
        state=ClaimState.PREPARE_COMPLETED, status={}, prepared=EXPECTED.claims[UID_A].prepared
    )
    daemon = cp.claims[UID_B]
    assert daemon.state == ClaimState.PREPARE_COMPLETED
    assert daemon.devices() == [
        PreparedDevice(kind="daemon", id=0, requests=["daemon"], pool="node-a", device="daemon-0")
    ]
    # From now on it is written in today's layout and reads back the same.
    assert decode(encode(cp)) == cp


def test_broken_v2_is_corrupt_even_when_the_legacy_reading_would_verify():
    # {"checksum":C,"v1":{}} verifies as a 25.3-RC2 file too; the reference would fall back
    # to it and lose the v2 entries. We report the file instead.
    text = file_text('"preparedClaims":{"u":{"checkpointState":5}}')
    with pytest.raises(CheckpointCorruptError, match="checkpointState: expected a string"):
        decode(text)


def test_legacy_file_with_wrong_checksum_is_corrupt():
    text = '{"checksum":12345,"v1":' + LEGACY_V1 + "}"
    with pytest.raises(CheckpointCorruptError, match=r"25\.3-RC2 checkpoint checksum mismatch"):
        decode(text.encode())


# --- entry shapes round trip -------------------------------------------------------------------


def channel(uid: str, cdi: list[str], channel_id: int = 0) -> PreparedGroup:
    return PreparedGroup(
        "channel",
        CD,
        [
            PreparedDevice(
                "channel", channel_id, ["channel"], "node-a", f"channel-{channel_id}", cdi
            )
        ],
    )


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(
            ClaimEntry(
                ClaimState.PREPARE_COMPLETED,
                json.loads(STATUS_A),
                [channel(UID_A, [f"k8s.compute-domain.nvidia.com/claim={UID_A}-channel-0"])],
                "w",
                "ns",
            ),
            id="completed-channel-1-cdi-id",
        ),
        pytest.param(
            ClaimEntry(
                ClaimState.PREPARE_COMPLETED,
                json.loads(STATUS_A),
                [
                    channel(
                        UID_A, [f"k8s.compute-domain.nvidia.com/claim=c-{i}" for i in range(2048)]
                    )
                ],
                "w",
                "ns",
            ),
            id="completed-channel-2048-cdi-ids",
        ),
        pytest.param(
            ClaimEntry(
                ClaimState.PREPARE_COMPLETED,
                json.loads(STATUS_B),
                [
                    PreparedGroup(
                        "daemon",
                        CD,
                        [
                            PreparedDevice(
                                "daemon",
                                0,
                                ["daemon"],
                                "node-a",
                                "daemon-0",
                                ["k8s.compute-domain.nvidia.com/device=all"],
                                share_id="share-1",
                                metadata={"Attributes": None, "NetworkData": None},
                            )
                        ],
                    )
                ],
                "d",
                "nvidia",
            ),
            id="completed-daemon-with-share-id-and-metadata",
        ),
        pytest.param(
            ClaimEntry(ClaimState.PREPARE_COMPLETED, {}, [channel(UID_A, [])]),
            id="completed-no-cdi-ids-no-status-no-name",
        ),
        pytest.param(
            ClaimEntry(ClaimState.PREPARE_STARTED, json.loads(STATUS_B), None, "d", "nvidia"),
            id="started",
        ),
        pytest.param(
            ClaimEntry(
                ClaimState.PREPARE_ABORTED,
                json.loads(STATUS_B),
                None,
                "d",
                "nvidia",
                datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
            ),
            id="aborted-with-abortedAt",
        ),
        pytest.param(
            ClaimEntry(ClaimState.PREPARE_ABORTED, {}, None, "d", "nvidia", None),
            id="aborted-without-abortedAt",
        ),
    ],
)
def test_round_trip_of_every_entry_shape(entry):
    cp = Checkpoint(claims={"uid": entry}, boot_id=BOOT)
    data = encode(cp)
    assert decode(data) == cp
    assert encode(decode(data)) == data


def test_v1_holds_only_completed_claims():
    cp = Checkpoint(
        claims={
            "a": ClaimEntry(ClaimState.PREPARE_COMPLETED, {}, [channel("a", [])]),
            "b": ClaimEntry(ClaimState.PREPARE_STARTED, {}),
            "c": ClaimEntry(ClaimState.PREPARE_ABORTED, {}, aborted_at=datetime.now(UTC)),
        }
    )
    doc = json.loads(encode(cp))
    assert list(doc) == ["checksum", "v1", "v2"]
    assert list(doc["v1"]["preparedClaims"]) == ["a"]
    assert list(doc["v2"]["preparedClaims"]) == ["a", "b", "c"]


def test_key_order_and_omitempty_of_a_written_entry():
    entry = ClaimEntry(
        ClaimState.PREPARE_ABORTED,
        {},
        None,
        "n",
        "",
        datetime(2025, 1, 2, 3, 4, 5, 999999, tzinfo=UTC),
    )
    doc = json.loads(encode(Checkpoint(claims={"u": entry})))
    claim = doc["v2"]["preparedClaims"]["u"]
    assert list(claim) == ["checkpointState", "status", "name", "abortedAt"]
    assert claim["abortedAt"] == "2025-01-02T03:04:05Z"  # UTC, whole seconds, truncated


def test_device_json_layout():
    cp = Checkpoint(claims={"u": ClaimEntry(ClaimState.PREPARE_COMPLETED, {}, [channel("u", [])])})
    group = json.loads(encode(cp))["v2"]["preparedClaims"]["u"]["preparedDevices"][0]
    assert group == {
        "devices": [
            {
                "channel": {
                    "info": {"id": 0},
                    "device": {
                        "Requests": ["channel"],
                        "PoolName": "node-a",
                        "DeviceName": "channel-0",
                        "CDIDeviceIDs": [],
                    },
                },
                "daemon": None,
            }
        ],
        "configState": {"Type": "channel", "ComputeDomain": CD},
    }


def test_abortedat_in_another_offset_is_normalised_to_utc():
    v2 = (
        '"preparedClaims":{"u":{"checkpointState":"PrepareAborted","status":{},'
        '"abortedAt":"2025-06-01T12:05:07.123+02:00"}}'
    )
    hashed = v2.replace("2025-06-01T12:05:07.123+02:00", "2025-06-01T10:05:07Z")
    cp = decode(file_text(v2, hashed=hashed))
    # Held as the file means it after Go's re-marshal: UTC, whole seconds.
    assert cp.claims["u"].aborted_at == datetime(2025, 6, 1, 10, 5, 7, tzinfo=UTC)


# --- Go escaping ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("a<b>c", b"a\\u003cb\\u003ec"),
        ("x&y", b"x\\u0026y"),
        ("gr\u00fc\u00dfe \u65e5\u672c", "gr\u00fc\u00dfe \u65e5\u672c".encode()),
        ("line\u2028sep\u2029", b"line\\u2028sep\\u2029"),
        ('q"b\\', b'q\\"b\\\\'),
        ("\n\r\t\b\f\x01\x1f\x7f", b"\\n\\r\\t\\b\\f\\u0001\\u001f\x7f"),
        ("emoji \U0001f600", "emoji \U0001f600".encode()),
    ],
)
def test_go_escaping_in_written_files(value, escaped):
    cp = Checkpoint(claims={"u": ClaimEntry(ClaimState.PREPARE_STARTED, {"k": value}, name=value)})
    data = encode(cp)
    assert b'"status":{"k":"' + escaped + b'"},"name":"' + escaped + b'"' in data
    assert decode(data) == cp


def test_escaping_is_part_of_the_checksum():
    v2 = '"preparedClaims":{"u":{"checkpointState":"PrepareStarted","status":{},"name":"a<b"}}'
    go_hashed = v2.replace("<", "\\u003c")
    # The file itself may spell `<` raw: Go re-marshals it escaped before hashing.
    assert decode(file_text(v2, hashed=go_hashed)).claims["u"].name == "a<b"


# --- corrupt input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b'{"checksum":1083090442,"v1":{},"v2":{"checksum":2652663942,"nodeBo', "truncated"),
        (b'{"checksum":1083090441,"v1":{}}', "checksum mismatch"),
        (
            b'{"checksum":1083090442,"v1":{},"v2":{"checksum":2652663942,'
            b'"nodeBootID":"0f2a6e3c-1111-2222-3333-444455556667"}}',
            "v2 checksum mismatch",
        ),
        (b'{"checksum":"1083090442","v1":{}}', "not a checkpoint"),
        (b'{"checksum":1083090442.0,"v1":{}}', "not a checkpoint"),
        (b'{"checksum":-1,"v1":{}}', "not a checkpoint"),
        (b"[]", "not a checkpoint"),
        (b"null", "checksum mismatch"),
        (b'{"checksum":1083090442,"v1":{}} x', "not valid JSON"),
        (b'{"checksum":NaN}', "invalid character"),
    ],
)
def test_corrupt_input_is_a_corrupt_checkpoint_error(data, reason):
    with pytest.raises(CheckpointCorruptError, match=reason) as info:
        decode(data)
    assert "\n" not in str(info.value)
    assert "move it aside" in str(info.value)


def test_entry_the_model_cannot_hold_is_corrupt_not_a_crash():
    v2 = (
        '"preparedClaims":{"u":{"checkpointState":"PrepareCompleted","status":{},'
        '"preparedDevices":[{"devices":[{"channel":null,"daemon":null}],'
        '"configState":{"Type":"channel","ComputeDomain":"x"}}]}}'
    )
    with pytest.raises(CheckpointCorruptError, match="exactly one of channel or daemon"):
        decode(file_text(v2))


def test_every_single_bit_flip_of_a_real_file_is_detected_or_harmless():
    data = bytearray(reference_file(spew_fnv).encode())
    v1_view = Checkpoint(
        claims={
            UID_A: ClaimEntry(
                ClaimState.PREPARE_COMPLETED,
                EXPECTED.claims[UID_A].status,
                EXPECTED.claims[UID_A].prepared,
            )
        }
    )
    survivors = []
    for index in range(len(data)):
        mutated = bytearray(data)
        mutated[index] ^= 0x01
        try:
            cp = decode(bytes(mutated))
        except CheckpointCorruptError:
            continue
        survivors.append(index)
        # What Go also accepts: a key whose case changed (keys match case-insensitively), or
        # the "v2" key itself renamed, which makes the file a v1-only one (the top checksum
        # does not cover v2: a weakness of the reference format, kept for compatibility).
        assert cp in (EXPECTED, v1_view), index
    assert survivors, "expected at least the case-flip survivors"


def test_a_checksum_mismatch_logs_the_references_diff(caplog):
    """A newer binary's field this one does not know: the file's checksum covers it, ours
    re-marshals without it, and the error log shows the field as the unified diff the
    reference's upgrade guide asks for (tests/data/reference-wording.yaml kp-checkpoint-diff)."""
    body = '"nodeBootID":"' + BOOT + '","futureField":7'
    with pytest.raises(CheckpointCorruptError, match="checksum mismatch"):
        decode(file_text(body))
    [record] = [r for r in caplog.records if "unified diff" in r.getMessage()]
    assert record.levelname == "ERROR"
    head, diff = record.getMessage().split("\n", 1)
    assert head == ("checkpoint failed checksum verification; unified diff (on-disk vs "
                    "re-marshaled by current binary):")
    assert diff.startswith("--- on-disk\n+++ re-marshaled\n"), diff
    assert '-    "futureField": 7' in diff.splitlines(), diff
    # An intact file logs nothing of the kind.
    caplog.clear()
    decode(file_text('"nodeBootID":"' + BOOT + '"'))
    assert not [r for r in caplog.records if "unified diff" in r.getMessage()]
