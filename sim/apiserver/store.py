"""Objects, resourceVersions and the event history that watches replay.

One global resourceVersion counter, as etcd's revision: every write gets the next one,
lists report the current one, and a watch can resume from any version still inside the
history window. Older versions answer 410 Gone, which is what makes clients re-list; the
window is small on purpose in tests that exercise that path.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from sim.apiserver.watchers import Event, Key, Obj, Watcher, Watchers

__all__ = ["ADDED", "DELETED", "MODIFIED", "Event", "ExpiredError", "Key", "Obj", "Store",
           "Watcher", "list_order"]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def clone(obj: Any) -> Any:
    """A deep copy of JSON data (several times faster than copy.deepcopy)."""
    return orjson.loads(orjson.dumps(obj))


def meta(obj: Obj) -> dict[str, Any]:
    return obj.setdefault("metadata", {})


class ExpiredError(Exception):
    """The requested resourceVersion is older than the retained history."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


def list_order(namespace: str, name: str) -> str:
    """The position of an object in a list: its etcd key below the resource's prefix."""
    return f"{namespace}/{name}" if namespace else name


class Store:
    """All objects of all resources, plus the bounded event history.

    Lives on the server's event loop and is never touched from another thread, so it needs
    no locks; every method is synchronous and atomic with respect to the loop.
    """

    def __init__(self, history_window: int = 10_000) -> None:
        self._objects: dict[Key, dict[tuple[str, str], Obj]] = {}
        self._history: deque[Event] = deque()
        self._history_of: dict[Key, deque[Event]] = {}  # the same events, by resource
        self._window = history_window
        self._compacted = 0  # every version <= this is gone from history
        self._rv = 0
        self._watchers = Watchers()
        self._listeners: list[Callable[[Event], None]] = []

    # --- reads -----------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def oldest_watchable(self) -> int:
        return self._compacted

    def get(self, key: Key, namespace: str, name: str) -> Obj | None:
        """The stored object (shared: callers must `clone` before changing it)."""
        return self._objects.get(key, {}).get((namespace, name))

    def list(self, key: Key, namespace: str | None = None) -> list[Obj]:
        """Objects in etcd's key order (`<namespace>/<name>` as one string, so that
        `team-a-x/` sorts before `team-a/`), as kube-apiserver lists them."""
        bucket = self._objects.get(key, {})
        items = sorted(bucket.items(), key=lambda item: list_order(*item[0]))
        return [obj for (ns, _), obj in items if namespace is None or ns == namespace]

    def count(self, key: Key) -> int:
        return len(self._objects.get(key, {}))

    def resource_keys(self) -> list[Key]:
        return list(self._objects)

    def all_objects(self) -> Iterable[tuple[Key, Obj]]:
        for key, bucket in list(self._objects.items()):
            for obj in list(bucket.values()):
                yield key, obj

    # --- writes ----------------------------------------------------------------------

    def put(self, key: Key, obj: Obj) -> Obj:
        """Create or replace; assigns the next resourceVersion and records the event."""
        md = meta(obj)
        ident = (md.get("namespace", ""), md["name"])
        bucket = self._objects.setdefault(key, {})
        old = bucket.get(ident)
        self._rv += 1
        md["resourceVersion"] = str(self._rv)
        bucket[ident] = obj
        self._record(
            Event(MODIFIED if old is not None else ADDED, self._rv, key, ident[0], obj, old)
        )
        return obj

    def delete(self, key: Key, namespace: str, name: str) -> Obj | None:
        bucket = self._objects.get(key, {})
        old = bucket.pop((namespace, name), None)
        if old is None:
            return None
        self._rv += 1
        final = clone(old)
        meta(final)["resourceVersion"] = str(self._rv)
        self._record(Event(DELETED, self._rv, key, namespace, final, old))
        return final

    def drop_resource(self, key: Key) -> list[Obj]:
        """Delete every object of a resource (its CRD is gone), with events."""
        gone = []
        for obj in self.list(key):
            md = obj["metadata"]
            deleted = self.delete(key, md.get("namespace", ""), md["name"])
            if deleted is not None:
                gone.append(deleted)
        self._objects.pop(key, None)
        return gone

    def _record(self, event: Event) -> None:
        self._history.append(event)
        self._history_of.setdefault(event.key, deque()).append(event)
        while len(self._history) > self._window:
            gone = self._history.popleft()
            self._history_of[gone.key].popleft()  # the oldest of its resource's too
            self._compacted = gone.rv
        self._watchers.deliver(event)
        for listener in list(self._listeners):
            listener(event)

    # --- watches ---------------------------------------------------------------------

    def events_since(self, key: Key, namespace: str | None, rv: int) -> list[Event]:
        """History after `rv` for one resource; raises ExpiredError if `rv` was compacted away."""
        if rv < self._compacted:
            raise ExpiredError(rv, self._compacted)
        out: list[Event] = []
        for e in reversed(self._history_of.get(key, ())):  # newest first: stop at `rv`
            if e.rv <= rv:
                break
            if namespace in (None, e.namespace):
                out.append(e)
        out.reverse()
        return out

    def watch(self, key: Key, namespace: str | None,
              index: tuple[str, str] | None = None) -> Watcher:
        """A watch of `key` (in `namespace`); `index`: an equality (field path, value) its
        field selector holds, so that only events of objects with (or that had) that value
        reach it (sim/apiserver/watchers.py)."""
        watcher = Watcher(key, namespace, index)
        self._watchers.add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    @property
    def watcher_count(self) -> int:
        return len(self._watchers)

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Synchronous in-process observers (garbage collector, CRD registration)."""
        self._listeners.append(listener)

    # --- faults ------------------------------------------------------------------------

    def close_watches(self) -> int:
        """End every open watch stream, as an API server restart or a proxy timeout does."""
        watchers = list(self._watchers)
        self._watchers.clear()
        for watcher in watchers:
            watcher.close()
        return len(watchers)

    def compact(self) -> None:
        """Forget all history: a watch from any earlier version now gets 410 Gone."""
        self._history.clear()
        self._history_of.clear()
        self._compacted = self._rv

    # --- persistence -------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "resourceVersion": self._rv,
            "objects": [
                {"group": k[0], "resource": k[1], "object": o} for k, o in self.all_objects()
            ],
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Load a snapshot; history starts empty, so old watches must re-list (410)."""
        self._objects.clear()
        self._history.clear()
        self._history_of.clear()
        for item in data.get("objects", []):
            obj = item["object"]
            md = obj["metadata"]
            self._objects.setdefault((item["group"], item["resource"]), {})[
                (md.get("namespace", ""), md["name"])
            ] = obj
        self._rv = int(data.get("resourceVersion", 0))
        self._compacted = self._rv
