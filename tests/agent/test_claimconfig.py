"""Which config applies to which device: the reference's cases, plus ours.

The reference's are `TestGetOpaqueDeviceConfigs` and `TestGetConfigResultsMap` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/device_state_test.go.
"""

from __future__ import annotations

import pytest

from agent.plugin.claim_errors import PermanentError
from agent.plugin.claimconfig import groups_for, parse_device
from api import names
from api.resourceclaim import AllocationResult

DRIVER = names.DRIVER_NAME


def channel(domain: str) -> dict:
    return {"apiVersion": names.API_VERSION, "kind": names.KIND_CHANNEL_CONFIG, "domainID": domain}


def daemon(domain: str) -> dict:
    return {"apiVersion": names.API_VERSION, "kind": names.KIND_DAEMON_CONFIG, "domainID": domain}


def config(source: str, requests: list[str], params: dict | None, driver: str = DRIVER) -> dict:
    entry: dict = {"source": source, "requests": requests}
    if params is not None:
        entry["opaque"] = {"driver": driver, "parameters": params}
    return entry


def result(request: str, device: str, driver: str = DRIVER) -> dict:
    return {"request": request, "driver": driver, "pool": "pool", "device": device}


def allocation(results: list[dict], configs: list[dict]) -> AllocationResult:
    return AllocationResult.from_dict({"devices": {"results": results, "config": configs}})


def test_claim_config_beats_class_config_and_other_drivers_are_ignored():
    groups = groups_for(
        allocation(
            [
                result("channel-request", "channel-0"),
                result("daemon-request", "daemon-0"),
                result("other-request", "channel-0", driver="other.example.com"),
            ],
            [
                config("FromClass", ["channel-request"], channel("class-domain")),
                config("FromClaim", ["channel-request"], channel("claim-domain")),
                config("FromClaim", ["ignored"], channel("x"), driver="other.example.com"),
                config("FromClaim", ["daemon-request"], daemon("daemon-domain")),
            ],
        )
    )
    got = sorted(
        (g.config.KIND, g.config.domain_id, [r.device for r in g.results]) for g in groups
    )
    assert got == [
        (names.KIND_CHANNEL_CONFIG, "claim-domain", ["channel-0"]),
        (names.KIND_DAEMON_CONFIG, "daemon-domain", ["daemon-0"]),
    ]


def test_a_config_without_requests_applies_to_fitting_devices():
    groups = groups_for(
        allocation([result("r", "channel-0")], [config("FromClaim", [], channel("d"))])
    )
    assert groups[0].config.domain_id == "d"


@pytest.mark.parametrize(
    "alloc, message",
    [
        (
            allocation([result("r", "channel-0")], [config("invalid", [], channel("d"))]),
            "invalid config source",
        ),
        (
            allocation([result("r", "channel-0")], [config("FromClass", [], None)]),
            "only opaque parameters are supported",
        ),
        (
            allocation(
                [result("r", "channel-0")],
                [config("FromClaim", ["r"], dict(channel("domain"), unknown="field"))],
            ),
            "error decoding config parameters",
        ),
        (allocation([result("r", "missing-device")], []), "requested device is not allocatable"),
        (
            allocation([result("r", "channel-0")], [config("FromClaim", ["r"], daemon("d"))]),
            "cannot apply ComputeDomainDaemonConfig to request: r",
        ),
        (
            allocation([result("r", "channel-0")], []),
            "no ComputeDomainChannelConfig for device channel-0",
        ),
    ],
)
def test_permanent_errors(alloc, message):
    with pytest.raises(PermanentError, match=message):
        groups_for(alloc)


@pytest.mark.parametrize(
    "name, ok",
    [
        ("channel-0", True),
        ("channel-2047", True),
        ("channel-2048", False),
        ("daemon-0", True),
        ("daemon-1", False),
        ("channel-01", False),
        ("channel-", False),
        ("gpu-0", False),
    ],
)
def test_allocatable_devices(name, ok):
    assert (parse_device(name) is not None) is ok


def test_nonstrict_decoding_tolerates_fields_added_later():
    alloc = allocation(
        [result("r", "channel-0")], [config("FromClaim", ["r"], dict(channel("d"), addedLater=1))]
    )
    assert groups_for(alloc, strict=False)[0].config.domain_id == "d"
