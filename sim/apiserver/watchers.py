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
from collections import Counter
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

    def close(self) -> None:
        self.queue.put_nowait(None)


# A group of watches: the resource's unfiled ones (path and value None) or those filed
# under one (path, value).
_Group = tuple[Key, str | None, str | None]


class Watchers:
    """The open watches, grouped by resource and the field equality each is filed under."""

    def __init__(self) -> None:
        self._groups: dict[_Group, set[Watcher]] = {}
        self._paths: dict[Key, Counter[str]] = {}  # the paths filed under, with their watches

    def __len__(self) -> int:
        return sum(map(len, self._groups.values()))

    def __iter__(self) -> Iterator[Watcher]:
        for group in list(self._groups.values()):
            yield from group

    def add(self, watcher: Watcher) -> None:
        self._groups.setdefault(_group_of(watcher), set()).add(watcher)
        if watcher.index is not None:
            self._paths.setdefault(watcher.key, Counter())[watcher.index[0]] += 1

    def discard(self, watcher: Watcher) -> None:
        group = _group_of(watcher)
        watchers = self._groups.get(group, set())
        if watcher not in watchers:
            return
        watchers.discard(watcher)
        if not watchers:
            del self._groups[group]
        if watcher.index is not None:
            paths = self._paths[watcher.key]
            paths[watcher.index[0]] -= 1
            if not paths[watcher.index[0]]:  # no path left whose value each event computes
                del paths[watcher.index[0]]

    def clear(self) -> None:
        self._groups.clear()
        self._paths.clear()

    def deliver(self, event: Event) -> None:
        """Queue `event` on every watch that may select it."""
        groups: set[_Group] = {(event.key, None, None)}
        for path in self._paths.get(event.key, ()):
            groups.add((event.key, path, field_value(event.obj, path)))
            if event.old is not None:
                groups.add((event.key, path, field_value(event.old, path)))
        for group in groups:
            for watcher in list(self._groups.get(group, ())):
                if watcher.namespace in (None, event.namespace):
                    watcher.queue.put_nowait(event)


def _group_of(watcher: Watcher) -> _Group:
    path, value = watcher.index or (None, None)
    return watcher.key, path, value
