"""Shared settings, strategies and assertions of the fuzz tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

# Registered by tests/fuzz/conftest.py (imported before any test module).
FUZZ = settings.get_profile("fuzz")

# Scalars a JSON document can hold, nasty ones favoured: huge and negative numbers, floats
# at the edges, every kind of text (surrogates excluded: they are not valid UTF-8 JSON).
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**30, -1, 0, 2**31, 2**32])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["", " ", "\x00", "../", "..", ".", "/", "\n", "\u202e", "é", "🚀"])
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=15,
)


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


@st.composite
def mutated(draw: st.DrawFn, data: bytes | str) -> bytes:
    """`data` with a few byte-level mutations: flips, cuts, deletions, insertions, dupes."""
    buf = bytearray(data.encode() if isinstance(data, str) else data)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        mode = draw(st.sampled_from(["flip", "cut", "drop", "insert", "dupe", "set"]))
        if not buf:
            buf.extend(draw(st.binary(min_size=1, max_size=4)))
            continue
        i = draw(st.integers(min_value=0, max_value=len(buf) - 1))
        if mode == "flip":
            buf[i] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif mode == "cut":
            del buf[i:]
        elif mode == "drop":
            del buf[i]
        elif mode == "insert":
            buf[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif mode == "dupe":
            j = draw(st.integers(min_value=i, max_value=len(buf)))
            buf[i:i] = buf[i:j]
        else:
            buf[i] = draw(st.sampled_from(b'{}[]",:0 \n\\/.-=eE'))
    return bytes(buf)


def assert_clear_message(err: BaseException, *, max_lines: int = 1) -> None:
    """A rejection an operator can act on: non-empty, bounded number of lines."""
    text = str(err)
    assert text.strip(), f"{type(err).__name__} without a message"
    assert text.count("\n") < max_lines, f"multi-line message: {text!r}"


def outcome(
    fn: Callable[[], Any], *allowed: type[BaseException]
) -> tuple[Any, BaseException | None]:
    """(result, None) or (None, err) for an allowed error; any other exception propagates."""
    try:
        return fn(), None
    except allowed as err:
        assert_clear_message(err)
        return None, err
