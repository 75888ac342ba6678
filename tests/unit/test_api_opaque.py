"""Opaque configs: strict decoding for user input, tolerant decoding for our own data."""

from __future__ import annotations

import contextlib
import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.opaque import ComputeDomainChannelConfig, ComputeDomainDaemonConfig, decode_config
from api.validation_error import ValidationError

UID = "8b5cd1b6-5f1e-4a5b-9a53-0c1d2e3f4a5b"
AV = "resource.nvidia.com/v1beta1"


def channel(**fields):
    return {"apiVersion": AV, "kind": "ComputeDomainChannelConfig", "domainID": UID} | fields


def test_channel_config_from_the_controllers_template():
    cfg = decode_config(orjson.dumps(channel(allocationMode="All")))
    assert isinstance(cfg, ComputeDomainChannelConfig)
    assert cfg.domain_id == UID
    assert cfg.all_channels
    assert cfg.to_dict() == channel(allocationMode="All")


@pytest.mark.parametrize("mode", [None, "", "Single"])
def test_single_channel_modes(mode):
    fields = {} if mode is None else {"allocationMode": mode}
    assert not decode_config(channel(**fields)).all_channels


def test_daemon_config():
    raw = {"apiVersion": AV, "kind": "ComputeDomainDaemonConfig", "domainID": UID}
    cfg = decode_config(raw)
    assert isinstance(cfg, ComputeDomainDaemonConfig)
    assert cfg.to_dict() == raw


def test_accepts_str_bytes_and_mapping():
    raw = channel()
    text = orjson.dumps(raw).decode()
    assert decode_config(text) == decode_config(text.encode()) == decode_config(raw)


@pytest.mark.parametrize(
    "raw, message",
    [
        # The reference's own acceptance case: an unknown field is rejected by name.
        (
            b'{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig",'
            b'"domainID":"domain","unknown":"field"}',
            'strict decoding error: unknown field "unknown" (ComputeDomainChannelConfig takes '
            "allocationMode, apiVersion, domainID, kind; field names are case-sensitive)",
        ),
        (channel(allocationmode="All"), 'unknown field "allocationmode"'),
        ({"kind": "ComputeDomainChannelConfig", "domainID": UID}, "no apiVersion"),
        (
            channel(apiVersion="resource.nvidia.com/v1"),
            "unsupported apiVersion 'resource.nvidia.com/v1'",
        ),
        (channel(apiVersion=1), "unsupported apiVersion 1"),
        ({"apiVersion": AV, "domainID": UID}, "no kind"),
        (channel(kind="GpuConfig"), "unsupported kind 'GpuConfig'"),
        (channel(kind=["ComputeDomainChannelConfig"]), "unsupported kind"),
        (channel(domainID=7), "domainID: Input should be a valid string (got int)"),
        (channel(allocationMode=True), "allocationMode: Input should be a valid string"),
        (channel(domainID=""), "domainID cannot be empty"),
        ({"apiVersion": AV, "kind": "ComputeDomainDaemonConfig"}, "domainID cannot be empty"),
        (channel(domainID="../../etc"), "must not contain '/'"),
        (channel(domainID=".."), "must not be '..'"),
        (channel(domainID="."), "must not be '.'"),
        (channel(domainID="a\x00b"), "must not contain NUL"),
        (channel(domainID="a" * 64), "no more than 63 characters"),
        (channel(domainID="-abc"), "start and end with an alphanumeric"),
        (channel(domainID="a b"), "must consist of alphanumeric"),
        (channel(allocationMode="Many"), "invalid allocationMode 'Many'"),
        (channel(allocationMode="single"), "invalid allocationMode 'single'"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object, got list"),
        ("null", "must be a JSON object, got NoneType"),
    ],
)
def test_bad_configs_are_rejected_with_a_message_naming_the_problem(raw, message):
    with pytest.raises(ValidationError) as err:
        decode_config(raw)
    assert message in str(err.value)


def test_nonstrict_ignores_unknown_fields_but_still_validates():
    cfg = decode_config(channel(addedInAFutureVersion={"x": 1}), strict=False)
    assert cfg.domain_id == UID
    with pytest.raises(ValidationError, match="must not contain '/'"):
        decode_config(channel(domainID="a/b", future=1), strict=False)
    with pytest.raises(ValidationError, match="domainID: Input should be a valid string"):
        decode_config(channel(domainID=None), strict=False)


def test_label_value_edge_cases_are_accepted():
    for ok in ["a", "A1", "a" * 63, "a.b_c-d", "0"]:
        assert decode_config(channel(domainID=ok)).domain_id == ok


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=16), children, max_size=5)
    ),
    max_leaves=25,
)
field_names = st.sampled_from(["apiVersion", "kind", "domainID", "allocationMode"]) | st.text()


@settings(max_examples=300, deadline=None)
@given(
    value=json_values,
    fields=st.dictionaries(
        field_names,
        json_values
        | st.sampled_from(
            [AV, "ComputeDomainChannelConfig", "ComputeDomainDaemonConfig", UID, "All", ""]
        ),
        max_size=6,
    ),
    strict=st.booleans(),
)
def test_decoding_raises_only_validation_errors(value, fields, strict):
    for raw in (value, fields, json.dumps(fields, allow_nan=True)):
        try:
            cfg = decode_config(raw, strict=strict)
        except ValidationError:
            continue
        # Whatever decodes is safe to use as a directory name and a label value.
        assert cfg.domain_id and "/" not in cfg.domain_id and len(cfg.domain_id) <= 63


@settings(max_examples=100, deadline=None)
@given(text=st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_validation_errors(text):
    with contextlib.suppress(ValidationError):
        decode_config(text)
