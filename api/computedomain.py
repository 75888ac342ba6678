"""ComputeDomain (`resource.nvidia.com/v1beta1`) as the API serves it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api import names
from api.objects import K8sModel, K8sObject


class ResourceClaimTemplateReference(K8sModel):
    name: str


class ComputeDomainChannelSpec(K8sModel):
    resource_claim_template: ResourceClaimTemplateReference
    # Kept as a free string: the CRD enforces the enum, and a reader must not choke on an
    # object written before that (the reference passes the value through unchanged).
    allocation_mode: str | None = None

    @property
    def effective_allocation_mode(self) -> str:
        """`All` only when asked for; anything else means one channel, as the reference does."""
        if self.allocation_mode == names.ALLOCATION_MODE_ALL:
            return names.ALLOCATION_MODE_ALL
        return names.ALLOCATION_MODE_SINGLE


class ComputeDomainSpec(K8sModel):
    num_nodes: int | None = None
    channel: ComputeDomainChannelSpec


class ComputeDomainNode(K8sModel):
    """One daemon's entry in `status.nodes`; an empty cliqueID (index -1) is a non-fabric node."""

    name: str
    ip_address: str
    clique_id: str = Field(alias="cliqueID")
    index: int = 0  # always serialized, as the reference does
    status: str | None = None


class Condition(K8sModel):
    """A `status.conditions` entry (metav1.Condition); every field optional on read."""

    type: str | None = None
    status: str | None = None
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None


class ComputeDomainStatus(K8sModel):
    status: str | None = None
    nodes: list[ComputeDomainNode] | None = None
    conditions: list[Condition] | None = None

    def node(self, name: str) -> ComputeDomainNode | None:
        return next((n for n in self.nodes or () if n.name == name), None)


class StoredComputeDomain(K8sObject):
    """A ComputeDomain as the API server may hold it: the CRD does not require `spec`, so a
    domain without one is stored (tests/fuzz/test_fuzz_computedomain.py). What reads
    domains (the controller, the agents) takes this and says what is missing;
    `ComputeDomain` is what a valid domain is."""

    api_version: Literal["resource.nvidia.com/v1beta1"] = "resource.nvidia.com/v1beta1"
    kind: Literal["ComputeDomain"] = "ComputeDomain"
    spec: ComputeDomainSpec | None = None
    status: ComputeDomainStatus | None = None

    @property
    def workload_template_name(self) -> str:
        """spec.channel.resourceClaimTemplate.name; "" without a spec."""
        return self.spec.channel.resource_claim_template.name if self.spec else ""

    @property
    def num_nodes(self) -> int:
        return (self.spec.num_nodes if self.spec else None) or 0

    @property
    def allocation_mode(self) -> str | None:
        """spec.channel.allocationMode as written (None when unset or without a spec)."""
        return self.spec.channel.allocation_mode if self.spec else None

    @property
    def status_nodes(self) -> list[ComputeDomainNode]:
        """status.nodes ([] without a status); a new list, the parsed object stays as read."""
        return list(self.status.nodes or ()) if self.status else []


class ComputeDomain(StoredComputeDomain):
    spec: ComputeDomainSpec
