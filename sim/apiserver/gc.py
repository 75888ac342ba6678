"""Garbage collector and namespace controller, the two controllers inside every API server.

Cliques are owned by daemon pods and must vanish with the last of them; DaemonSet pods
must go with their DaemonSet; a deleted namespace takes its objects along. Like the real
ones these run asynchronously, driven by the store's events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from sim.apiserver.errors import ApiError
from sim.apiserver.lifecycle import (
    FOREGROUND_FINALIZER,
    ORPHAN_FINALIZER,
    DeleteOptions,
    Lifecycle,
)
from sim.apiserver.resources import ResourceInfo
from sim.apiserver.store import ADDED, DELETED, Event, Key, Obj, Store, clone

log = logging.getLogger(__name__)
Ref = tuple[Key, str, str]  # (resource key, namespace, name)


class GarbageCollector:
    """Deletes dependents whose owners are gone, honours foreground and orphan deletion, and
    empties terminating namespaces."""

    def __init__(
        self, store: Store, lifecycle: Lifecycle, info_for: Callable[[Key], ResourceInfo | None]
    ) -> None:
        self._store = store
        self._lifecycle = lifecycle
        self._info_for = info_for
        self._by_uid: dict[str, Ref] = {}
        self._dependents: dict[str, set[str]] = {}  # owner uid -> dependent uids
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        for key, obj in store.all_objects():
            self._index(key, obj)
        store.add_listener(self._observe)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        for key, obj in self._store.all_objects():
            if obj["metadata"].get("ownerReferences"):
                self._queue.put_nowait(("dependent", obj["metadata"]["uid"]))
            if key == ("", "namespaces") and obj["metadata"].get("deletionTimestamp"):
                self._queue.put_nowait(("namespace", obj["metadata"]["name"]))

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def idle(self) -> None:
        """Wait until every queued collection has been processed (tests use this)."""
        while not self._queue.empty():
            await asyncio.sleep(0.005)
        await asyncio.sleep(0)

    # --- indexing ----------------------------------------------------------------------

    def _index(self, key: Key, obj: Obj) -> None:
        md = obj["metadata"]
        uid = md.get("uid")
        if not uid:
            return
        self._by_uid[uid] = (key, md.get("namespace", ""), md["name"])
        for ref in md.get("ownerReferences") or ():
            self._dependents.setdefault(ref.get("uid", ""), set()).add(uid)

    def _unindex(self, obj: Obj) -> None:
        md = obj["metadata"]
        uid = md.get("uid", "")
        self._by_uid.pop(uid, None)
        for ref in md.get("ownerReferences") or ():
            deps = self._dependents.get(ref.get("uid", ""))
            if deps:
                deps.discard(uid)

    def _observe(self, event: Event) -> None:
        md = event.obj["metadata"]
        if event.old is not None:
            self._unindex(event.old)
        if event.type == DELETED:
            self._queue.put_nowait(("owner", md.get("uid", "")))
            for ref in md.get("ownerReferences") or ():
                self._queue.put_nowait(("owner", ref.get("uid", "")))
            if event.namespace:
                self._queue.put_nowait(("namespace", event.namespace))
            return
        self._index(event.key, event.obj)
        finalizers = md.get("finalizers") or ()
        if md.get("deletionTimestamp") and (
            FOREGROUND_FINALIZER in finalizers or ORPHAN_FINALIZER in finalizers
        ):
            self._queue.put_nowait(("owner", md["uid"]))
        if event.type == ADDED and md.get("ownerReferences"):
            self._queue.put_nowait(("dependent", md["uid"]))
        if event.key == ("", "namespaces") and md.get("deletionTimestamp"):
            self._queue.put_nowait(("namespace", md["name"]))

    # --- processing --------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            kind, ident = await self._queue.get()
            try:
                if kind == "owner":
                    self._process_owner(ident)
                elif kind == "dependent":
                    self._process_dependent(ident)
                else:
                    self._process_namespace(ident)
            except ApiError as err:  # raced with a client; the next event retries
                log.debug("garbage collection of %s %s: %s", kind, ident, err)
            except Exception:
                log.exception("garbage collection of %s %s failed", kind, ident)

    def _get(self, uid: str) -> tuple[ResourceInfo, Obj] | None:
        ref = self._by_uid.get(uid)
        if ref is None:
            return None
        key, namespace, name = ref
        info = self._info_for(key)
        obj = self._store.get(key, namespace, name)
        if info is None or obj is None or obj["metadata"].get("uid") != uid:
            return None
        return info, obj

    def _process_owner(self, uid: str) -> None:
        owner = self._get(uid)
        finalizers = (owner[1]["metadata"].get("finalizers") or ()) if owner else ()
        orphaning = owner is not None and ORPHAN_FINALIZER in finalizers
        for dep_uid in sorted(self._dependents.get(uid, set())):
            dep = self._get(dep_uid)
            if dep is None:
                continue
            if orphaning:
                self._drop_refs(dep, {uid})
            elif owner is None or owner[1]["metadata"].get("deletionTimestamp"):
                self._process_dependent(dep_uid)
        if owner is None:
            return
        info, obj = owner
        remaining = [d for d in self._dependents.get(uid, set()) if self._get(d) is not None]
        if orphaning and not remaining:
            self._remove_finalizer(info, obj, ORPHAN_FINALIZER)
        elif FOREGROUND_FINALIZER in finalizers and not [
            d for d in remaining if self._blocks(d, uid)
        ]:
            self._remove_finalizer(info, obj, FOREGROUND_FINALIZER)

    def _blocks(self, dep_uid: str, owner_uid: str) -> bool:
        dep = self._get(dep_uid)
        if dep is None:
            return False
        return any(
            r.get("uid") == owner_uid and r.get("blockOwnerDeletion")
            for r in dep[1]["metadata"].get("ownerReferences") or ()
        )

    def _process_dependent(self, uid: str) -> None:
        dep = self._get(uid)
        if dep is None:
            return
        info, obj = dep
        refs = obj["metadata"].get("ownerReferences") or []
        solid, dangling, deleting = set(), set(), set()
        for ref in refs:
            owner = self._get(ref.get("uid", ""))
            if owner is None:
                dangling.add(ref.get("uid", ""))
            elif owner[1]["metadata"].get("deletionTimestamp") and (
                FOREGROUND_FINALIZER in (owner[1]["metadata"].get("finalizers") or ())
            ):
                deleting.add(ref.get("uid", ""))
            elif owner[1]["metadata"].get("deletionTimestamp") and (
                ORPHAN_FINALIZER in (owner[1]["metadata"].get("finalizers") or ())
            ):
                solid.add(ref.get("uid", ""))
            else:
                solid.add(ref.get("uid", ""))
        if solid:
            if dangling:
                self._drop_refs(dep, dangling)
            return
        if obj["metadata"].get("deletionTimestamp"):
            return
        policy = "Foreground" if deleting else "Background"
        md = obj["metadata"]
        self._lifecycle.delete(
            info,
            md.get("namespace", ""),
            md["name"],
            DeleteOptions(propagation=policy, uid=md["uid"]),
        )

    def _drop_refs(self, dep: tuple[ResourceInfo, Obj], uids: set[str]) -> None:
        info, current = dep
        new = clone(current)
        refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") not in uids]
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self._lifecycle.replace_stored(info, current, new)

    def _remove_finalizer(self, info: ResourceInfo, current: Obj, finalizer: str) -> None:
        new = clone(current)
        new["metadata"]["finalizers"] = [
            f for f in new["metadata"].get("finalizers") or [] if f != finalizer
        ]
        self._lifecycle.replace_stored(info, current, new)

    def _process_namespace(self, name: str) -> None:
        ns = self._store.get(("", "namespaces"), "", name)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        remaining = 0
        for key in self._store.resource_keys():
            info = self._info_for(key)
            if info is None or not info.namespaced:
                continue
            for obj in self._store.list(key, name):
                remaining += 1
                if not obj["metadata"].get("deletionTimestamp"):
                    self._lifecycle.delete(
                        info, name, obj["metadata"]["name"], DeleteOptions(propagation="Background")
                    )
        if remaining == 0 and not ns["metadata"].get("finalizers"):
            self._store.delete(("", "namespaces"), "", name)
