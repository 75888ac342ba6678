"""The parts of a core/v1 Pod the driver reads: where it runs, its IP, whether it is Ready,
and who controls it. Everything else (containers, volumes, ...) is kept unparsed."""

from __future__ import annotations

from pydantic import Field

from api.objects import K8sModel, K8sObject, OwnerReference


class PodCondition(K8sModel):
    type: str | None = None
    status: str | None = None


class PodSpec(K8sModel):
    node_name: str | None = None


class PodStatus(K8sModel):
    pod_ip: str | None = Field(default=None, alias="podIP")
    conditions: list[PodCondition] | None = None


class Pod(K8sObject):
    spec: PodSpec | None = None
    status: PodStatus | None = None

    @property
    def node_name(self) -> str:
        """spec.nodeName; "" while unscheduled."""
        return (self.spec.node_name if self.spec else None) or ""

    @property
    def ip(self) -> str:
        """status.podIP; "" until it has one."""
        return (self.status.pod_ip if self.status else None) or ""

    @property
    def ready(self) -> bool:
        """Whether the pod condition Ready is True."""
        conditions = (self.status.conditions if self.status else None) or ()
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    @property
    def controller(self) -> OwnerReference | None:
        """The ownerReference marked as the controller, if any."""
        refs = self.metadata.owner_references or ()
        return next((r for r in refs if r.controller), None)


class PodList(K8sModel):
    items: list[Pod] | None = None
