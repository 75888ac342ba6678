"""ComputeDomainClique: the daemons of one ComputeDomain in one NVLink clique.

Written by the daemons themselves (each owns its entry), read by the controller to
build `ComputeDomain.status.nodes`. It has no spec or status, only `daemons`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.objects import K8sModel, K8sObject


class ComputeDomainDaemonInfo(K8sModel):
    node_name: str
    ip_address: str
    clique_id: str = Field(alias="cliqueID")
    index: int = 0  # always serialized, as the reference does
    status: str | None = None


class ComputeDomainClique(K8sObject):
    api_version: Literal["resource.nvidia.com/v1beta1"] = "resource.nvidia.com/v1beta1"
    kind: Literal["ComputeDomainClique"] = "ComputeDomainClique"
    daemons: list[ComputeDomainDaemonInfo] | None = None

    def daemon(self, node_name: str) -> ComputeDomainDaemonInfo | None:
        return next((d for d in self.daemons or () if d.node_name == node_name), None)
