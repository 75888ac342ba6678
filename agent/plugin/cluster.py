"""The driver's view of the cluster: this node's ComputeDomains, their cliques and this Node
from watches, node writes.

Each agent watches only what concerns its own node: the Node itself, and, while a claim of
a domain waits or is prepared here, that domain's one clique `<cdUID>.<cliqueID>` (or, with
the cliques gate off or on a node without clique, the ComputeDomain itself), each by a
field selector on its name. The domains themselves are looked up when a claim names them
(domains.py). An agent that watched every ComputeDomain and every clique received every
peer's write of every domain: its cost grew with the cluster, not with its node.

Readiness of this node's IMEX daemon is read from the watched clique, and a waiting
Prepare wakes on the watch event that flips it to Ready: no polling, no kubelet retry round
trip.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from agent.plugin.domains import DomainDirectory
from agent.plugin.grpcserver import ClaimRef
from agent.plugin.nodeops import NodeOps
from api import names
from api.clique import ComputeDomainClique
from api.computedomain import ComputeDomainNode, StoredComputeDomain
from api.objects import K8sObject, ParsedCache
from api.pod import Pod
from api.resourceclaim import ResourceClaim
from runtime.corev1 import CoreV1
from runtime.draclient import DraApi
from runtime.informer import Informer
from runtime.kubecall import call

# A followed watch ends this long after the last Prepare that asked for it.
FOLLOW_GRACE_S = 10.0


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


class ClusterView:
    def __init__(self, api: client.ApiClient, dra: DraApi, node_name: str, namespace: str, *,
                 cliques_enabled: bool) -> None:
        self._loop = asyncio.get_running_loop()
        self._custom = client.CustomObjectsApi(api)
        self.node = NodeOps(api, dra, node_name)
        self.domains = DomainDirectory(api)
        self._node_name = node_name
        self._namespace = namespace
        self._cliques_enabled = cliques_enabled
        # This node alone (field selector): the label keeper repairs on its changes.
        self.node_object = Informer(self._loop, CoreV1(api).list_node, _name, "node",
                                    {"field_selector": f"metadata.name={node_name}"})
        # The watched objects parsed once per version: a waiting Prepare reads them on
        # every wake-up.
        self._nodes = ParsedCache(K8sObject)
        # A label write starts from the watched Node instead of a GET (nodeops.py).
        self.node.watched = self._watched_node
        self._cliques = ParsedCache(ComputeDomainClique)
        self._cds = ParsedCache(StoredComputeDomain)
        # cd uid -> the watch of what tells this node's readiness in that domain, and the
        # loop time it was last asked for (a watch nobody waits on ends after a grace).
        self._followed: dict[str, Informer] = {}
        self._asked: dict[str, float] = {}
        self.follow_grace_s = FOLLOW_GRACE_S  # how long a watch nobody asks for stays
        self._version = 0
        self._changed = asyncio.Event()

    def start(self) -> None:
        self.node_object.start()

    def stop(self) -> None:
        self.node_object.stop()
        for informer in self._followed.values():
            informer.stop()
        self._followed.clear()

    async def wait_synced(self, timeout: float) -> None:
        """The Node watched, and ComputeDomains readable (the CRD installed, the API server
        reachable): what a Prepare needs before it can be answered."""
        async with asyncio.timeout(timeout):
            await self.node_object.synced.wait()
            while True:
                try:
                    await call(self._custom.list_cluster_custom_object, names.GROUP,
                               names.VERSION, names.PLURAL_COMPUTE_DOMAINS, limit=1,
                               _request_timeout=10)
                    return
                except Exception:
                    await asyncio.sleep(1.0)

    # --- following one domain ------------------------------------------------------------

    def _bump(self, _obj: dict[str, Any] | None = None) -> None:
        self._version += 1
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    def changed(self) -> None:
        """Wake the Prepares waiting on a change (the agent's own IMEX readiness)."""
        self._bump()

    async def follow(self, cd_uid: str, clique_id: str, timeout: float = 10.0) -> None:
        """Watch what tells this node's readiness in `cd_uid` (once; later calls return at
        once), and wait until that watch has listed (or `timeout`: the wait for readiness
        then proceeds on what is there and wakes on the watch's first events)."""
        self._asked[cd_uid] = self._loop.time()
        informer = self._followed.get(cd_uid)
        if informer is None:
            if self._cliques_enabled and clique_id:
                name = names.clique_object_name(cd_uid, clique_id)
                informer = Informer(
                    self._loop, self._custom.list_namespaced_custom_object, _name,
                    f"clique-{name}",
                    {"group": names.GROUP, "version": names.VERSION,
                     "namespace": self._namespace, "plural": names.PLURAL_CLIQUES,
                     "field_selector": f"metadata.name={name}"},
                    on_change=self._bump)
            else:  # the cliques gate off, or a node without clique: the domain's status
                cd = self.domains.get(cd_uid)
                if cd is None:
                    return
                informer = Informer(
                    self._loop, self._custom.list_namespaced_custom_object, _name,
                    f"computedomain-{cd.name}",
                    {"group": names.GROUP, "version": names.VERSION,
                     "namespace": cd.namespace,
                     "plural": names.PLURAL_COMPUTE_DOMAINS,
                     "field_selector": f"metadata.name={cd.name}"},
                    on_change=self._bump)
            self._followed[cd_uid] = informer
            informer.start()
        if not informer.synced.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await informer.synced.wait()
            self._bump()

    def unfollow(self, cd_uid: str) -> None:
        self._asked.pop(cd_uid, None)
        informer = self._followed.pop(cd_uid, None)
        if informer is not None:
            informer.stop()

    def done_waiting(self, cd_uid: str, grace: float | None = None) -> None:
        """A Prepare no longer waits on `cd_uid`'s readiness: end its watch once nobody
        asked for it for `grace` seconds (default `follow_grace_s`). A node whose claims
        are prepared has no use for its peers' joins and readiness flips; watching them
        would make its cost grow with its clique's activity for as long as its workload
        runs."""
        asked = self._asked.get(cd_uid)
        if asked is None:
            return
        if grace is None:
            grace = self.follow_grace_s

        def expire() -> None:
            if self._asked.get(cd_uid) == asked:
                self.unfollow(cd_uid)

        self._loop.call_later(grace, expire)

    @property
    def followed(self) -> list[str]:
        return list(self._followed)

    def _clique(self, cd_uid: str, clique_id: str) -> ComputeDomainClique | None:
        informer = self._followed.get(cd_uid)
        if informer is None or not clique_id:
            return None
        return self._cliques.get(informer.items, names.clique_object_name(cd_uid, clique_id))

    def _status_node(self, cd_uid: str) -> ComputeDomainNode | None:
        """This node's entry in the followed ComputeDomain's status.nodes."""
        informer = self._followed.get(cd_uid)
        if informer is None:
            return None
        for name in informer.items:
            cd = self._cds.get(informer.items, name)
            if cd is not None and cd.uid == cd_uid:
                return cd.status.node(self._node_name) if cd.status else None
        return None

    # --- the driver's Cluster protocol ---------------------------------------------------

    async def fetch_claim(self, ref: ClaimRef) -> ResourceClaim:
        return await self.node.fetch_claim(ref)

    async def claim_status(self, ref: ClaimRef) -> dict[str, Any]:
        return await self.node.claim_status(ref)

    async def read_pod(self, namespace: str, name: str) -> Pod:
        return await self.node.read_pod(namespace, name)

    def _watched_node(self) -> K8sObject | None:
        """This Node as its watch last delivered it (None before the first listing)."""
        return self._nodes.get(self.node_object.items, self._node_name)

    async def add_cd_label(self, cd_uid: str) -> None:
        """The label, unless the watched Node already carries it: a Prepare waiting for
        readiness comes back here on every wake-up, and must not GET the Node each time."""
        node = self._watched_node()
        if node is not None and node.label(names.LABEL_COMPUTE_DOMAIN) == cd_uid:
            return
        await self.node.add_cd_label(cd_uid)

    async def remove_cd_label(self, cd_uid: str) -> None:
        """No channel claim of the domain is left here: nor is there anything to follow,
        so its watch ends after the grace (`done_waiting`), not at once: the next Prepare
        of the domain here (a pod replaced on the node) would otherwise start a new watch
        and wait for its LIST, a round trip and a thread start on its path (and the ended
        watch's thread and connection linger until the server's next event or bookmark;
        tests/bench/bench_prepare.py). A Prepare that gave up waiting called no
        `done_waiting`: this one still ends its watch."""
        self.done_waiting(cd_uid)
        await self.node.remove_cd_label(cd_uid)

    async def compute_domain(self, uid: str, namespace: str | None = None
                             ) -> StoredComputeDomain | None:
        return await self.domains.lookup(uid, namespace)

    def known_domain(self, uid: str) -> StoredComputeDomain | None:
        return self.domains.get(uid)

    def node_ready(self, cd_uid: str, clique_id: str) -> bool:
        """From this node's entry in its clique (what `follow` watches with the cliques
        gate on), else from its node in the domain's status: a clique without our entry
        yet means not ready, never a look into the domain's status through the clique's
        watch (whose objects are cliques)."""
        if self._cliques_enabled and clique_id:
            clique = self._clique(cd_uid, clique_id)
            daemon = clique.daemon(self._node_name) if clique is not None else None
            return daemon is not None and daemon.status == names.STATUS_READY
        node = self._status_node(cd_uid)
        return node is not None and node.status == names.STATUS_READY

    def daemon_entry(self, cd_uid: str, clique_id: str) -> str:
        """Where this node's daemon stands, for a waiting claim's message: the status of its
        clique entry (or, with the cliques gate off, of its node in the ComputeDomain
        status), or that there is none yet."""
        if self._cliques_enabled and clique_id:
            clique = self._clique(cd_uid, clique_id)
            if clique is None:
                return f"clique {clique_id} has no entries yet"
            daemon = clique.daemon(self._node_name)
            if daemon is not None:
                return f"its entry in clique {clique_id} is {daemon.status or 'without status'}"
            return f"it has no entry in clique {clique_id} yet"
        node = self._status_node(cd_uid)
        if node is not None:
            return f"its node in the ComputeDomain status is {node.status or 'unset'}"
        return "it is not in the ComputeDomain status yet"

    def generation(self) -> tuple[int, ...]:
        return (self._version,)

    async def wait_for_change(self, since: tuple[int, ...], timeout: float) -> None:
        """Return once any followed object changed after `since`, or after `timeout`."""
        deadline = self._loop.time() + timeout
        while (self._version,) == since:
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return
            changed = self._changed
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                return
