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
committed decides, the same for every reader (api/clique.py `settled_indices`): an entry
keeps its index unless an earlier entry holds it, else it holds the smallest one no earlier
entry holds. That depends only on the entries before it, so a daemon knows its index from
the answer to its own append, starts IMEX with it, and writes it into its entry with its
next write (the readiness flip): a contested join costs no write of its own, and a join
costs two writes (append, Ready) however many daemons join at once and however loaded the
machine is. A new joiner picks the smallest index the settled list leaves free.

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
import zlib
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
from api.clique import settled_indices
from api.objects import K8sObject
from runtime.informer import Informer
from runtime.kubecall import call_retrying

log = logging.getLogger(__name__)

JSON_PATCH = "application/json-patch+json"
# A missing clique is created by the daemon of the first of these slots (spread over the
# constructor's `create_stagger_s`).
CREATE_SLOTS = 16
# A slot is at least this many API round trips long (a read, then a create that lands).
CREATE_SLOT_ROUND_TRIPS = 3


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
        create_stagger_s: float = 0.4,
    ) -> None:
        super().__init__(api_client, rng)
        self.create_stagger_s = create_stagger_s
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

    def _free_index(self, daemons: list[Obj]) -> int:
        """The smallest index (or our former one) the entries of `daemons` leave free, as
        their order settles them."""
        return smallest_free_index(
            set(settled_indices([d.get("index") for d in daemons])),
            self.max_nodes,
            f"ComputeDomainClique {self.namespace}/{self.name}",
            preferred=self.index,
        )

    def settled_index(self, daemons: list[Obj]) -> int | None:
        """The index our entry holds in `daemons` (None: no entry of ours)."""
        position = self._position(daemons)
        if position is None:
            return None
        return settled_indices([d.get("index") for d in daemons[: position + 1]])[-1]

    def _index_fix(self, daemons: list[Obj], position: int) -> list[Obj]:
        """The op that writes our settled index into our entry, folded into the write
        being made anyway; none when the entry already says it."""
        settled = self.settled_index(daemons)
        if settled is None or daemons[position].get("index") == settled:
            return []
        return [{"op": "add", "path": f"/daemons/{position}/index", "value": settled}]

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
                     "value": names.STATUS_NOT_READY}, *self._index_fix(daemons, position)]
        if ops:
            ops += [*self._guard(position, ip), *self._index_fix(daemons, position)]
        return ops

    def _check_room(self, index: int) -> None:
        """The settled index of an entry appended to a clique filled meanwhile may lie at
        or beyond the maximum: such an entry does not belong (CliqueFullError)."""
        if self.max_nodes is not None and index >= self.max_nodes:
            raise CliqueFullError(
                f"ComputeDomainClique {self.namespace}/{self.name} is full: daemons that "
                f"joined at the same time hold every index below the maximum of "
                f"{self.max_nodes} nodes per IMEX domain; raise --max-nodes-per-imex-domain "
                f"({names.ENV_MAX_NODES_PER_IMEX_DOMAIN}) to admit more (no available "
                f"indices within maxNodesPerIMEXDomain ({self.max_nodes}))")

    async def join(self, ip: str) -> int:
        """Insert or refresh our entry; returns our index (stable across restarts)."""
        self.ip = ip
        loop = asyncio.get_running_loop()
        started = loop.time()
        obj = await self._read()
        if obj is None and self.create_stagger_s > 0:
            # Every daemon of a new domain starts at once and finds no clique: all but
            # one create would be lost (a wasted write each). Each node waits its own
            # slot and reads again, so the first slot's daemon creates and the rest append.
            # A slot lasts at least CREATE_SLOT_ROUND_TRIPS of the read just made: on a
            # loaded API server a create takes longer to land, and slots measured in its
            # round trips lose as few creates as on an idle one.
            round_trip = loop.time() - started
            spacing = max(self.create_stagger_s / CREATE_SLOTS,
                          CREATE_SLOT_ROUND_TRIPS * round_trip)
            slot = zlib.crc32(self.node_name.encode()) % CREATE_SLOTS
            await asyncio.sleep(slot * spacing)
            obj = await self._read()
        for _ in range(MAX_ATTEMPTS):
            if obj is None:
                created = await self._create_or_lost(self._created_with_us)
                if created is not None:
                    log.info("Successfully created CDClique '%s'", self.name)
                obj = created or await self._read()
                continue
            self._check_ours(obj)
            ops = self._join_ops(obj, ip)
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
        daemons = _daemons_of(obj)
        entry, index = self._own(daemons), self.settled_index(daemons)
        assert entry is not None and index is not None
        try:
            self._check_room(index)
        except CliqueFullError:
            await self._drop_entry(obj)
            raise
        self.index = index
        # The reference daemon's words (cdclique.go); supervisor.py logs the index we got.
        log.info("Successfully inserted/updated daemon info in CDClique %s (myDaemon: %s)",
                 self.name, self._go_value({**entry, "index": index}))
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

    async def _drop_entry(self, obj: Obj) -> None:
        """Our appended entry holds no index below the maximum: take it out again, so the
        clique holds no entry beyond it."""
        daemons = _daemons_of(obj)
        position = self._position(daemons)
        if position is not None:
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
                   {"op": "add", "path": f"/daemons/{position}/status", "value": want},
                   *self._index_fix(daemons, position)]
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
