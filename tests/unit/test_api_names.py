"""The contract strings a reference-driver cluster already relies on."""

from __future__ import annotations

import pytest

from api import names


def test_exact_contract_strings():
    assert names.API_VERSION == "resource.nvidia.com/v1beta1"
    assert names.DRIVER_NAME == "compute-domain.nvidia.com"
    assert names.LABEL_COMPUTE_DOMAIN == "resource.nvidia.com/computeDomain"
    assert names.LABEL_CLIQUE_ID == "resource.nvidia.com/computeDomain.cliqueID"
    assert names.LABEL_TARGET == "resource.nvidia.com/computeDomainTarget"
    assert names.FINALIZER == "resource.nvidia.com/computeDomain"
    assert names.DEVICE_CLASS_DEFAULT_CHANNEL == "compute-domain-default-channel.nvidia.com"
    assert names.DEVICE_CLASS_DAEMON == "compute-domain-daemon.nvidia.com"
    assert (names.DEVICE_CHANNEL_0, names.DEVICE_DAEMON_0) == ("channel-0", "daemon-0")
    assert names.CDI_KIND_CLAIM == "k8s.compute-domain.nvidia.com/claim"
    assert names.CDI_KIND_DEVICE == "k8s.compute-domain.nvidia.com/device"
    assert names.REGISTRATION_SOCKET_NAME == "compute-domain.nvidia.com-reg.sock"
    assert names.SUPPORTED_DRA_SERVICES == ("v1.DRAPlugin", "v1beta1.DRAPlugin")


def test_device_class_selectors_match_the_reference():
    assert names.DEVICE_CLASS_DEFAULT_CHANNEL_SELECTOR == (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
        "device.attributes['compute-domain.nvidia.com'].id == 0"
    )
    assert names.DEVICE_CLASS_DAEMON_SELECTOR == (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
    )


def test_object_names():
    uid = "8b5cd1b6-5f1e-4a5b-9a53-0c1d2e3f4a5b"
    assert names.daemon_object_name(uid) == f"computedomain-daemon-{uid}"
    assert names.clique_object_name(uid, "0f2a.3") == f"{uid}.0f2a.3"
    assert names.cdi_claim_device_name("c1", "channel-0") == "c1-channel-0"
    assert names.channel_device_path(7) == "/dev/nvidia-caps-imex-channels/channel7"
    assert names.nvcap_device_path(7) == "/dev/nvidia-caps/nvidia-cap7"


def test_dns_names_are_scoped_to_the_domain():
    uid_a = "8b5cd1b6-5f1e-4a5b-9a53-0c1d2e3f4a5b"
    uid_b = "0e5cd1b6-5f1e-4a5b-9a53-0c1d2e3f4a5b"
    assert names.reference_dns_name(17) == "compute-domain-daemon-0017"
    assert names.dns_name(uid_a, 17) == f"imex-{uid_a}-0017"
    assert names.dns_name(uid_a, 0) != names.dns_name(uid_b, 0)
    assert len(names.dns_name(uid_a, 9999)) <= 63
    with pytest.raises(ValueError, match=">= 0"):
        names.dns_name(uid_a, -1)
    with pytest.raises(ValueError, match="longer than 63"):
        names.dns_name("x" * 60, 0)
