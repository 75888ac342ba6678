"""Checkpoint files (`agent.checkpoint`): the only record of what is prepared on a node.

Properties: any bytes decode to a `Checkpoint` or raise `CheckpointCorruptError` (one line);
a valid file with claims that is damaged (bit flips, truncation, deleted/inserted/duplicated
bytes) never reads as a checkpoint that lost claims: it is refused, or it reads back the
same claims. Through `CheckpointStore`, a refused file is left byte for byte as it was and
no temp file is left behind (nothing is written for rejected input).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from fuzz_support import FUZZ, dumps, json_values, mutated, outcome
from hypothesis import example, given
from hypothesis import strategies as st

from agent.checkpoint import (
    Checkpoint,
    CheckpointCorruptError,
    CheckpointStore,
    PreparedDevice,
    PreparedGroup,
    decode,
    encode,
)

uids = st.text(alphabet="0123456789abcdef-", min_size=1, max_size=12)
states = st.sampled_from(["started", "completed", "aborted"])


@st.composite
def checkpoints(draw: st.DrawFn) -> Checkpoint:
    """A non-empty checkpoint of claims in every state."""
    cp = Checkpoint(boot_id=draw(st.sampled_from(["", "b7c0-boot"])))
    for uid in draw(st.lists(uids, min_size=1, max_size=3, unique=True)):
        status = {"allocation": {"devices": {"results": [
            {"driver": "compute-domain.nvidia.com", "device": f"channel-{uid}", "pool": "n1"}]}}}
        state = draw(states)
        cp.start(uid, status=status, name=f"claim-{uid}", namespace="ns")
        if state == "completed":
            cdi_id = f"k8s.compute-domain.nvidia.com/claim={uid}"
            device = PreparedDevice(
                "channel", draw(st.integers(0, 2047)), ["req"], "n1", f"channel-{uid}", [cdi_id]
            )
            cp.complete(uid, status=status, prepared=[PreparedGroup("channel", "dom", [device])],
                        name=f"claim-{uid}", namespace="ns")
        elif state == "aborted":
            cp.mark_aborted(uid, name="n", namespace="ns", now=datetime(2025, 1, 2, tzinfo=UTC))
    return cp


def decoded(data: bytes) -> Checkpoint | None:
    cp, _ = outcome(lambda: decode(data), CheckpointCorruptError)
    assert cp is None or isinstance(cp, Checkpoint)
    return cp


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data):
    decoded(data)


@FUZZ
@given(json_values)
def test_random_json(value):
    decoded(dumps(value))


@FUZZ
@given(checkpoints().flatmap(lambda cp: st.tuples(st.just(cp), mutated(encode(cp)))))
def test_damaged_file_never_loses_claims(pair):
    assert_no_claims_lost(*pair)


def assert_no_claims_lost(original: Checkpoint, damaged: bytes) -> None:
    cp = decoded(damaged)
    if cp is None:
        return
    # Read at all: it must still hold every claim, in the same state (a Go-compatible
    # re-spelling such as "V2" for "v2" or a damaged unknown key may still read).
    assert cp.claims, f"damaged checkpoint read as empty: {damaged!r}"
    assert {u: e.state for u, e in cp.claims.items()} == {
        u: e.state for u, e in original.claims.items()
    }, f"damaged checkpoint read with different claims: {damaged!r}"


@st.composite
def key_damaged(draw: st.DrawFn, cp: Checkpoint) -> bytes:
    """`cp`'s file with one byte of one object key changed (a key is rarer to hit at random
    than a value, and a damaged key is what Go-style decoding silently ignores)."""
    written = encode(cp)
    keys = [m.span(1) for m in re.finditer(rb'"([^"\\]+)":', written)]
    start, end = draw(st.sampled_from(keys))
    index = draw(st.integers(min_value=start, max_value=end - 1))
    byte = draw(st.integers(min_value=0, max_value=255).filter(lambda b: b != written[index]))
    return written[:index] + bytes([byte]) + written[index + 1 :]


@FUZZ
@given(checkpoints().flatmap(lambda cp: st.tuples(st.just(cp), key_damaged(cp))))
def test_damaged_key_never_loses_claims(pair):
    assert_no_claims_lost(*pair)


@FUZZ
@given(checkpoints(), st.data())
def test_truncated_file_is_corrupt(cp, data):
    written = encode(cp)
    cut = data.draw(st.integers(min_value=0, max_value=len(written) - 1))
    with pytest.raises(CheckpointCorruptError):
        decode(written[:cut])


@FUZZ
@given(checkpoints().flatmap(lambda cp: st.tuples(st.just(cp), mutated(encode(cp)))))
def test_store_leaves_a_refused_file_untouched(tmp_path_factory, pair):
    original, damaged = pair
    path = tmp_path_factory.mktemp("cp") / "checkpoint.json"
    path.write_bytes(damaged)
    store = CheckpointStore(path)
    try:
        cp = store.reconcile_boot_id("b7c0-boot")
    except CheckpointCorruptError as err:
        assert str(path) in str(err)
        assert path.read_bytes() == damaged, "a corrupt checkpoint was overwritten"
    else:
        # Same boot or no boot id: claims kept and written back; another boot: reset is right.
        if original.boot_id in ("", "b7c0-boot"):
            assert set(cp.claims) == set(original.claims)
        assert decode(path.read_bytes()) == cp
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.json"]


# --- regressions -----------------------------------------------------------------------------


def _started() -> Checkpoint:
    cp = Checkpoint(boot_id="b1")
    cp.start("uid1", status={}, name="n", namespace="ns")
    return cp


@pytest.mark.parametrize("replacement", [b'"w2"', b'"v3"', b'"V\xb2"', b'"62"'])
def test_damaged_v2_key_is_not_a_silent_reset(replacement):
    # Found by this fuzzing: one flipped bit in the "v2" key made Go-style decoding ignore
    # v2 and fall back to v1, which holds no PrepareStarted/Aborted entry: an empty
    # checkpoint, every in-flight claim forgotten. Now refused (agent/checkpoint/codec.py).
    data = encode(_started())
    assert data.count(b'"v2"') == 1
    with pytest.raises(CheckpointCorruptError, match="a damaged v2"):
        decode(data.replace(b'"v2"', replacement))


def test_case_folded_v2_key_still_reads():
    # Go matches field names case-insensitively, so "V2" is still v2 (no loss, no error).
    data = encode(_started())
    assert decode(data.replace(b'"v2"', b'"V2"')) == _started()


@example(b"")
@example(b"null")
@example(b'{"checksum":0}')
@example(b"{" * 100_000)
@given(st.just(b"{}"))
def test_degenerate_files_are_corrupt_not_empty(data):
    with pytest.raises(CheckpointCorruptError):
        decode(data)
