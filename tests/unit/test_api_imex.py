"""IMEX mode/isolation validation: the reference's table and messages (`TestConfigValidate` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/pkg/imex/imex_test.go)."""

from __future__ import annotations

import pytest

from api.imex import ImexConfig, ImexMode
from api.validation_error import ValidationError


@pytest.mark.parametrize(
    "mode, isolation, gate, message",
    [
        ("driverManaged", "", False, None),
        ("driverManaged", "domain", False, None),
        (
            "driverManaged",
            "channel",
            False,
            'imex.isolation="channel" is not supported yet: per-workload IMEX channel allocation '
            "is not implemented",
        ),
        (
            "driverManaged",
            "bogus",
            True,
            'unknown imex.isolation "bogus": must be "domain" or "channel"',
        ),
        (
            "hostManaged",
            "domain",
            False,
            'imex.mode="hostManaged" requires the HostManagedIMEXDaemon feature gate to be enabled',
        ),
        ("hostManaged", "", True, None),
        ("hostManaged", "domain", True, None),
        ("hostManaged", "channel", True, 'imex.isolation="channel" is not supported yet'),
        ("bogus", "", True, 'unknown imex.mode "bogus"'),
        ("HostManaged", "domain", True, 'unknown imex.mode "HostManaged"'),
    ],
)
def test_reference_validation_table(mode, isolation, gate, message):
    config = ImexConfig(mode=mode, isolation=isolation)
    if message is None:
        config.validate(host_managed_gate=gate)
        return
    with pytest.raises(ValidationError) as err:
        config.validate(host_managed_gate=gate)
    assert str(err.value).startswith("imex configuration validation failed: ")
    assert message in str(err.value)


def test_effective_host_managed():
    assert ImexConfig(mode="hostManaged").host_managed
    assert ImexConfig(mode="hostManaged").effective_mode is ImexMode.HOST_MANAGED
    assert not ImexConfig(mode="driverManaged").host_managed
    assert not ImexConfig().host_managed
    assert not ImexConfig(mode="").host_managed
    assert ImexConfig(mode="").effective_mode is ImexMode.DRIVER_MANAGED
