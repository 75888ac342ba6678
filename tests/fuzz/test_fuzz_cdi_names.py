"""Qualified CDI device names (`cdi.names`): `<vendor>/<class>=<name>` from specs and claims.

Properties: any string parses into three validated parts or raises `CDIError` (one line);
a parsed name formats back to the same string; every valid triple round-trips; the
`QualifiedName`, `is_qualified_name` and `validate_qualified_name` views always agree.
"""

from __future__ import annotations

import string

import pytest
from fuzz_support import FUZZ, mutated, outcome
from hypothesis import example, given
from hypothesis import strategies as st

from cdi.cdi_error import CDIError
from cdi.names import (
    QualifiedName,
    format_qualified_name,
    is_qualified_name,
    parse_kind,
    parse_qualified_name,
)

SYMBOLS = "/=._-: \x00\n\u0430é"  # separators, allowed and forbidden punctuation, look-alikes
name_text = st.text(alphabet=string.ascii_letters + string.digits + SYMBOLS, max_size=24)
vendors = st.from_regex(r"[A-Za-z]([A-Za-z0-9_.-]{0,10}[A-Za-z0-9])?", fullmatch=True)
devices = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.:-]{0,10}[A-Za-z0-9])?", fullmatch=True)


def parsed(text: str):
    parts, _ = outcome(lambda: parse_qualified_name(text), CDIError)
    assert is_qualified_name(text) == (parts is not None)
    if parts is not None:
        assert format_qualified_name(*parts) == text
        assert str(QualifiedName.parse(text)) == text
    return parts


@FUZZ
@given(st.text(max_size=40) | name_text)
@example("/dev/nvidia0")
@example("a/b=")
@example("a/b/c=d")
@example("a/b=c=d")
@example("nvidia.com/gpu=\u0430ll")
def test_any_string(text):
    parsed(text)


@FUZZ
@given(vendors, vendors, devices)
def test_valid_triples_round_trip(vendor, class_, name):
    text = format_qualified_name(vendor, class_, name)
    assert parse_qualified_name(text) == (vendor, class_, name)
    assert QualifiedName.for_device(f"{vendor}/{class_}", name) == QualifiedName.parse(text)


@FUZZ
@given(mutated("k8s.compute-domain.nvidia.com/claim=8b5cd1b6-5f1e-4a5b_channel-0"))
def test_mutated_valid_names(data):
    parsed(data.decode("utf-8", errors="replace"))


@FUZZ
@given(st.text(max_size=30) | name_text)
def test_kinds(text):
    parts, _ = outcome(lambda: parse_kind(text), CDIError)
    if parts is not None:
        assert "/".join(parts) == text


@pytest.mark.parametrize(
    "text", ["", "/", "=", "a/b=c\n", "a/b=c\x00", "a\u0430/b=c", "a/b=-c", "a/b=c-", "1a/b=c"]
)
def test_nasty_names_are_refused(text):
    with pytest.raises(CDIError) as info:
        parse_qualified_name(text)
    assert "\n" not in str(info.value)
