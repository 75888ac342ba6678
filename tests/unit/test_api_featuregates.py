"""Feature gates: the reference's names, defaults, rendering and rules."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api import featuregates as fg
from api.featuregates import FeatureGates
from api.validation_error import ValidationError

# What the reference controller puts in the daemon's FEATURE_GATES with default gates.
REFERENCE_DEFAULT_RENDERING = (
    "AllAlpha=false,AllBeta=false,ComputeDomainCliques=true,ConsumableShares=false,"
    "ContextualLogging=true,CrashOnNVLinkFabricErrors=true,DRAListTypeAttributes=false,"
    "DeviceMetadata=false,DynamicMIG=false,FabricManagerPartitioning=false,"
    "HostManagedIMEXDaemon=false,IMEXDaemonsWithDNSNames=true,LoggingAlphaOptions=false,"
    "LoggingBetaOptions=true,MPSSupport=false,NVMLDeviceHealthCheck=false,"
    "PassthroughSupport=false,TimeSlicingSettings=false,"
)


def test_defaults_match_the_reference():
    gates = FeatureGates()
    assert not gates.enabled(fg.HOST_MANAGED_IMEX_DAEMON)
    assert gates.enabled(fg.IMEX_DAEMONS_WITH_DNS_NAMES)
    assert gates.enabled(fg.COMPUTE_DOMAIN_CLIQUES)
    assert gates.enabled(fg.CRASH_ON_NVLINK_FABRIC_ERRORS)
    assert gates.render() == REFERENCE_DEFAULT_RENDERING
    gates.validate()


def test_reference_rendering_parses_back_to_the_same_gates():
    assert FeatureGates.parse(REFERENCE_DEFAULT_RENDERING) == FeatureGates()
    assert FeatureGates.parse(FeatureGates().render()).render() == REFERENCE_DEFAULT_RENDERING


@pytest.mark.parametrize("text", ["", None, ",", " , ,", "HostManagedIMEXDaemon=false,"])
def test_empty_items_are_ignored(text):
    assert FeatureGates.parse(text) == FeatureGates()


def test_parse_sets_values_and_keeps_the_rest_default():
    gates = FeatureGates.parse("HostManagedIMEXDaemon=true, IMEXDaemonsWithDNSNames=True,")
    assert gates.enabled(fg.HOST_MANAGED_IMEX_DAEMON)
    assert gates[fg.IMEX_DAEMONS_WITH_DNS_NAMES]
    assert "HostManagedIMEXDaemon=true," in gates.render()
    assert gates.render().endswith(",")
    assert list(gates.render().rstrip(",").split(",")) == sorted(
        gates.render().rstrip(",").split(",")
    )


@pytest.mark.parametrize(
    "spelling, value",
    [
        ("1", True),
        ("t", True),
        ("T", True),
        ("TRUE", True),
        ("true", True),
        ("True", True),
        ("0", False),
        ("f", False),
        ("F", False),
        ("FALSE", False),
        ("false", False),
        ("False", False),
    ],
)
def test_boolean_spellings(spelling, value):
    assert FeatureGates.parse(f"MPSSupport={spelling}")[fg.MPS_SUPPORT] is value


@pytest.mark.parametrize(
    "text, message",
    [
        ("NoSuchGate=true", "unrecognized feature gate 'NoSuchGate'"),
        ("computedomaincliques=true", "unrecognized feature gate 'computedomaincliques'"),
        ("MPSSupport=yes", "invalid value for feature gate MPSSupport: 'yes' is not a boolean"),
        ("MPSSupport", "missing value for feature gate MPSSupport"),
        ("MPSSupport=", "missing value for feature gate MPSSupport"),
        ("=true", "unrecognized feature gate ''"),
    ],
)
def test_bad_gate_strings_name_the_problem(text, message):
    with pytest.raises(ValidationError) as err:
        FeatureGates.parse(text)
    assert message in str(err.value)


def test_unknown_gate_message_lists_known_gates():
    with pytest.raises(ValidationError, match=r"known gates: .*ComputeDomainCliques"):
        FeatureGates.parse("Bogus=true")


@pytest.mark.parametrize(
    "cliques, dns, ok",
    [(True, True, True), (True, False, False), (False, True, True), (False, False, True)],
)
def test_cliques_require_dns_names(cliques, dns, ok):
    gates = FeatureGates({fg.COMPUTE_DOMAIN_CLIQUES: cliques, fg.IMEX_DAEMONS_WITH_DNS_NAMES: dns})
    if ok:
        gates.validate()
    else:
        with pytest.raises(ValidationError) as err:
            gates.validate()
        assert str(err.value) == (
            "feature gate validation failed: feature gate ComputeDomainCliques requires "
            "IMEXDaemonsWithDNSNames to also be enabled"
        )


@pytest.mark.parametrize(
    "a, b",
    [
        (fg.DYNAMIC_MIG, fg.PASSTHROUGH_SUPPORT),
        (fg.DYNAMIC_MIG, fg.NVML_DEVICE_HEALTH_CHECK),
        (fg.DYNAMIC_MIG, fg.MPS_SUPPORT),
        (fg.PASSTHROUGH_SUPPORT, fg.NVML_DEVICE_HEALTH_CHECK),
    ],
)
def test_mutually_exclusive_gates(a, b):
    with pytest.raises(
        ValidationError, match=f"feature gate {a} is currently mutually exclusive with {b}"
    ):
        FeatureGates({a: True, b: True}).validate()


def test_device_metadata_requires_passthrough():
    with pytest.raises(ValidationError, match="DeviceMetadata requires PassthroughSupport"):
        FeatureGates({fg.DEVICE_METADATA: True}).validate()
    FeatureGates({fg.DEVICE_METADATA: True, fg.PASSTHROUGH_SUPPORT: True}).validate()


def test_host_managed_forcing_keeps_explicit_settings():
    gates = FeatureGates.parse("HostManagedIMEXDaemon=true")
    forced = gates.with_values(IMEXDaemonsWithDNSNames=False, ComputeDomainCliques=False)
    assert forced[fg.HOST_MANAGED_IMEX_DAEMON]
    assert not forced[fg.IMEX_DAEMONS_WITH_DNS_NAMES]
    assert not forced[fg.COMPUTE_DOMAIN_CLIQUES]
    forced.validate()
    assert gates[fg.COMPUTE_DOMAIN_CLIQUES], "the original is immutable"


def test_all_alpha_turns_on_alpha_gates_not_set_explicitly():
    gates = FeatureGates.parse("AllAlpha=true,MPSSupport=false")
    assert gates[fg.HOST_MANAGED_IMEX_DAEMON]
    assert not gates[fg.MPS_SUPPORT]
    assert gates[fg.IMEX_DAEMONS_WITH_DNS_NAMES]  # beta, untouched
    beta = FeatureGates.parse("AllBeta=true,ComputeDomainCliques=false")
    assert not beta[fg.COMPUTE_DOMAIN_CLIQUES]
    assert not beta[fg.HOST_MANAGED_IMEX_DAEMON]


@given(st.dictionaries(st.sampled_from([g.name for g in fg.KNOWN_GATES]), st.booleans()))
def test_render_parse_round_trip(explicit):
    gates = FeatureGates(explicit)
    assert FeatureGates.parse(gates.render()) == gates


@given(st.text(max_size=60))
def test_parse_raises_only_validation_errors(text):
    with contextlib.suppress(ValidationError):
        FeatureGates.parse(text)
