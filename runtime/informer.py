"""List+watch caches (informers) of the agent and the controller, kept on the event loop.

The `kubernetes` client is synchronous: each informer lists and watches in its own thread
and hands events to the loop, so a slow watch never blocks RPCs or reconciles.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from runtime.logsetup import vlog

log = logging.getLogger(__name__)

# A watch lasts this long times a random factor in [1, 2) before the server ends it (and
# it resumes from the last resourceVersion).
WATCH_TIMEOUT_S = 30

class Informer:
    """A list+watch cache of one custom resource, kept on the event loop.

    A worker thread lists, then watches from the list's resourceVersion, resumes from the
    last seen resourceVersion when a watch times out, and re-lists only on 410 Gone or an
    error (with jittered backoff). Waiters block on `wait_for(predicate)`,
    which wakes on every change: readiness is event-driven, not polled.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, list_fn: Callable[..., Any],
                 key: Callable[[dict[str, Any]], str], name: str,
                 list_kwargs: dict[str, Any] | None = None,
                 to_dict: Callable[[Any], dict[str, Any]] | None = None,
                 on_change: Callable[[dict[str, Any]], None] | None = None,
                 convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self._loop = loop
        # Called on the loop for every object added, changed or deleted (and for every
        # object of a re-list, which is how a controller resyncs after 410 or reconnect).
        self._on_change = on_change
        # Built-in kinds come back as client models; custom objects already are dicts.
        self._to_dict = to_dict or (lambda obj: obj)
        # Applied to each object (not the listing): e.g. a served resource.k8s.io beta
        # version to v1 shape (api/draclient.py DraApi.to_v1).
        self._convert = convert or (lambda obj: obj)
        self._list_fn = list_fn
        self._kwargs = list_kwargs or {}
        self._key = key
        self.name = name
        self.items: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._changed = asyncio.Event()
        self.version = 0  # bumped on every change, so a waiter can tell it missed none
        self._stop = threading.Event()
        self._rng = random.Random()  # this thread's own: never the shared global generator
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """Asked to stop: its thread ends at the watch's next event, delivering nothing."""
        return self._stop.is_set()

    # --- loop side ---------------------------------------------------------------------

    def _replace(self, items: list[dict[str, Any]]) -> None:
        old = self.items
        self.items = {self._key(o): o for o in items}
        self.synced.set()
        self._notify()
        if self._on_change is not None:
            for obj in [*items, *(o for k, o in old.items() if k not in self.items)]:
                self._on_change(obj)

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        key = self._key(obj)
        if kind == "DELETED":
            self.items.pop(key, None)
        else:
            self.items[key] = obj
        self._notify()
        if self._on_change is not None:
            self._on_change(obj)

    def _notify(self) -> None:
        self.version += 1
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def changed(self, since: int) -> None:
        """Wait until the cache changed after version `since` (at once if it already did)."""
        while self.version == since:
            await self._changed.wait()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """True as soon as `predicate()` holds after any change; False at the deadline."""
        deadline = self._loop.time() + timeout
        while True:
            if predicate():
                return True
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return False
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that races
                # the event being set, and this loop would never stop.
                async with asyncio.timeout(remaining):
                    await changed.wait()

    # --- thread side -------------------------------------------------------------------

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # loop closed during shutdown
            self._loop.call_soon_threadsafe(fn, *args)

    def _done(self) -> bool:
        """Stopped, or its loop is gone: nobody is left to deliver to (e.g. a process
        shutting down whose owner never called stop); the thread ends instead of retrying
        into interpreter shutdown."""
        return self._stop.is_set() or self._loop.is_closed()

    def _run(self) -> None:
        delay = 0.2
        rv: str | None = None  # where the next watch resumes; None: list first
        while not self._done():
            try:
                if rv is None:
                    # client-go's reflector says these (V3, then V2): admins of the
                    # reference read them to see a cache fill.
                    vlog(log, 3, '"Listing and watching" type="%s" reflector="%s"',
                         self.name, __name__)
                    listing = self._to_dict(self._list_fn(**self._kwargs, _request_timeout=30))
                    self._post(self._replace, [self._convert(self._to_dict(o))
                                               for o in listing.get("items") or []])
                    rv = str(listing["metadata"]["resourceVersion"])
                    vlog(log, 2, '"Caches populated" type="%s" reflector="%s"', self.name,
                         __name__)
                started = time.monotonic()
                rv = self._watch_from(rv)
                if time.monotonic() - started < 1.0:
                    # Ended at once (a server closing watches, a proxy): not a hot loop.
                    self._stop.wait(delay * self._rng.uniform(0.5, 1.5))
                    delay = min(delay * 2, 10.0)
                else:
                    delay = 0.2
            except ApiException as err:
                rv = None
                if self._done():
                    return
                if err.status != 410:
                    log.warning("%s watch failed (%s %s); re-listing", self.name, err.status,
                                err.reason)
                    self._stop.wait(delay * self._rng.uniform(0.5, 1.5))
                    delay = min(delay * 2, 10.0)
            except Exception as err:
                rv = None
                if self._done():
                    return
                log.warning("%s watch failed (%s); re-listing", self.name, err)
                self._stop.wait(delay * self._rng.uniform(0.5, 1.5))
                delay = min(delay * 2, 10.0)

    def _watch_from(self, rv: str) -> str:
        """Watch from `rv` until the server ends the watch; the resourceVersion to resume
        from (the last event's or bookmark's). A watch that timed out resumes there
        instead of listing again, as client-go's reflector does: a re-list costs the
        whole collection, a resumed watch nothing. The timeout is jittered so that
        components started together do not come back in step. 410 Gone (the version was
        compacted away) raises, and the caller lists again."""
        timeout = int(WATCH_TIMEOUT_S * self._rng.uniform(1.0, 2.0))
        # Raw JSON events: the client's model lookup by docstring fails for some
        # kinds (ResourceClaim is `ResourceV1ResourceClaim`), and we want dicts anyway.
        stream = watch.Watch(return_type="object")
        for event in stream.stream(self._list_fn, **self._kwargs, resource_version=rv,
                                   timeout_seconds=timeout, allow_watch_bookmarks=True,
                                   _request_timeout=timeout + 30):
            if self._done():
                stream.stop()
                break
            obj = event["object"]
            if isinstance(obj, dict):
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self._post(self._apply, event["type"], self._convert(self._to_dict(obj)))
        return rv
