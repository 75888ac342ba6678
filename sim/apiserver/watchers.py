"""The open watches of the store, indexed so that an event reaches only the watches that
may select it.

Every node's agent watches its own Node (`fieldSelector=metadata.name=<node>`) and every
kubelet its own pods (`spec.nodeName=<node>`): handing each event to every watch of its
resource, to be dropped by all but one selector, made a write cost O(nodes) and bring-up
O(nodes²). A watch whose field selector holds an equality (`path=value`) is filed under it;
an event goes to the watches filed under the value its object has (or had: a watch sees the
object that leaves its selection), and to the resource's unfiled watches. The watch stream
still applies its whole selector (sim/apiserver/listwatch.py `filter_event`); the index only
skips watches that cannot match.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver.field_selectors import field_value

Key = tuple[str, str]  # (group, plural)
Obj = dict[str, Any]


@dataclass(frozen=True)
class Event:
    type: str
    rv: int
    key: Key
    namespace: str
    obj: Obj
    old: Obj | None = None


@dataclass(eq=False)
class Watcher:
    key: Key
    namespace: str | None
    # (field path, value) of an equality term of the watch's field selector, if it has one.
    index: tuple[str, str] | None = None
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)

    def wants(self, event: Event) -> bool:
        return event.key == self.key and self.namespace in (None, event.namespace)

    def close(self) -> None:
        self.queue.put_nowait(None)


class Watchers:
    """The open watches, by resource and by the field equality each is filed under."""

    def __init__(self) -> None:
        self._unfiled: dict[Key, set[Watcher]] = {}
        self._filed: dict[Key, dict[str, dict[str, set[Watcher]]]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Watcher]:
        for group in self._unfiled.values():
            yield from group
        for paths in self._filed.values():
            for values in paths.values():
                for group in values.values():
                    yield from group

    def add(self, watcher: Watcher) -> None:
        self._bucket(watcher, create=True).add(watcher)
        self._count += 1

    def discard(self, watcher: Watcher) -> None:
        bucket = self._bucket(watcher, create=False)
        if watcher in bucket:
            bucket.discard(watcher)
            self._count -= 1
            if not bucket and watcher.index is not None:  # no empty buckets left to scan
                path, value = watcher.index
                paths = self._filed[watcher.key]
                del paths[path][value]
                if not paths[path]:
                    del paths[path]

    def clear(self) -> None:
        self._unfiled.clear()
        self._filed.clear()
        self._count = 0

    def deliver(self, event: Event) -> None:
        """Queue `event` on every watch that may select it."""
        for watcher in list(self._unfiled.get(event.key, ())):
            if watcher.namespace in (None, event.namespace):
                watcher.queue.put_nowait(event)
        for path, values in list(self._filed.get(event.key, {}).items()):
            now = field_value(event.obj, path)
            was = field_value(event.old, path) if event.old is not None else now
            for value in {now, was}:
                for watcher in list(values.get(value, ())):
                    if watcher.namespace in (None, event.namespace):
                        watcher.queue.put_nowait(event)

    def _bucket(self, watcher: Watcher, *, create: bool) -> set[Watcher]:
        if watcher.index is None:
            if create:
                return self._unfiled.setdefault(watcher.key, set())
            return self._unfiled.get(watcher.key, set())
        path, value = watcher.index
        if create:
            return self._filed.setdefault(watcher.key, {}).setdefault(path, {}).setdefault(
                value, set())
        return self._filed.get(watcher.key, {}).get(path, {}).get(value, set())
