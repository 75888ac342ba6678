"""Opaque device configs (`api.opaque.decode_config`): untrusted claim parameters.

Property: for any bytes, text or mapping, strict and non-strict decoding either return a
validated config or raise `api.validation_error.ValidationError` with a one-line message; a
returned config's domainID is always a safe path component and label value; the input
mapping is never modified.
"""

from __future__ import annotations

import copy

import orjson
import pytest
from fuzz_support import FUZZ, dumps, json_scalars, json_values, mutated, outcome
from hypothesis import example, given
from hypothesis import strategies as st

from api.opaque import ComputeDomainChannelConfig, ComputeDomainDaemonConfig, decode_config
from api.validation import label_value_problem, path_component_problem
from api.validation_error import ValidationError

AV = "resource.nvidia.com/v1beta1"
UID = "8b5cd1b6-5f1e-4a5b-9a53-0c1d2e3f4a5b"
KINDS = ["ComputeDomainChannelConfig", "ComputeDomainDaemonConfig"]
TRAVERSAL = ["..", ".", "../", "../../etc", "/", "/etc/passwd", "a/b", "a\x00b", "\x00",
             "..\x00", "a/../b", "%2e%2e", "..\\..", "a\nb", " a", "a ", "", "-a", "a-",
             "x" * 64, "\u2024\u2024", "\uff41"]

FIELD_VALUES = json_scalars | st.sampled_from(TRAVERSAL) | json_values

config_like = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from([AV, AV.upper(), "v1", ""]) | FIELD_VALUES,
        "kind": st.sampled_from(KINDS) | FIELD_VALUES,
        "domainID": st.just(UID) | st.sampled_from(TRAVERSAL) | FIELD_VALUES,
        "allocationMode": st.sampled_from(["All", "Single", "", "all", None]) | FIELD_VALUES,
    },
).flatmap(
    lambda known: st.dictionaries(st.text(max_size=12), FIELD_VALUES, max_size=3).map(
        lambda extra: extra | known
    )
)


def check(raw, *, strict: bool):
    before = copy.deepcopy(raw)
    config, err = outcome(lambda: decode_config(raw, strict=strict), ValidationError)
    if isinstance(raw, dict):
        assert raw == before, "decode_config modified its input"
    if err is not None:
        return None
    assert isinstance(config, ComputeDomainChannelConfig | ComputeDomainDaemonConfig)
    assert path_component_problem(config.domain_id) is None
    assert label_value_problem(config.domain_id) is None
    # What we decoded encodes back to something that decodes to the same config.
    assert decode_config(orjson.dumps(config.to_dict())) == config
    return config


@FUZZ
@given(config_like, st.booleans())
def test_config_shaped_mappings(raw, strict):
    config = check(raw, strict=strict)
    if config is not None and strict:
        assert set(raw) <= {"apiVersion", "kind", "domainID", "allocationMode"}


@FUZZ
@given(config_like, st.booleans())
def test_config_shaped_json_bytes_and_text(raw, strict):
    data = dumps(raw)
    a = check(data, strict=strict)
    b = check(data.decode(), strict=strict)
    assert a == b


@FUZZ
@given(json_values, st.booleans())
def test_any_json_document(value, strict):
    # Arrays, strings, numbers, null at the top level: "must be a JSON object", no crash.
    check(dumps(value), strict=strict)


@FUZZ
@given(st.binary(max_size=120), st.booleans())
def test_arbitrary_bytes(data, strict):
    check(data, strict=strict)


VALID = orjson.dumps({"apiVersion": AV, "kind": KINDS[0], "domainID": UID, "allocationMode": "All"})


@FUZZ
@given(mutated(VALID), st.booleans())
def test_mutated_valid_config(data, strict):
    check(data, strict=strict)


@FUZZ
@given(st.sampled_from(KINDS), st.sampled_from(TRAVERSAL) | st.text(max_size=70), st.booleans())
@example(KINDS[0], "../../etc", True)
@example(KINDS[1], "a\x00b", False)
def test_domain_id_is_never_an_unsafe_path(kind, domain_id, strict):
    raw = {"apiVersion": AV, "kind": kind, "domainID": domain_id}
    config = check(raw, strict=strict)
    if domain_id in ("", ".", "..") or "/" in domain_id or "\x00" in domain_id:
        assert config is None, f"unsafe domainID {domain_id!r} was accepted"


# --- regressions: the nastiest inputs, by example --------------------------------------------


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (b"[]", "must be a JSON object, got list"),
        (b'"x"', "must be a JSON object, got str"),
        (b"1" * 5000, "not valid JSON"),  # beyond Python's int-string limit: orjson refuses
        (b"[" * 100_000, "not valid JSON"),  # nesting far beyond any recursion limit
        (b"\xff\xfe{}", "not valid JSON"),
        ({"apiVersion": AV, "kind": KINDS[0], "domainID": "..%2f.."}, "invalid domainID"),
        ({"apiVersion": AV, "kind": KINDS[0], "domainID": "../" * 30}, "must not contain '/'"),
        ({"apiVersion": AV, "kind": KINDS[1], "domainID": "a\x00b"}, "NUL"),
        ({"apiVersion": AV, "kind": KINDS[1], "domainID": 2**64}, "domainID"),
        ({"apiVersion": AV, "kind": [KINDS[0]], "domainID": UID}, "unsupported kind"),
        ({"apiVersion": {"x": 1}, "kind": KINDS[0]}, "unsupported apiVersion"),
    ],
)
def test_nasty_inputs_are_refused_clearly(raw, fragment):
    for strict in (True, False):
        with pytest.raises(ValidationError, match=None) as info:
            decode_config(raw, strict=strict)
        assert fragment in str(info.value)
        assert "\n" not in str(info.value)
