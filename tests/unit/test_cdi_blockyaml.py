"""cdi.blockyaml writes PyYAML's exact bytes, or declines: spec files stay byte-for-byte."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import cdispecs
from agent.cdispecs.transform import RootTransform
from cdi import blockyaml, codec

DUMPERS = [yaml.SafeDumper] + ([yaml.CSafeDumper] if hasattr(yaml, "CSafeDumper") else [])

# Plain-looking text, text PyYAML quotes or resolves to another type, and long keys.
TRICKY = [
    "", " ", "a b", "a:b", "a: b", "-", "-a", "--link", "?", ":x", "#x", "a#b", "a #b", "---",
    "...", ".x", "~", "=", "<<", "null", "Null", "true", "False", "yes", "No", "on", "OFF",
    "y", "n", "0", "-1", "+1", "1_000", "0x1F", "0o17", "017", "0b101", "1.5", "1e3", ".5",
    "1.0.0", ".inf", ".NaN", "1:20", "2026-12-01", "2026-12-01T10:00:00Z", "é", "a\nb", "a\tb",
    "'q'", '"q"', "[a]", "{a}", "a,b", "&a", "*a", "!a", "|", ">", "%", "@", "`",
    "k" * 99, "k" * 100, "k" * 122, "k" * 123, "k" * 128, "k" * 129, "/" + "p" * 200,
]
texts = st.one_of(
    st.sampled_from(TRICKY),
    st.from_regex(r"[A-Za-z0-9_/][A-Za-z0-9_./=+-]{0,12}", fullmatch=True),
    st.text(max_size=8),
)
scalars = st.one_of(
    texts, st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False, width=32)
)
documents = st.dictionaries(
    texts,
    st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)
        ),
        max_leaves=20,
    ),
    min_size=1,
    max_size=5,
)

# Documents of what the fast path takes (names, paths, ints), so that it is exercised.
simple_texts = st.from_regex(r"[A-Za-z_/][A-Za-z0-9_./=+-]{0,16}", fullmatch=True)
simple_documents = st.dictionaries(
    simple_texts,
    st.recursive(
        st.one_of(simple_texts, st.integers(), st.booleans(), st.none()),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(simple_texts, inner, max_size=4)
        ),
        max_leaves=30,
    ),
    min_size=1,
    max_size=5,
)


def pyyaml(document: Any, dumper: type) -> str:
    return yaml.dump(document, Dumper=dumper, sort_keys=False, default_flow_style=False)


def fast(document: Any, dumper: type) -> str | None:
    return blockyaml.dump(document, dumper.yaml_implicit_resolvers)


@pytest.mark.parametrize("dumper", DUMPERS)
@settings(max_examples=400, deadline=None)
@given(document=documents)
def test_same_bytes_as_pyyaml_or_declines(dumper: type, document: dict[Any, Any]) -> None:
    text = fast(document, dumper)
    if text is not None:
        assert text == pyyaml(document, dumper)


@pytest.mark.parametrize("dumper", DUMPERS)
@settings(max_examples=400, deadline=None)
@given(document=simple_documents)
def test_simple_documents(dumper: type, document: dict[Any, Any]) -> None:
    text = fast(document, dumper)
    if text is not None:
        assert text == pyyaml(document, dumper)


@pytest.mark.parametrize("dumper", DUMPERS)
def test_layouts(dumper: type) -> None:
    document = {
        "a": 1,
        "b": [1, [2, 3], {"c": [4], "d": {"e": None}}, [], {}],
        "f": {"g": [{"h": True, "i": []}, {"j": {}}], "k": {"l": "m/n=o"}},
        "p": [[[5]]],
        "q": [],
        "r": {},
    }
    assert fast(document, dumper) == pyyaml(document, dumper)


@pytest.mark.parametrize("dumper", DUMPERS)
def test_shared_objects_are_left_to_pyyaml(dumper: type) -> None:
    """PyYAML writes an object met twice as an anchor and an alias."""
    for shared in ([1], {"a": 1}, [], {}):
        document = {"x": shared, "y": [shared]}
        assert fast(document, dumper) is None
        assert "&id001" in pyyaml(document, dumper)


@pytest.mark.parametrize("dumper", DUMPERS)
@pytest.mark.parametrize("text", TRICKY)
def test_tricky_text(dumper: type, text: str) -> None:
    for document in ({"k": text}, {text: 1}, {"k": [text]}, {"k": [{"a": text, text: 2}]}):
        out = fast(document, dumper)
        assert out is None or out == pyyaml(document, dumper)


@pytest.mark.parametrize("transform", [None, RootTransform("/driver-root", "/")])
def test_all_channels_claim_spec_takes_the_fast_path(transform: RootTransform | None) -> None:
    """The 2048-channel claim spec of Prepare: written here, as PyYAML writes it."""
    edits = cdispecs.channel_edits(234, range(2048))
    spec = cdispecs.claim_spec("uid-1", [("channel-0", edits)], transform=transform)
    assert spec is not None
    spec = dataclasses.replace(spec, cdi_version="0.5.0")
    document = spec.to_dict()
    assert fast(document, codec._DUMPER) is not None
    assert codec.spec_to_yaml(spec) == "---\n" + pyyaml(document, codec._DUMPER)
