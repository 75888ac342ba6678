"""Clique membership of one IMEX daemon: its entry (node, IP, index, readiness) in the
ComputeDomainClique `<cdUID>.<cliqueID>`, or, with ComputeDomainCliques=false, in
`ComputeDomain.status.nodes` (reference daemon.md section 2).

Every write is a full update carrying the resourceVersion just read. On 409 Conflict we
re-GET from the server and retry at once with a few milliseconds of jitter: the reference
retries from its (stale) informer cache with exponential backoff, and with many daemons
joining together that turns into a conflict storm (sigs#816, sigs#1107). Reading fresh, each
round of conflicting writers has exactly one winner, so N simultaneous joiners cost N
successful writes and at most N*(N-1)/2 conflicts, in practice far fewer.

Decisions (where the reference is silent or the brief left a choice):

* The clique is created with our own entry in it (not empty and then updated): one write
  per joiner instead of two, and the creator trivially gets index 0.
* Rejoin on the same node keeps the entry's index; a daemon whose entry (or whole clique)
  was deleted asks for the index it held while that is free, so a recreated clique keeps
  the indices the daemons and their IMEX peers know. If the IP changed the entry goes back to
  NotReady (a new pod at a new address has proven nothing yet; the readiness path flips it
  to Ready). If the IP is unchanged the entry, its status included, is left alone and no
  write happens (unless our pod's ownerReference is missing), as in the reference.
* `leave()` removes the entry for our node only while it still carries the IP we joined
  with: a replacement pod on the same node that already rewrote the entry keeps it.
* Our pod's ownerReference is added to the clique on every join, never removed: the clique
  is garbage-collected once all daemon pods that touched it are gone.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes import client

from api import names
from api.kube import Informer, call_retrying, status_of

log = logging.getLogger(__name__)

Obj = dict[str, Any]
OnUpdate = Callable[[list[Obj]], Awaitable[None]]

# Retry immediately after a conflict, with up to this much jitter (seconds).
CONFLICT_JITTER_S = 0.02
# A bound so a pathological loop surfaces as an error instead of spinning forever.
MAX_ATTEMPTS = 200


class MembershipError(RuntimeError):
    """The entry cannot be written (the object is not ours, or retries ran out)."""


class CliqueFullError(MembershipError):
    """Every index below the maximum is taken."""


def smallest_free_index(
    used: set[int], max_nodes: int | None, where: str, preferred: int | None = None
) -> int:
    """`preferred` (the index this daemon held before its entry or the whole clique was
    deleted) while it is free and within the limit, so a recreated clique keeps every
    surviving daemon's index and no IMEX restarts; else the smallest non-negative integer
    not in `used` (gaps are filled so surviving daemons keep their DNS names).
    `max_nodes=None` skips the limit."""
    if (preferred is not None and preferred >= 0 and preferred not in used
            and (max_nodes is None or preferred < max_nodes)):
        return preferred
    index = 0
    while index in used:
        index += 1
    if max_nodes is not None and index >= max_nodes:
        raise CliqueFullError(
            f"{where} is full: {len(used)} daemons hold every index below the maximum of "
            f"{max_nodes} nodes per IMEX domain; raise --max-nodes-per-imex-domain "
            f"({names.ENV_MAX_NODES_PER_IMEX_DOMAIN}) to admit more (no available indices "
            f"within maxNodesPerIMEXDomain ({max_nodes}))"
        )
    return index


class _OptimisticWriter:
    """GET, mutate, full update; on 409 re-GET and retry at once with jitter."""

    def __init__(self, api_client: client.ApiClient, rng: random.Random | None) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._rng = rng or random.Random()
        self.writes = 0  # successful creates and updates
        self.conflicts = 0  # 409s: lost update races and lost create races
        self.reads = 0

    # Subclasses provide these three.
    async def _get(self) -> Obj | None:
        raise NotImplementedError

    async def _put(self, obj: Obj) -> Obj:
        raise NotImplementedError

    async def _create(self, mutate: Callable[[Obj | None], Obj | None]) -> Obj | None:
        """Create the object if this kind of writer may (None: it may not)."""
        return None

    async def _read(self) -> Obj | None:
        self.reads += 1
        try:
            return await self._get()
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise

    async def _jitter(self) -> None:
        await asyncio.sleep(self._rng.uniform(0, CONFLICT_JITTER_S))

    async def _mutate(
        self, mutate: Callable[[Obj | None], Obj | None], *, create: bool
    ) -> Obj | None:
        """Apply `mutate` (which returns the object to write, or None for no write) until a
        write sticks. With `create`, a missing object is created from `mutate(None)`."""
        obj = await self._read()
        for _ in range(MAX_ATTEMPTS):
            if obj is None:
                if not create:
                    mutate(None)  # lets the caller raise for a missing object
                    return None
                try:
                    created = await self._create(mutate)
                except client.ApiException as err:
                    if err.status != 409:  # AlreadyExists: a peer won; read it and go on
                        raise
                    self.conflicts += 1
                    obj = await self._read()
                    continue
                self.writes += 1
                return created
            new = mutate(copy.deepcopy(obj))
            if new is None:
                return obj
            try:
                result = await self._put(new)
            except client.ApiException as err:
                if status_of(err) not in (409, 404):
                    raise
                self.conflicts += 1
                await self._jitter()
                obj = await self._read()
                continue
            self.writes += 1
            return result
        raise MembershipError(f"gave up after {MAX_ATTEMPTS} conflicting writes")


def _entry_index(entry: Obj) -> int:
    return int(entry.get("index", 0))


def _apply_status(obj: Obj | None, entry: Obj | None, want: str, missing: str) -> Obj | None:
    """The shared `set_status` mutation: raise `missing` if our entry is not listed, write
    nothing if it already says `want`, else set it and return the object to write."""
    if obj is None or entry is None:
        raise MembershipError(missing)
    if entry.get("status", names.STATUS_NOT_READY) == want:
        return None
    entry["status"] = want
    return obj


def _without_own(entries: list[Obj], key: str, node_name: str, ip: str | None) -> list[Obj] | None:
    """The shared `leave` filter: `entries` less the one whose `key` is our node (and, once
    joined, whose IP is ours); None when nothing was removed (no write)."""
    keep = [
        e
        for e in entries
        if not (e.get(key) == node_name and (ip is None or e.get("ipAddress") == ip))
    ]
    if len(keep) == len(entries):
        return None
    return keep


class CliqueMembership(_OptimisticWriter):
    """Our daemon's entry in the ComputeDomainClique `<cdUID>.<cliqueID>` in `namespace`."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespace: str,
        cd_uid: str,
        clique_id: str,
        node_name: str,
        pod_name: str,
        pod_uid: str,
        max_nodes: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(api_client, rng)
        self.namespace = namespace
        self.cd_uid = cd_uid
        self.clique_id = clique_id
        self.node_name = node_name
        self.pod_name = pod_name
        self.pod_uid = pod_uid
        self.max_nodes = max_nodes
        self.name = names.clique_object_name(cd_uid, clique_id)
        self.ip: str | None = None
        self.index: int | None = None

    # --- API plumbing ------------------------------------------------------------------

    def _args(self) -> tuple[str, str, str, str]:
        return names.GROUP, names.VERSION, self.namespace, names.PLURAL_CLIQUES

    async def _get(self) -> Obj | None:
        return await call_retrying(
            self._custom.get_namespaced_custom_object, *self._args(), self.name
        )

    async def _put(self, obj: Obj) -> Obj:
        return await call_retrying(
            self._custom.replace_namespaced_custom_object, *self._args(), self.name, obj
        )

    async def _create(self, mutate: Callable[[Obj | None], Obj | None]) -> Obj | None:
        body = mutate(
            {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND_CLIQUE,
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "labels": {
                        names.LABEL_COMPUTE_DOMAIN: self.cd_uid,
                        names.LABEL_CLIQUE_ID: self.clique_id,
                    },
                    "ownerReferences": [],
                },
                "daemons": [],
            }
        )
        return await call_retrying(
            self._custom.create_namespaced_custom_object, *self._args(), body
        )

    def _owner_ref(self) -> Obj:
        return {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "uid": self.pod_uid}

    def _check_ours(self, obj: Obj) -> None:
        label = (obj["metadata"].get("labels") or {}).get(names.LABEL_COMPUTE_DOMAIN)
        if label != self.cd_uid:
            raise MembershipError(
                f"ComputeDomainClique {self.namespace}/{self.name} carries "
                f"{names.LABEL_COMPUTE_DOMAIN}={label!r}, not this domain's {self.cd_uid!r}"
            )

    def _own(self, daemons: list[Obj]) -> Obj | None:
        return next((d for d in daemons if d.get("nodeName") == self.node_name), None)

    # --- operations --------------------------------------------------------------------

    async def join(self, ip: str) -> int:
        """Insert or refresh our entry; returns our index (stable across restarts)."""
        self.ip = ip

        def mutate(obj: Obj | None) -> Obj | None:
            assert obj is not None
            self._check_ours(obj)
            changed = False
            refs = obj["metadata"].setdefault("ownerReferences", [])
            if not any(r.get("uid") == self.pod_uid for r in refs):
                refs.append(self._owner_ref())
                changed = True
            daemons = obj.get("daemons") or []
            obj["daemons"] = daemons
            entry = self._own(daemons)
            if entry is None:
                index = smallest_free_index(
                    {_entry_index(d) for d in daemons},
                    self.max_nodes,
                    f"ComputeDomainClique {self.namespace}/{self.name}",
                    preferred=self.index,
                )
                daemons.append(
                    {
                        "nodeName": self.node_name,
                        "ipAddress": ip,
                        "cliqueID": self.clique_id,
                        "index": index,
                        "status": names.STATUS_NOT_READY,
                    }
                )
                changed = True
            elif entry.get("ipAddress") != ip:
                entry["ipAddress"] = ip
                entry["status"] = names.STATUS_NOT_READY
                changed = True
            return obj if changed else None

        result = await self._mutate(mutate, create=True)
        assert result is not None
        entry = self._own(result.get("daemons") or [])
        assert entry is not None
        self.index = _entry_index(entry)
        log.info(
            "joined ComputeDomainClique %s/%s as index %d (node %s, IP %s)",
            self.namespace,
            self.name,
            self.index,
            self.node_name,
            ip,
        )
        return self.index

    async def set_status(self, ready: bool) -> None:
        """Copy our readiness into our entry (no write when it already says so)."""
        want = names.STATUS_READY if ready else names.STATUS_NOT_READY

        def mutate(obj: Obj | None) -> Obj | None:
            entry = self._own((obj or {}).get("daemons") or [])
            return _apply_status(
                obj,
                entry,
                want,
                f"daemon info not yet listed in ComputeDomainClique "
                f"{self.namespace}/{self.name} (waiting for insertion)",
            )

        await self._mutate(mutate, create=False)

    async def leave(self) -> None:
        """Remove our entry (graceful shutdown); a missing clique or entry is fine."""

        def mutate(obj: Obj | None) -> Obj | None:
            if obj is None:
                return None
            keep = _without_own(obj.get("daemons") or [], "nodeName", self.node_name, self.ip)
            if keep is None:
                return None
            obj["daemons"] = keep
            return obj

        await self._mutate(mutate, create=False)
        log.info("Successfully removed daemon with IP %s from CDClique %s", self.ip, self.name)

    async def peers(self) -> list[Obj]:
        """The clique's daemons as the server has them now (empty if there is no clique)."""
        obj = await self._read()
        return list((obj or {}).get("daemons") or [])

    async def watch(self, on_update: OnUpdate) -> None:
        """Call `on_update(daemons)` whenever the clique's daemons list changes, until
        cancelled. Nothing is delivered while the clique does not exist yet; its deletion
        delivers []."""
        informer = Informer(
            asyncio.get_running_loop(),
            self._custom.list_namespaced_custom_object,
            lambda o: o["metadata"]["name"],
            f"clique-{self.name}",
            {
                "group": names.GROUP,
                "version": names.VERSION,
                "namespace": self.namespace,
                "plural": names.PLURAL_CLIQUES,
                "field_selector": f"metadata.name={self.name}",
            },
        )
        await _deliver(informer, lambda: _daemons_of(informer.items.get(self.name)), on_update)


def _daemons_of(obj: Obj | None) -> list[Obj]:
    return list((obj or {}).get("daemons") or [])


async def _deliver(
    informer: Informer, current: Callable[[], list[Obj]], on_update: OnUpdate
) -> None:
    informer.start()
    try:
        seen = informer.version
        last: list[Obj] = []
        while True:
            await informer.changed(seen)
            seen = informer.version
            now = current()
            if now != last:
                last = now
                await on_update(copy.deepcopy(now))
    finally:
        informer.stop()
