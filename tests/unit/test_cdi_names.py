"""Qualified CDI device names: what runtimes accept is exactly what we accept."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi import (
    CDIError,
    QualifiedName,
    format_qualified_name,
    is_qualified_name,
    parse_kind,
    parse_qualified_name,
    validate_class_name,
    validate_device_name,
    validate_qualified_name,
    validate_vendor_name,
)

CLAIM_CHANNEL = "k8s.compute-domain.nvidia.com/claim=5f0c1e9a-2b3d-4c5e-8f60-718293a4b5c6-channel-0"


@pytest.mark.parametrize(
    ("device", "parts"),
    [
        (
            CLAIM_CHANNEL,
            (
                "k8s.compute-domain.nvidia.com",
                "claim",
                "5f0c1e9a-2b3d-4c5e-8f60-718293a4b5c6-channel-0",
            ),
        ),
        (
            "k8s.compute-domain.nvidia.com/device=all",
            ("k8s.compute-domain.nvidia.com", "device", "all"),
        ),
        ("nvidia.com/gpu=0", ("nvidia.com", "gpu", "0")),
        ("nvidia.com/gpu=GPU-1234_ab.c", ("nvidia.com", "gpu", "GPU-1234_ab.c")),
        ("vendor.com/class.sub=dev:1", ("vendor.com", "class.sub", "dev:1")),
        ("Vendor_1/Class-2=x", ("Vendor_1", "Class-2", "x")),
        ("a/b=c", ("a", "b", "c")),
        ("a/b=7", ("a", "b", "7")),
    ],
)
def test_valid_qualified_names_parse_into_their_parts(device: str, parts: tuple[str, ...]) -> None:
    assert parse_qualified_name(device) == parts
    assert format_qualified_name(*parts) == device
    assert is_qualified_name(device)
    validate_qualified_name(device)


@pytest.mark.parametrize(
    ("device", "problem"),
    [
        ("", "missing vendor"),
        ("/dev/x", "unqualified device '/dev/x'"),
        ("/dev/nvidia0", "missing vendor"),
        ("gpu0", "missing vendor"),
        ("=dev", "missing vendor"),
        ("/class=dev", "missing vendor"),
        ("nvidia.com=gpu0", "missing class"),
        ("nvidia.com/=gpu0", "missing class"),
        ("nvidia.com/gpu=", "missing device name"),
        ("1vendor/class=dev", "invalid vendor name '1vendor': it must start with a letter"),
        ("vendor-/class=dev", "invalid vendor name 'vendor-': it must end with a letter or digit"),
        ("ven dor/class=dev", "invalid vendor name 'ven dor': character ' ' is not allowed"),
        ("ven:dor/class=dev", "character ':' is not allowed"),
        ("vendor/1class=dev", "invalid class name '1class': it must start with a letter"),
        ("vendor/class_=dev", "invalid class name 'class_': it must end with a letter or digit"),
        ("vendor/cl@ss=dev", "invalid class name 'cl@ss': character '@' is not allowed"),
        ("vendor/sub/class=dev", "invalid class name 'sub/class': character '/' is not allowed"),
        ("vendor/class=-dev", "invalid device name '-dev': it must start with a letter or digit"),
        ("vendor/class=dev.", "invalid device name 'dev.': it must end with a letter or digit"),
        ("vendor/class=de/v", "invalid device name 'de/v': character '/' is not allowed"),
        ("vendor/class=de=v", "invalid device name 'de=v': character '=' is not allowed"),
        ("vendor/class=dev ice", "character ' ' is not allowed"),
        ("vendor/class=_", "invalid device name '_': it must start with a letter or digit"),
        ("vendor/class=güp", "character 'ü' is not allowed"),
        ("vendor/class=é", "it must start with a letter or digit"),
        ("v/c=x\n", "it must end with a letter or digit"),
    ],
)
def test_invalid_qualified_names_say_what_is_wrong(device: str, problem: str) -> None:
    with pytest.raises(CDIError) as excinfo:
        parse_qualified_name(device)
    assert problem in str(excinfo.value)
    assert not is_qualified_name(device)


@pytest.mark.parametrize(
    ("validate", "name", "ok"),
    [
        (validate_vendor_name, "a", True),
        (validate_vendor_name, "Z", True),
        (validate_vendor_name, "1", False),
        (validate_vendor_name, "_", False),
        (validate_vendor_name, "nvidia.com", True),
        (validate_vendor_name, "nvidia.com.", False),
        (validate_vendor_name, "", False),
        (validate_class_name, "b", True),
        (validate_class_name, "9", False),
        (validate_class_name, "gpu.mig", True),
        (validate_class_name, "gpu:mig", False),
        (validate_device_name, "0", True),
        (validate_device_name, "x", True),
        (validate_device_name, ".", False),
        (validate_device_name, ":", False),
        (validate_device_name, "a:b", True),
        (validate_device_name, "a:", False),
        (validate_device_name, "", False),
    ],
)
def test_single_parts_follow_the_cdi_character_rules(validate, name: str, ok: bool) -> None:
    if ok:
        validate(name)
    else:
        with pytest.raises(CDIError):
            validate(name)


def test_empty_part_is_reported_as_empty() -> None:
    with pytest.raises(CDIError, match="invalid device name: it is empty"):
        validate_device_name("")


def test_kind_parses_and_rejects_like_a_qualifier() -> None:
    assert parse_kind("k8s.compute-domain.nvidia.com/claim") == (
        "k8s.compute-domain.nvidia.com",
        "claim",
    )
    for kind, problem in [
        ("nvidia.com", "missing class"),
        ("/gpu", "missing vendor"),
        ("nvidia.com/", "missing class"),
        ("nvidia.com/-gpu", "start with"),
    ]:
        with pytest.raises(CDIError, match=problem):
            parse_kind(kind)


def test_format_refuses_parts_that_would_not_parse_back() -> None:
    with pytest.raises(CDIError, match="character '=' is not allowed"):
        format_qualified_name("nvidia.com", "gpu", "a=b")
    with pytest.raises(CDIError, match="invalid class name"):
        format_qualified_name("nvidia.com", "g/pu", "0")


def test_qualified_name_dataclass_round_trips_and_is_frozen() -> None:
    name = QualifiedName.parse(CLAIM_CHANNEL)
    assert str(name) == CLAIM_CHANNEL
    assert name.kind == "k8s.compute-domain.nvidia.com/claim"
    assert name == QualifiedName.for_device(name.kind, name.name)
    assert {name: 1}[QualifiedName.parse(CLAIM_CHANNEL)] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        name.name = "other"  # type: ignore[misc]
    with pytest.raises(CDIError, match="invalid device name"):
        QualifiedName("nvidia.com", "gpu", "bad name")


NAME_CHARS = st.sampled_from("aZ09._-:/= @é\n")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(NAME_CHARS, max_size=12), st.text(max_size=12)))
def test_parse_either_round_trips_or_raises_cdi_error(device: str) -> None:
    try:
        parts = parse_qualified_name(device)
    except CDIError:
        return
    assert format_qualified_name(*parts) == device


_VENDOR = r"[A-Za-z]([A-Za-z0-9_.-]{0,6}[A-Za-z0-9])?"
_DEVICE = r"[A-Za-z0-9]([A-Za-z0-9_.:-]{0,6}[A-Za-z0-9])?"


@settings(max_examples=100, deadline=None)
@given(st.from_regex(rf"\A{_VENDOR}/{_VENDOR}={_DEVICE}\Z"))
def test_every_name_built_from_valid_parts_parses(device: str) -> None:
    assert str(QualifiedName.parse(device)) == device
