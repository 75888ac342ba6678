"""Which opaque config applies to which allocated device of a claim.

The reference's rules are `GetOpaqueDeviceConfigs` and `getConfigResultsMap` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/device_state.go.
Configs come from the DeviceClass (lowest precedence) and the claim (highest); each of our
devices takes the highest-precedence config that names its request, or failing that one
that names no request. Decoding is strict and validates every value before anything is
written anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.plugin.claim_errors import PermanentError
from api import names
from api.opaque import ComputeDomainChannelConfig, ComputeDomainDaemonConfig, decode_config
from api.resourceclaim import AllocationResult, DeviceRequestAllocationResult
from api.validation_error import ValidationError

OpaqueConfig = ComputeDomainChannelConfig | ComputeDomainDaemonConfig


@dataclass(frozen=True)
class Device:
    """One allocatable device: `channel-N` or `daemon-0`."""

    kind: str
    id: int

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.id}"


def parse_device(name: str) -> Device | None:
    kind, _, num = name.partition("-")
    if kind not in (names.DEVICE_TYPE_CHANNEL, names.DEVICE_TYPE_DAEMON) or not num.isdigit():
        return None
    device = Device(kind, int(num))
    if device.name != name:  # leading zeros etc.
        return None
    if kind == names.DEVICE_TYPE_CHANNEL and device.id >= names.MAX_IMEX_CHANNELS:
        return None
    if kind == names.DEVICE_TYPE_DAEMON and device.id != 0:
        return None
    return device


@dataclass
class Group:
    """Allocation results that share one config object."""

    config: OpaqueConfig
    results: list[DeviceRequestAllocationResult] = field(default_factory=list)

    @property
    def is_channel(self) -> bool:
        return isinstance(self.config, ComputeDomainChannelConfig)


def _opaque_configs(
    allocation: AllocationResult, strict: bool = True
) -> list[tuple[list[str], OpaqueConfig]]:
    by_source: dict[str, list[tuple[list[str], OpaqueConfig]]] = {"FromClass": [],
                                                                   "FromClaim": []}
    for entry in allocation.config:
        source = entry.source
        if source is None or source not in by_source:
            raise PermanentError(f"invalid config source {source!r}: expected FromClass or "
                                 "FromClaim")
        opaque = entry.opaque
        if opaque is None or opaque.is_empty:
            raise PermanentError("only opaque parameters are supported by this driver")
        if opaque.driver != names.DRIVER_NAME:
            continue
        try:
            config = decode_config(opaque.parameters, strict=strict)
        except ValidationError as err:
            raise PermanentError(f"error decoding config parameters: {err}") from None
        by_source[source].append((list(entry.requests or ()), config))
    return by_source["FromClass"] + by_source["FromClaim"]


def _fits(config: OpaqueConfig, device: Device) -> bool:
    if isinstance(config, ComputeDomainChannelConfig):
        return device.kind == names.DEVICE_TYPE_CHANNEL
    return device.kind == names.DEVICE_TYPE_DAEMON


def groups_for(allocation: AllocationResult, *, strict: bool = True) -> list[Group]:
    """Group this driver's allocated devices by config; PermanentError for anything invalid.

    A device with no config of ours at all is an error that says how to fix it: the
    reference instead fails later with a bare "domainID cannot be empty" on every retry.
    """
    configs = _opaque_configs(allocation, strict)
    groups: dict[int, Group] = {}
    for result in allocation.results:
        if result.driver != names.DRIVER_NAME:
            continue
        device = parse_device(result.device or "")
        if device is None:
            raise PermanentError(f"requested device is not allocatable: {result.device}")
        request = result.request or ""
        chosen: OpaqueConfig | None = None
        for requests, config in reversed(configs):
            if request in requests:
                if not _fits(config, device):
                    raise PermanentError(f"cannot apply {config.KIND} to request: {request}")
                chosen = config
                break
            if not requests and _fits(config, device):
                chosen = config
                break
        if chosen is None:
            kind = (names.KIND_CHANNEL_CONFIG if device.kind == names.DEVICE_TYPE_CHANNEL
                    else names.KIND_DAEMON_CONFIG)
            raise PermanentError(
                f"no {kind} for device {device.name} (request {request!r}): the claim must "
                "carry the ComputeDomain's opaque config; use the ResourceClaimTemplate that "
                "the ComputeDomain controller generates")
        groups.setdefault(id(chosen), Group(chosen)).results.append(result)
    return list(groups.values())
