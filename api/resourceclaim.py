"""A resource.k8s.io/v1 ResourceClaim, as far as a DRA driver reads it: the allocation's
results and opaque configs (https://kubernetes.io/docs/reference/kubernetes-api/
workload-resources/resource-claim-v1/) and who reserved it. Every field is optional, as
the API's omitempty makes it; unknown fields are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import ModelWrapValidatorHandler, PrivateAttr, model_validator

from api.objects import K8sModel, K8sObject


class DeviceRequestAllocationResult(K8sModel):
    request: str | None = None
    driver: str | None = None
    pool: str | None = None
    device: str | None = None


class OpaqueDeviceConfiguration(K8sModel):
    driver: str | None = None
    parameters: Any = None  # the driver's own config, decoded by api/opaque.py


class DeviceAllocationConfiguration(K8sModel):
    source: str | None = None
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(K8sModel):
    results: list[DeviceRequestAllocationResult] | None = None
    config: list[DeviceAllocationConfiguration] | None = None


class AllocationResult(K8sModel):
    devices: DeviceAllocationResult | None = None

    @property
    def results(self) -> list[DeviceRequestAllocationResult]:
        return list(self.devices.results or ()) if self.devices else []

    @property
    def config(self) -> list[DeviceAllocationConfiguration]:
        return list(self.devices.config or ()) if self.devices else []


class ResourceClaimConsumerReference(K8sModel):
    api_group: str | None = None
    resource: str | None = None
    name: str | None = None
    uid: str | None = None


class ResourceClaimStatus(K8sModel):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] | None = None


class ResourceClaim(K8sObject):
    status: ResourceClaimStatus | None = None
    # The status JSON exactly as read, key order included: the checkpoint stores it
    # verbatim and checksums its bytes as Go writes them (agent/checkpoint/gojson.py).
    _status_json: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_status_json(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        claim = handler(data)
        status = data.get("status") if isinstance(data, Mapping) else None
        if isinstance(status, dict):
            claim._status_json = status
        return claim

    @property
    def status_json(self) -> dict[str, Any]:
        """status as the API server sent it ({} without one); not to be changed."""
        return self._status_json

    @property
    def allocation(self) -> AllocationResult | None:
        return self.status.allocation if self.status else None

    @property
    def allocated(self) -> bool:
        """status.allocation is there and not empty."""
        allocation = self.allocation
        return allocation is not None and not allocation.is_empty

    @property
    def reserved_for(self) -> list[ResourceClaimConsumerReference]:
        return list(self.status.reserved_for or ()) if self.status else []
