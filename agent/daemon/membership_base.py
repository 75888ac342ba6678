"""What the two membership writers share: the entry list they write (a ComputeDomainClique's
`daemons`, or `ComputeDomain.status.nodes` with ComputeDomainCliques off), how a free index is
chosen, the optimistic read-modify-write loop, and the watch that hands peers' entries on.

agent/daemon/clique_membership.py (the clique) and agent/daemon/legacy_clique_membership.py
(the ComputeDomain status) build on it; the former's docstring explains the write protocol.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes import client

from api import names
from runtime.informer import Informer
from runtime.kubecall import call_retrying, status_of

# A clique or ComputeDomain, or one daemon's entry in it, as the API's JSON: the write
# protocol below patches and replaces the JSON itself, and peers' entries (anyone with
# write access to the object may write them) are checked one by one where they are used
# (supervisor.py `_usable`), so one malformed entry never stops a daemon from following
# its peers, as a parse of the whole object would.
Obj = dict[str, Any]
OnUpdate = Callable[[list[Obj]], Awaitable[None]]

# Retry immediately after a conflict, with up to this much jitter (seconds).
CONFLICT_JITTER_S = 0.02
# A bound so a pathological loop surfaces as an error instead of spinning forever.
MAX_ATTEMPTS = 200


class MembershipError(RuntimeError):
    """The entry cannot be written (the object is not ours, or retries ran out)."""


def json_object(value: object) -> Obj:
    """An API response that is a JSON object (the custom objects client returns `object`)."""
    if not isinstance(value, dict):
        raise MembershipError(f"the API server sent {type(value).__name__}, not an object")
    return value


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


class OptimisticWriter:
    """GET, mutate, full update; on 409 re-GET and retry at once with jitter."""

    def __init__(self, api_client: client.ApiClient, rng: random.Random | None) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._rng = rng or random.Random()
        self.writes = 0  # successful creates and updates
        self.conflicts = 0  # 409s: lost update races and lost create races
        self.reads = 0

    # The object written: a subclass names it; `_put` replaces its status subresource when
    # `_status_only` (ComputeDomain.status.nodes), else the whole object (the clique).
    _status_only = False

    def _args(self) -> tuple[str, str, str, str]:
        """group, version, namespace, plural."""
        raise NotImplementedError

    def _object_name(self) -> str:
        raise NotImplementedError

    async def _get(self) -> Obj | None:
        return json_object(await call_retrying(
            self._custom.get_namespaced_custom_object, *self._args(), self._object_name()
        ))

    async def _put(self, obj: Obj) -> Obj:
        replace = (self._custom.replace_namespaced_custom_object_status if self._status_only
                   else self._custom.replace_namespaced_custom_object)
        return json_object(await call_retrying(
            replace, *self._args(), self._object_name(), obj
        ))

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

    async def _create_or_lost(self, mutate: Callable[[Obj | None], Obj | None]) -> Obj | None:
        """Create the object; None when a peer created it first (409 AlreadyExists, a
        conflict: the caller reads the peer's and goes on)."""
        try:
            created = await self._create(mutate)
        except client.ApiException as err:
            if err.status != 409:
                raise
            self.conflicts += 1
            return None
        self.writes += 1
        return created

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
                created = await self._create_or_lost(mutate)
                if created is None:
                    obj = await self._read()
                    continue
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


def entry_index(entry: Obj) -> int:
    return int(entry.get("index", 0))


async def deliver_updates(
    informer: Informer, current: Callable[[], list[Obj]], on_update: OnUpdate
) -> None:
    """Run `informer` and call `on_update` with a copy of `current()` each time it changes,
    until cancelled (then the informer stops)."""
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
