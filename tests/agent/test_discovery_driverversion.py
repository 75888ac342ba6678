"""Driver version comparison with leading zeros, and the DNS-names minimum."""

from __future__ import annotations

import pytest

from agent.discovery import DiscoveryError, require_dns_names_driver, version_at_least


@pytest.mark.parametrize(
    ("version", "minimum", "ok"),
    [
        ("570.158.01", "570.158.01", True),
        ("570.158.1", "570.158.01", True),
        ("570.158.01", "570.158.1", True),
        ("570.158.00", "570.158.01", False),
        ("570.157.99", "570.158.01", False),
        ("580.82.07", "570.158.01", True),
        ("570.158", "570.158.0", True),
        ("570.158", "570.158.01", False),
        ("570.172.08", "570.158.01", True),
        ("1000", "570.158.01", True),
        (" 575.57.08\n", "570.158.01", True),
        ("v570.158.01", "570.158.01", True),
    ],
)
def test_version_at_least(version, minimum, ok):
    assert version_at_least(version, minimum) is ok


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "570.",
        ".570",
        "570..1",
        "570.158.01-beta",
        "abc",
        "5 7",
        "\u0665\u0667\u0660",
        "1" * 19,
        "570,158",
    ],
)
def test_bad_versions(bad):
    with pytest.raises(DiscoveryError, match="cannot parse NVIDIA driver version"):
        version_at_least(bad, "570.158.01")
    with pytest.raises(DiscoveryError):
        version_at_least("570.158.01", bad)


def test_require_dns_names_driver():
    require_dns_names_driver("570.158.01")
    require_dns_names_driver("580.82.07")
    with pytest.raises(
        DiscoveryError,
        match=r"minimum version not satisfied for IMEXDaemonsWithDNSNames feature: "
        r"driver 565\.57\.01",
    ):
        require_dns_names_driver("565.57.01")
