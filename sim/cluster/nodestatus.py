"""The node half of a simulated kubelet: the Node object, its status, its Lease heartbeat.

A real kubelet registers its Node (labels, addresses, capacity and allocatable, node
info, the port of its API), reports the Ready condition, and renews its Lease in
`kube-node-lease` every 10 s; kube-controller-manager's node lifecycle controller taints
and evicts a node whose Lease lapses (50 s) and the scheduler places pods only on Nodes
with allocatable pods. `NodeAgent` does the same with the kubelet's own credentials, so on
the upstream control plane NodeRestriction and Node authorization apply to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes import client

from runtime.kubecall import call, error_text, status_of

log = logging.getLogger(__name__)

Obj = dict[str, Any]

LEASE_NAMESPACE: Final = "kube-node-lease"
LEASE_SECONDS: Final = 40  # kubelet's nodeLeaseDurationSeconds
RENEW_EVERY: Final = LEASE_SECONDS / 4  # kubelet renews at a quarter of the duration
STATUS_EVERY: Final = 60.0  # a heartbeat in the Ready condition, even when nothing changed
DEFAULT_CAPACITY: Final = {
    "cpu": "144",
    "memory": "1980Gi",
    "pods": "110",
    "ephemeral-storage": "3840Gi",
    "hugepages-2Mi": "0",
}


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _time(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class NodeSpec:
    """What one node says of itself when it registers."""

    name: str
    address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    kubelet_port: int = 10250
    kubelet_version: str = "v0.0.0-sim"
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))

    def conditions(self, since: str, heartbeat: str) -> list[Obj]:
        def condition(kind: str, status: str, reason: str, message: str) -> Obj:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": since,
            }

        return [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                      "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                      "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID",
                      "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ]  # fmt: skip

    def status(self, since: str, heartbeat: str, boot_id: str) -> Obj:
        return {
            "capacity": dict(self.capacity),
            "allocatable": dict(self.capacity),
            "conditions": self.conditions(since, heartbeat),
            "addresses": [
                {"type": "InternalIP", "address": self.address},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
            "nodeInfo": {
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, self.name).hex,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, self.name)),
                "bootID": boot_id,
                "kernelVersion": "6.8.0-sim",
                "osImage": "compute-domain-sim",
                "containerRuntimeVersion": "sim://1.0.0",
                "kubeletVersion": self.kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def node(self, boot_id: str) -> Obj:
        now = _time(_now())
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            **self.labels,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {},
            "status": self.status(now, now, boot_id),
        }


class NodeAgent:
    """Registers the Node, then renews its Lease and refreshes its Ready heartbeat."""

    def __init__(self, api_client: client.ApiClient, spec: NodeSpec) -> None:
        self.spec = spec
        self.core = client.CoreV1Api(api_client)
        self.leases = client.CoordinationV1Api(api_client)
        self.boot_id = str(uuid.uuid4())
        self._since = _time(_now())
        self._uid = ""
        self._task: asyncio.Task[None] | None = None
        self.renewals = 0

    async def register(self) -> None:
        """Create the Node, or (a kubelet restart) bring its status up to date."""
        body = self.spec.node(self.boot_id)
        try:
            created = await call(self.core.create_node, body)
        except client.ApiException as err:
            if err.status != 409:
                raise
            created = await call(self.core.read_node, self.spec.name)
            await self._report_status()
        self._uid = created.metadata.uid
        await self._renew_lease()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._heartbeat(), name=f"node-{self.spec.name}-heartbeat"
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _heartbeat(self) -> None:
        since_status = 0.0
        while True:
            await asyncio.sleep(RENEW_EVERY)
            since_status += RENEW_EVERY
            try:
                await self._renew_lease()
                if since_status >= STATUS_EVERY:
                    await self._report_status()
                    since_status = 0.0
            except Exception as err:  # the next beat tries again, as kubelet's does
                log.warning("node %s: heartbeat failed: %s", self.spec.name, error_text(err))

    async def _report_status(self) -> None:
        now = _time(_now())
        patch = {"status": {"conditions": self.spec.conditions(self._since, now)}}
        await call(self.core.patch_node_status, self.spec.name, patch)

    async def _renew_lease(self) -> None:
        name = self.spec.name
        spec = {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": _micro(_now()),
        }
        try:
            await call(self.leases.patch_namespaced_lease, name, LEASE_NAMESPACE, {"spec": spec})
        except client.ApiException as err:
            if status_of(err) != 404:
                raise
            body: Obj = {"metadata": {"name": name, "namespace": LEASE_NAMESPACE}, "spec": spec}
            if self._uid:
                body["metadata"]["ownerReferences"] = [
                    {"apiVersion": "v1", "kind": "Node", "name": name, "uid": self._uid}
                ]
            await call(self.leases.create_namespaced_lease, LEASE_NAMESPACE, body)
        self.renewals += 1
