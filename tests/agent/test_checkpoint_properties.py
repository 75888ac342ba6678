"""Properties: decoding fails only with CheckpointCorruptError; encode/decode round-trips."""

from __future__ import annotations

import json
from datetime import UTC

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.checkpoint import (
    Checkpoint,
    CheckpointCorruptError,
    ClaimEntry,
    ClaimState,
    PreparedDevice,
    PreparedGroup,
    decode,
    encode,
    gojson,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    # Integral floats in [2**53, 1e21) are written by Go (and us) without a fraction and so
    # read back as a (different) integer; JSON from the API server never holds such floats.
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not 2**53 <= abs(f) < 1e21)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = ["checksum", "Checksum", "v1", "v2", "preparedClaims", "nodeBootID", "checkpointState",
        "status", "preparedDevices", "devices", "channel", "daemon", "info", "id", "device",
        "configState", "Requests", "CDIDeviceIDs", "abortedAt", "request_names"]  # fmt: skip
checkpointish = st.recursive(
    json_scalars | st.sampled_from(["PrepareCompleted", "2025-01-01T00:00:00Z"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=20,
)


def decodes_or_is_corrupt(data: bytes) -> None:
    try:
        result = decode(data)
    except CheckpointCorruptError as err:
        assert "\n" not in str(err)
        return
    assert isinstance(result, Checkpoint)


@SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes(data):
    decodes_or_is_corrupt(data)


@SETTINGS
@given(json_values)
def test_arbitrary_json(value):
    decodes_or_is_corrupt(json.dumps(value).encode())


@SETTINGS
@given(checkpointish)
def test_checkpoint_like_json(value):
    decodes_or_is_corrupt(json.dumps(value).encode())


# --- generated checkpoints -------------------------------------------------------------------

texts = st.text(max_size=10)
devices = st.builds(
    PreparedDevice,
    kind=st.sampled_from(["channel", "daemon"]),
    id=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    requests=st.lists(texts, max_size=2),
    pool=texts,
    device=texts,
    cdi_device_ids=st.lists(texts, max_size=3),
    share_id=st.none() | texts,
    metadata=st.none() | st.dictionaries(texts, json_values, max_size=2),
)
groups = st.builds(
    PreparedGroup,
    config_type=st.sampled_from(["channel", "daemon"]) | texts,
    domain_id=texts,
    devices=st.lists(devices, max_size=2),
)
entries = st.builds(
    ClaimEntry,
    state=st.sampled_from(list(ClaimState)),
    status=st.dictionaries(texts, json_values, max_size=3),
    prepared=st.none() | st.lists(groups, min_size=1, max_size=2),
    name=texts,
    namespace=texts,
    aborted_at=st.none()
    | st.datetimes(timezones=st.just(UTC)).map(lambda d: d.replace(microsecond=0)),
)
checkpoints = st.builds(
    Checkpoint, claims=st.dictionaries(texts, entries, max_size=3), boot_id=texts
)


@SETTINGS
@given(checkpoints)
def test_encode_decode_round_trip(cp):
    data = encode(cp)
    assert decode(data) == cp
    assert encode(decode(data)) == data


@SETTINGS
@given(checkpoints)
def test_the_file_is_the_go_json_of_the_whole_document(cp):
    """encode assembles the file from V1 and V2 encoded once each: the result must be what
    Go's json.Marshal writes for the whole document."""
    data = encode(cp)
    assert gojson.dumps(gojson.loads(data)) == data


@SETTINGS
@given(checkpoints, st.data())
def test_corrupting_a_written_file_never_crashes(cp, data):
    written = bytearray(encode(cp))
    index = data.draw(st.integers(min_value=0, max_value=len(written) - 1))
    mode = data.draw(st.sampled_from(["flip", "cut", "drop"]))
    if mode == "flip":
        written[index] ^= data.draw(st.integers(min_value=1, max_value=255))
    elif mode == "cut":
        del written[index:]
    else:
        del written[index]
    decodes_or_is_corrupt(bytes(written))
