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


class ComputeDomainStatus(K8sModel):
    status: str | None = None
    nodes: list[ComputeDomainNode] | None = None

    def node(self, name: str) -> ComputeDomainNode | None:
        return next((n for n in self.nodes or () if n.name == name), None)


class ComputeDomain(K8sObject):
    api_version: Literal["resource.nvidia.com/v1beta1"] = names.API_VERSION
    kind: Literal["ComputeDomain"] = names.KIND_COMPUTE_DOMAIN
    spec: ComputeDomainSpec
    status: ComputeDomainStatus | None = None

    @property
    def workload_template_name(self) -> str:
        return self.spec.channel.resource_claim_template.name

    @property
    def num_nodes(self) -> int:
        return self.spec.num_nodes or 0
