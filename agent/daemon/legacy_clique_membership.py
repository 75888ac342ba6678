"""Our node's membership in `ComputeDomain.status.nodes`, the legacy home of daemon
entries when the ComputeDomainCliques feature gate is off (in the reference daemon,
`ComputeDomainStatusManager` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-daemon/cdstatus.go).

The write protocol (optimistic full updates, fresh re-GET on conflict) and the decisions
on rejoin and leave are those of `agent.daemon.clique_membership`, whose module docstring has them.
"""

from __future__ import annotations

import asyncio
import logging
import random

from kubernetes import client

from agent.daemon.membership_base import (
    MembershipError,
    Obj,
    OnUpdate,
    OptimisticWriter,
    deliver_updates,
    entry_index,
    smallest_free_index,
)
from api import names
from api.computedomain import StoredComputeDomain
from api.objects import K8sObject
from runtime.informer import Informer

log = logging.getLogger(__name__)


def _apply_status(obj: Obj | None, entry: Obj | None, want: str, missing: str) -> Obj | None:
    """The `set_status` mutation: raise `missing` if our entry is not listed, write
    nothing if it already says `want`, else set it and return the object to write."""
    if obj is None or entry is None:
        raise MembershipError(missing)
    if entry.get("status", names.STATUS_NOT_READY) == want:
        return None
    entry["status"] = want
    return obj


def _without_own(entries: list[Obj], key: str, node_name: str, ip: str | None) -> list[Obj] | None:
    """The `leave` filter: `entries` less the one whose `key` is our node (and, once
    joined, whose IP is ours); None when nothing was removed (no write)."""
    keep = [
        e
        for e in entries
        if not (e.get(key) == node_name and (ip is None or e.get("ipAddress") == ip))
    ]
    if len(keep) == len(entries):
        return None
    return keep


