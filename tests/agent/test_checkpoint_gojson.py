"""Go `encoding/json` text: escaping, number formatting, and Go's parsing quirks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.checkpoint.checksum import checksum, fnv1a32, spew_bytes
from agent.checkpoint.gojson import GoFloat, GoJSONError, dumps, go_float, loads


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("<script>&</script>", '"\\u003cscript\\u003e\\u0026\\u003c/script\\u003e"'),
        ("\u2028\u2029", '"\\u2028\\u2029"'),
        ("caf\u00e9 \u00fc \u4e2d", '"caf\u00e9 \u00fc \u4e2d"'),
        ("\x00\x07\x0b\x1b\x1f", '"\\u0000\\u0007\\u000b\\u001b\\u001f"'),
        ("\b\f\n\r\t", '"\\b\\f\\n\\r\\t"'),
        ('"\\/', '"\\"\\\\/"'),
        ("\x7f", '"\x7f"'),
        ("lone \ud800 surrogate", '"lone \\ufffd surrogate"'),
    ],
)
def test_string_escaping_matches_go(value, text):
    assert dumps(value) == text.encode("utf-8")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (0.1, "0.1"),
        (-0.0, "-0"),
        (100.0, "100"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1.23456789e-12, "1.23456789e-12"),
        (1e-100, "1e-100"),
        (123456789.125, "123456789.125"),
        (5e-324, "5e-324"),
    ],
)
def test_float_formatting_matches_go(value, text):
    assert go_float(value) == text


def test_non_finite_floats_are_rejected_like_go():
    for value in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="unsupported value"):
            dumps(value)


def test_compact_output_in_given_key_order():
    assert dumps({"b": [1, True, None, "x"], "a": {}}) == b'{"b":[1,true,null,"x"],"a":{}}'


def test_number_literals_survive_a_round_trip():
    data = b'{"a":1.50,"b":2E3,"c":-0.0,"d":1e400,"e":10,"f":%s}' % (b"9" * 5000)
    value = loads(data)
    assert isinstance(value["a"], GoFloat) and value["a"] == 1.5
    assert dumps(value) == data


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'"\\ud800"', "\ufffd"),
        (b'"\\ud83d\\ude00"', "\U0001f600"),
        (b'"\\ude00\\ud83d"', "\ufffd\ufffd"),
        (b'"a\xffb"', "a\ufffdb"),
        (b'"\xe2\x82x"', "\ufffd\ufffdx"),  # Go: one U+FFFD per invalid byte
        (b'"\xed\xa0\x80"', "\ufffd\ufffd\ufffd"),  # an encoded surrogate is invalid UTF-8
        (b'{"k":1,"k":2}', {"k": 2}),
        (b" \t\r\n[1] \n", [1]),
    ],
)
def test_parsing_follows_go(data, expected):
    assert loads(data) == expected


@pytest.mark.parametrize(
    "data",
    [b"NaN", b"[Infinity]", b"-Infinity", b"\xef\xbb\xbf{}", b"{} {}", b"[1,]", b"'a'",
     b"01", b'"\x01"', b"", b" ", b"{" * 100000, b"[" * 100000 + b"]" * 100000],
)  # fmt: skip
def test_go_rejects_what_we_reject(data):
    with pytest.raises(GoJSONError):
        loads(data)


def test_spew_rendering_and_fnv():
    assert spew_bytes(b"{}") == b"([]uint8)[123 125]"
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C  # the published FNV-1a 32 test value
    assert checksum(b'{"checksum":0,"v1":{}}') == 1083090442


def test_checksum_is_fnv1a_of_the_spew_text_for_every_byte_and_length():
    """`checksum` hashes a byte (one spew token) per step: it must equal the plain
    definition for every byte value, at every position of its unrolled loop."""
    every = bytes(range(256))
    for data in [b"", b"\x00", b"\xff", every, every[::-1],
                 *(every[shift:] + every[:shift] for shift in range(1, 9)),
                 *(every[:length] for length in range(1, 12))]:
        assert checksum(data) == fnv1a32(spew_bytes(data)), data[:12]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=700))
def test_checksum_is_fnv1a_of_the_spew_text(data):
    assert checksum(data) == fnv1a32(spew_bytes(data))
