"""The driver's view of the cluster: ComputeDomains, cliques and this Node from watches,
node writes.

Readiness of this node's IMEX daemon is read from the watched clique (or, with the
cliques gate off, from the ComputeDomain's status), and a waiting Prepare wakes on the
watch event that flips it to Ready: no polling, no kubelet retry round trip.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes import client

from agent.plugin.grpcserver import ClaimRef
from agent.plugin.nodeops import NodeOps
from api import names
from api.draclient import DraApi
from api.kube import Informer


def _uid(obj: dict[str, Any]) -> str:
    return obj["metadata"]["uid"]


def _name(obj: dict[str, Any]) -> str:
    return obj["metadata"]["name"]


class ClusterView:
    def __init__(self, api: client.ApiClient, dra: DraApi, node_name: str, namespace: str, *,
                 cliques_enabled: bool) -> None:
        loop = asyncio.get_running_loop()
        custom = client.CustomObjectsApi(api)
        self.node = NodeOps(api, dra, node_name)
        self._node_name = node_name
        self._namespace = namespace
        self.cds = Informer(loop, custom.list_cluster_custom_object, _uid, "computedomains",
                            {"group": names.GROUP, "version": names.VERSION,
                             "plural": names.PLURAL_COMPUTE_DOMAINS})
        # This node alone (field selector): the label keeper repairs on its changes.
        core = client.CoreV1Api(api)
        self.node_object = Informer(loop, core.list_node, _name, "node",
                                    {"field_selector": f"metadata.name={node_name}"},
                                    to_dict=api.sanitize_for_serialization)
        self.cliques: Informer | None = None
        if cliques_enabled:
            self.cliques = Informer(loop, custom.list_namespaced_custom_object, _name,
                                    "computedomaincliques",
                                    {"group": names.GROUP, "version": names.VERSION,
                                     "namespace": namespace, "plural": names.PLURAL_CLIQUES})

    @property
    def informers(self) -> list[Informer]:
        return [i for i in (self.cds, self.cliques) if i is not None]

    def start(self) -> None:
        for informer in (*self.informers, self.node_object):
            informer.start()

    def stop(self) -> None:
        for informer in (*self.informers, self.node_object):
            informer.stop()

    async def wait_synced(self, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            await asyncio.gather(*(i.synced.wait() for i in self.informers))

    # --- the driver's Cluster protocol ---------------------------------------------------

    async def fetch_claim(self, ref: ClaimRef) -> dict[str, Any]:
        return await self.node.fetch_claim(ref)

    async def claim_status(self, ref: ClaimRef) -> dict[str, Any]:
        return await self.node.claim_status(ref)

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.node.read_pod(namespace, name)

    async def add_cd_label(self, cd_uid: str) -> None:
        await self.node.add_cd_label(cd_uid)

    async def remove_cd_label(self, cd_uid: str) -> None:
        await self.node.remove_cd_label(cd_uid)

    def compute_domain(self, uid: str) -> dict[str, Any] | None:
        return self.cds.items.get(uid)

    def domain_live(self, uid: str) -> bool:
        """The ComputeDomain exists and is not being deleted."""
        cd = self.cds.items.get(uid)
        return cd is not None and not (cd.get("metadata") or {}).get("deletionTimestamp")

    def node_ready(self, cd_uid: str, clique_id: str) -> bool:
        if self.cliques is not None:
            clique = self.cliques.items.get(names.clique_object_name(cd_uid, clique_id))
            for daemon in (clique or {}).get("daemons") or ():
                if daemon.get("nodeName") == self._node_name:
                    if daemon.get("status") == names.STATUS_READY:
                        return True
                    break
        cd = self.cds.items.get(cd_uid) or {}
        for node in (cd.get("status") or {}).get("nodes") or ():
            if node.get("name") == self._node_name:
                return node.get("status") == names.STATUS_READY
        return False

    def daemon_entry(self, cd_uid: str, clique_id: str) -> str:
        """Where this node's daemon stands, for a waiting claim's message: the status of its
        clique entry (or, with the cliques gate off, of its node in the ComputeDomain
        status), or that there is none yet."""
        if self.cliques is not None and clique_id:
            clique = self.cliques.items.get(names.clique_object_name(cd_uid, clique_id))
            if clique is None:
                return f"clique {clique_id} has no entries yet"
            for daemon in clique.get("daemons") or ():
                if daemon.get("nodeName") == self._node_name:
                    status = daemon.get("status") or "without status"
                    return f"its entry in clique {clique_id} is {status}"
            return f"it has no entry in clique {clique_id} yet"
        cd = self.cds.items.get(cd_uid) or {}
        for node in (cd.get("status") or {}).get("nodes") or ():
            if node.get("name") == self._node_name:
                return f"its node in the ComputeDomain status is {node.get('status') or 'unset'}"
        return "it is not in the ComputeDomain status yet"

    def generation(self) -> tuple[int, ...]:
        return tuple(i.version for i in self.informers)

    async def wait_for_change(self, since: tuple[int, ...], timeout: float) -> None:
        """Return once any watched object changed after `since`, or after `timeout`."""
        tasks = [asyncio.ensure_future(i.changed(v))
                 for i, v in zip(self.informers, since, strict=True)]
        try:
            await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
