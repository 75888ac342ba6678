"""Clique membership of one IMEX daemon: its entry (node, IP, index, readiness) in the
ComputeDomainClique `<cdUID>.<cliqueID>`, or, with ComputeDomainCliques=false, in
`ComputeDomain.status.nodes` (legacy_clique_membership.py). The reference daemon keeps the
same entries in cdclique.go and cdstatus.go of
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/tree/main/cmd/compute-domain-daemon.

The clique is written with JSON patches that touch our own entry only, each guarded by
`test` operations on the entry's position (its nodeName and IP), not by the object's
resourceVersion. Peers joining or flipping readiness at the same time therefore never
conflict: a join costs one write (an append), a readiness change one write, whatever the
number of peers. A whole-object replace with the resourceVersion, as the reference does,
makes every concurrent writer but one lose and retry
(https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/816,
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/1107): at 72 nodes that was
5 writes and up to 8 conflicts per join. A failed `test` (our entry moved: a peer left
before it) is a 422; we re-read and patch again.

Two daemons appending at once may pick the same free index. The list order the server
committed decides, the same for every observer: the entry earlier in the list keeps the
index, the later one takes a free one (each loser of a round a different one). Should an
earlier entry's new index meet a later one's, the later one yields when its watch shows it
(supervisor.py joins again), so every clique settles with unique indices. Readers
(supervisor.py) take the first entry of an index meanwhile.

Decisions of our own (where the reference is silent or we chose differently):

* The clique is created with our own entry and our pod's ownerReference in it (not empty
  and then updated): one write per joiner instead of two, the creator trivially gets
  index 0, and the ownerReferences list exists for every later joiner to append to.
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
import logging
import random
from collections.abc import Callable

from kubernetes import client

from agent.daemon.membership_base import (
    MAX_ATTEMPTS,
    CliqueFullError,
    MembershipError,
    Obj,
    OnUpdate,
    OptimisticWriter,
    deliver_updates,
    entry_index,
    json_object,
    smallest_free_index,
)
from api import names
from api.objects import K8sObject
from runtime.informer import Informer
from runtime.kubecall import call_retrying

log = logging.getLogger(__name__)

JSON_PATCH = "application/json-patch+json"


class CliqueMembership(OptimisticWriter):
    """Our daemon's entry in the ComputeDomainClique `<cdUID>.<cliqueID>` in `namespace`.

    The clique is owned by the daemon pods in it (garbage-collected with the last one).
    Without a pod (`pod_uid` "": the node agent supervises IMEX) no owner is written and
    the controller deletes the cliques with their domain."""

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
        cd_name: str = "",
        cd_namespace: str = "",
    ) -> None:
        super().__init__(api_client, rng)
        self.namespace = namespace
        self.cd_name = cd_name
        self.cd_namespace = cd_namespace or namespace
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

    def _object_name(self) -> str:
        return self.name

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
        return json_object(await call_retrying(
            self._custom.create_namespaced_custom_object, *self._args(), body
        ))

    def _owner_ref(self) -> Obj:
        return {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "uid": self.pod_uid}

    def _check_ours(self, obj: Obj) -> None:
        # Its metadata parsed: the daemons list stays JSON (see membership_base.Obj).
        label = K8sObject.from_dict(obj).label(names.LABEL_COMPUTE_DOMAIN)
        if label != self.cd_uid:
            raise MembershipError(
                f"ComputeDomainClique {self.namespace}/{self.name} carries "
                f"{names.LABEL_COMPUTE_DOMAIN}={label!r}, not this domain's {self.cd_uid!r}"
            )

    def _own(self, daemons: list[Obj]) -> Obj | None:
        return next((d for d in daemons if d.get("nodeName") == self.node_name), None)

    # --- operations --------------------------------------------------------------------

    async def _patch(self, ops: list[Obj]) -> Obj:
        return json_object(await call_retrying(
            self._custom.patch_namespaced_custom_object, *self._args(), self.name, ops,
            _content_type=JSON_PATCH,
        ))

    async def _apply_ops(self, ops: list[Obj]) -> Obj | None:
        """Apply a JSON patch; the object after it, or None when a `test` failed or the
        clique is gone (the caller re-reads and decides again)."""
        try:
            result = await self._patch(ops)
        except client.ApiException as err:
            if err.status not in (404, 409, 422):
                raise
            self.conflicts += 1
            return None
        self.writes += 1
        return result

    def _position(self, daemons: list[Obj]) -> int | None:
        return next(
            (i for i, d in enumerate(daemons) if d.get("nodeName") == self.node_name), None
        )

    def _guard(self, position: int, ip: str | None) -> list[Obj]:
        """`test` operations: the entry at `position` is still ours (and has our IP)."""
        ops = [{"op": "test", "path": f"/daemons/{position}/nodeName", "value": self.node_name}]
        if ip is not None:
            ops.append({"op": "test", "path": f"/daemons/{position}/ipAddress", "value": ip})
        return ops

    def _new_entry(self, ip: str, index: int) -> Obj:
        return {
            "nodeName": self.node_name,
            "ipAddress": ip,
            "cliqueID": self.clique_id,
            "index": index,
            "status": names.STATUS_NOT_READY,
        }

    def _free_index(self, daemons: list[Obj], skip: int | None = None) -> int:
        """The smallest free index (or our former one) among `daemons`, not counting the
        entry at position `skip` (our own)."""
        used = {entry_index(d) for i, d in enumerate(daemons) if i != skip}
        return smallest_free_index(
            used,
            self.max_nodes,
            f"ComputeDomainClique {self.namespace}/{self.name}",
            preferred=self.index,
        )

    def _index_for_loser(self, daemons: list[Obj], position: int) -> int:
        """A free index for our entry at `position`, whose index an earlier entry holds.
        Every entry that lost its index in this list takes a different free one: the one of
        its rank among the losers (they all see the same list order), so losers of one round
        do not all pick the same smallest free index and contest it again. Indices stay the
        lowest free ones (the CRD's contract); a joiner that took the same one meanwhile is
        settled by its watch (supervisor.py)."""
        held: set[int] = set()
        losers: list[int] = []
        for i, d in enumerate(daemons):
            index = entry_index(d)
            if index in held:
                losers.append(i)
            else:
                held.add(index)
        limit = self.max_nodes if self.max_nodes is not None else len(daemons) + len(held)
        free = [i for i in range(max(limit, 0)) if i not in held]
        rank = losers.index(position) if position in losers else 0
        if rank < len(free):
            return free[rank]
        return self._free_index(daemons, skip=position)  # raises CliqueFullError if full

    def _join_ops(self, obj: Obj, ip: str) -> list[Obj] | None:
        """The patch that brings `obj` to holding our entry (with `ip`, an index no earlier
        entry holds) and our pod's ownerReference; [] when it already does. None when
        `obj` lacks the lists to patch (written by someone else): then a full update."""
        ops: list[Obj] = []
        daemons = obj.get("daemons")
        if not isinstance(daemons, list):
            return None
        refs = obj["metadata"].get("ownerReferences")
        if self.pod_uid and not any(r.get("uid") == self.pod_uid for r in refs or ()):
            if not refs:
                return None
            ops.append({"op": "add", "path": "/metadata/ownerReferences/-",
                        "value": self._owner_ref()})
        position = self._position(daemons)
        if position is None:
            return [*ops, {"op": "add", "path": "/daemons/-",
                           "value": self._new_entry(ip, self._free_index(daemons))}]
        entry = daemons[position]
        if entry.get("ipAddress") != ip:
            return [*ops, *self._guard(position, None),
                    {"op": "add", "path": f"/daemons/{position}/ipAddress", "value": ip},
                    {"op": "add", "path": f"/daemons/{position}/status",
                     "value": names.STATUS_NOT_READY}]
        if self.contested(daemons):
            # An earlier entry holds our index (we appended at the same time): it keeps it.
            ops += [*self._guard(position, ip),
                    {"op": "add", "path": f"/daemons/{position}/index",
                     "value": self._index_for_loser(daemons, position)}]
        return ops

    def contested(self, daemons: list[Obj]) -> bool:
        """Our entry's index is held by an entry earlier in the list (which keeps it)."""
        position = self._position(daemons)
        if position is None:
            return False
        index = entry_index(daemons[position])
        return any(entry_index(d) == index for d in daemons[:position])

    async def join(self, ip: str) -> int:
        """Insert or refresh our entry; returns our index (stable across restarts)."""
        self.ip = ip
        obj = await self._read()
        for _ in range(MAX_ATTEMPTS):
            if obj is None:
                created = await self._create_or_lost(self._created_with_us)
                if created is not None:
                    log.info("Successfully created CDClique '%s'", self.name)
                obj = created or await self._read()
                continue
            self._check_ours(obj)
            try:
                ops = self._join_ops(obj, ip)
            except CliqueFullError:
                await self._drop_contested(obj)
                raise
            if ops == []:
                break
            if self._position(_daemons_of(obj)) is None:
                log.info("CDClique does not contain node name '%s' yet, try to insert myself: "
                         "%s", self.node_name, self._go_value(None))
            if ops is None:
                obj = await self._mutate(self._join_mutation(ip), create=True)
                continue
            obj = await self._apply_ops(ops)
            if obj is None:
                obj = await self._read()
        else:
            raise MembershipError(f"gave up after {MAX_ATTEMPTS} conflicting writes")
        assert obj is not None
        entry = self._own(_daemons_of(obj))
        assert entry is not None
        self.index = entry_index(entry)
        # The reference daemon's words (cdclique.go); supervisor.py logs the index we got.
        log.info("Successfully inserted/updated daemon info in CDClique %s (myDaemon: %s)",
                 self.name, self._go_value(entry))
        return self.index

    def _go_value(self, entry: Obj | None) -> str:
        """Our entry as the reference prints its ComputeDomainDaemonInfo with Go's `%v`
        (`&{nodeName ipAddress cliqueID index status}`); None: the one about to be inserted,
        before it has an IP or index."""
        if entry is None:
            return f"&{{{self.node_name}  {self.clique_id} 0 {names.STATUS_NOT_READY}}}"
        return (f"&{{{entry.get('nodeName', '')} {entry.get('ipAddress', '')} "
                f"{entry.get('cliqueID', '')} {entry_index(entry)} "
                f"{entry.get('status', names.STATUS_NOT_READY)}}}")

    def _created_with_us(self, obj: Obj | None) -> Obj | None:
        assert obj is not None and self.ip is not None
        obj["metadata"]["ownerReferences"] = [self._owner_ref()] if self.pod_uid else []
        obj["daemons"] = [self._new_entry(self.ip, self._free_index([]))]
        return obj

    async def _drop_contested(self, obj: Obj) -> None:
        """Our appended entry lost its index and none is free: take it out again, so the
        clique holds no entry beyond the maximum."""
        daemons = obj.get("daemons") or []
        position = self._position(daemons)
        if position is not None and self.contested(daemons):
            await self._apply_ops(
                [*self._guard(position, self.ip), {"op": "remove", "path": f"/daemons/{position}"}]
            )

    def _join_mutation(self, ip: str) -> Callable[[Obj | None], Obj | None]:
        """The whole-object form of a join, for a clique whose lists are missing (another
        writer's): a replace with the resourceVersion read."""

        def mutate(obj: Obj | None) -> Obj | None:
            assert obj is not None  # a missing clique is created by _create, not here
            self._check_ours(obj)
            refs = obj["metadata"].get("ownerReferences") or []
            if self.pod_uid and not any(r.get("uid") == self.pod_uid for r in refs):
                refs = [*refs, self._owner_ref()]
            obj["metadata"]["ownerReferences"] = refs
            daemons = _daemons_of(obj)
            obj["daemons"] = daemons
            entry = self._own(daemons)
            if entry is None:
                daemons.append(self._new_entry(ip, self._free_index(daemons)))
            elif entry.get("ipAddress") != ip:
                entry["ipAddress"] = ip
                entry["status"] = names.STATUS_NOT_READY
            return obj

        return mutate

    async def set_status(self, ready: bool) -> None:
        """Copy our readiness into our entry (no write when it already says so)."""
        want = names.STATUS_READY if ready else names.STATUS_NOT_READY
        obj = await self._read()
        for _ in range(MAX_ATTEMPTS):
            daemons = _daemons_of(obj)
            position = self._position(daemons)
            if position is None:
                raise MembershipError(
                    f"daemon info not yet listed in ComputeDomainClique "
                    f"{self.namespace}/{self.name} (waiting for insertion)"
                )
            if daemons[position].get("status", names.STATUS_NOT_READY) == want:
                return
            ip = daemons[position].get("ipAddress")
            ops = [*self._guard(position, ip if isinstance(ip, str) else None),
                   {"op": "add", "path": f"/daemons/{position}/status", "value": want}]
            if await self._apply_ops(ops) is not None:
                log.info("Successfully updated daemon info status in CDClique (new status: %s)",
                         want)
                return
            obj = await self._read()
        raise MembershipError(f"gave up after {MAX_ATTEMPTS} conflicting writes")

    async def leave(self) -> None:
        """Remove our entry (graceful shutdown); a missing clique or entry is fine."""
        obj = await self._read()
        for _ in range(MAX_ATTEMPTS):
            daemons = _daemons_of(obj)
            position = self._position(daemons)
            if position is None or (
                self.ip is not None and daemons[position].get("ipAddress") != self.ip
            ):
                return
            ops = [*self._guard(position, self.ip),
                   {"op": "remove", "path": f"/daemons/{position}"}]
            if await self._apply_ops(ops) is not None:
                # The reference daemon's words (cdclique.go), which its tests grep.
                log.info("Successfully removed daemon with IP %s from CDClique %s (from "
                         "ComputeDomain %s/%s)", self.ip, self.name, self.cd_namespace,
                         self.cd_name or self.cd_uid)
                return
            obj = await self._read()
        raise MembershipError(f"could not remove our entry from ComputeDomainClique "
                              f"{self.namespace}/{self.name}: gave up after {MAX_ATTEMPTS} "
                              f"conflicting writes")

    async def peers(self) -> list[Obj]:
        """The clique's daemons as the server has them now (empty if there is no clique)."""
        return _daemons_of(await self._read())

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
        await deliver_updates(
            informer, lambda: _daemons_of(informer.items.get(self.name)), on_update
        )


def _daemons_of(obj: Obj | None) -> list[Obj]:
    """The clique's `daemons` entries (a new list; [] when there are none)."""
    daemons = obj.get("daemons") if obj is not None else None
    return list(daemons) if isinstance(daemons, list) else []