class LegacyMembership(OptimisticWriter):
    """Our node's entry in `ComputeDomain.status.nodes` (ComputeDomainCliques=false).

    Entries are `{name, ipAddress, cliqueID, index, status}`; index allocation only counts
    entries of our clique, because one CD status holds every clique of the domain. Writes go
    through the status subresource.
    """

    _status_only = True

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        cd_namespace: str,
        cd_name: str,
        cd_uid: str,
        clique_id: str,
        node_name: str,
        max_nodes: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(api_client, rng)
        self.cd_namespace = cd_namespace
        self.cd_name = cd_name
        self.cd_uid = cd_uid
        self.clique_id = clique_id
        self.node_name = node_name
        self.max_nodes = max_nodes
        self.ip: str | None = None
        self.index: int | None = None

    def _args(self) -> tuple[str, str, str, str]:
        return names.GROUP, names.VERSION, self.cd_namespace, names.PLURAL_COMPUTE_DOMAINS

    def _object_name(self) -> str:
        return self.cd_name

    def _where(self) -> str:
        return f"ComputeDomain {self.cd_namespace}/{self.cd_name}"

    def _ours(self, obj: Obj | None) -> Obj:
        """The CD if it is ours; a CD recreated under the same name is not."""
        if obj is None:
            raise MembershipError(f"{self._where()} not found")
        uid = _uid(obj)
        if uid != self.cd_uid:
            raise MembershipError(
                f"{self._where()} has UID {uid!r}, not {self.cd_uid!r} (recreated?)"
            )
        return obj

    @staticmethod
    def _nodes(obj: Obj) -> list[Obj]:
        """The entries of `obj`, the copy about to be written, made writable in place: its
        `status` and `status.nodes` created when missing."""
        status = obj.get("status") or {}
        obj["status"] = status
        nodes = status.get("nodes") or []
        status["nodes"] = nodes
        return nodes

    def _own(self, nodes: list[Obj]) -> Obj | None:
        return next((n for n in nodes if n.get("name") == self.node_name), None)

    async def join(self, ip: str) -> int:
        self.ip = ip

        def mutate(obj: Obj | None) -> Obj | None:
            nodes = self._nodes(self._ours(obj))
            entry = self._own(nodes)
            if entry is None:
                used = {entry_index(n) for n in nodes if n.get("cliqueID") == self.clique_id}
                limit = self.max_nodes if self.clique_id else None
                index = smallest_free_index(
                    used, limit, f"clique {self.clique_id!r} of {self._where()}",
                    preferred=self.index,
                )
                nodes.append(
                    {
                        "name": self.node_name,
                        "ipAddress": ip,
                        "cliqueID": self.clique_id,
                        "index": index,
                        "status": names.STATUS_NOT_READY,
                    }
                )
                return obj
            if entry.get("ipAddress") != ip:
                entry["ipAddress"] = ip
                entry["status"] = names.STATUS_NOT_READY
                return obj
            return None

        result = await self._mutate(mutate, create=False)
        entry = self._own(_entries(self._ours(result)))
        assert entry is not None
        self.index = entry_index(entry)
        log.info(
            "joined %s as index %d of clique %r (node %s, IP %s)",
            self._where(),
            self.index,
            self.clique_id,
            self.node_name,
            ip,
        )
        return self.index

    async def set_status(self, ready: bool) -> None:
        want = names.STATUS_READY if ready else names.STATUS_NOT_READY

        def mutate(obj: Obj | None) -> Obj | None:
            obj = self._ours(obj)
            entry = self._own(self._nodes(obj))
            return _apply_status(
                obj,
                entry,
                want,
                f"node {self.node_name} not yet listed in "
                f"{self._where()} status (waiting for insertion)",
            )

        await self._mutate(mutate, create=False)

    async def leave(self) -> None:
        def mutate(obj: Obj | None) -> Obj | None:
            if obj is None or _uid(obj) != self.cd_uid:
                return None
            keep = _without_own(self._nodes(obj), "name", self.node_name, self.ip)
            if keep is None:
                return None
            obj["status"]["nodes"] = keep
            return obj

        await self._mutate(mutate, create=False)
        log.info("Successfully removed node with IP %s from %s", self.ip, self._where())

    def _same_clique(self, obj: Obj | None) -> list[Obj]:
        if obj is None or _uid(obj) != self.cd_uid:
            return []
        return [n for n in _entries(obj) if n.get("cliqueID") == self.clique_id]

    async def peers(self) -> list[Obj]:
        """Entries of our clique (the CD status holds all cliques of the domain)."""
        return self._same_clique(await self._read())

    def _informer(self) -> Informer:
        return Informer(
            asyncio.get_running_loop(),
            self._custom.list_namespaced_custom_object,
            lambda o: o["metadata"]["name"],
            f"computedomain-{self.cd_name}",
            {
                "group": names.GROUP,
                "version": names.VERSION,
                "namespace": self.cd_namespace,
                "plural": names.PLURAL_COMPUTE_DOMAINS,
                "field_selector": f"metadata.name={self.cd_name}",
            },
        )

    async def watch(self, on_update: OnUpdate) -> None:
        """Call `on_update(entries of our clique)` on every change of them, until cancelled."""
        informer = self._informer()
        await deliver_updates(
            informer, lambda: self._same_clique(informer.items.get(self.cd_name)), on_update
        )

    async def wait_for_num_nodes(
        self, num_nodes: int | None = None, timeout: float | None = None
    ) -> list[Obj]:
        """IP mode: wait until the CD status lists `num_nodes` nodes (default spec.numNodes),
        counted across all cliques, and return all of them. The reference waits for
        equality; we accept more, since more nodes than numNodes never shrinks back on its
        own and waiting forever helps nobody (the reference calls it undefined behaviour)."""
        informer = self._informer()
        informer.start()
        try:

            def enough() -> bool:
                obj = informer.items.get(self.cd_name)
                if obj is None or _uid(obj) != self.cd_uid:
                    return False
                want = num_nodes if num_nodes is not None else _num_nodes(obj)
                have = len(_entries(obj))
                log.info("numNodes: %s, nodes seen: %s", want, have)  # at info, as the reference
                return have >= want

            if not await informer.wait_for(enough, timeout if timeout is not None else 1e9):
                raise TimeoutError(
                    f"{self._where()}: fewer than the expected nodes joined within {timeout} s"
                )
            return _entries(informer.items[self.cd_name])
        finally:
            informer.stop()


def _uid(cd: Obj) -> str | None:
    return K8sObject.from_dict(cd).metadata.uid


def _num_nodes(cd: Obj) -> int:
    """spec.numNodes (0 when unset); the spec parsed, the status left as JSON."""
    return StoredComputeDomain.from_dict({k: v for k, v in cd.items() if k != "status"}).num_nodes


def _entries(cd: Obj) -> list[Obj]:
    """status.nodes as the JSON holds them (a new list; [] without any), not changing `cd`."""
    status = cd.get("status")
    nodes = status.get("nodes") if isinstance(status, dict) else None
    return list(nodes) if isinstance(nodes, list) else []
