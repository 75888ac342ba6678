"""Kubernetes access shared by the agent and the controller: one client, blocking calls off
the event loop, and list+watch caches (informers) kept on the loop.

The `kubernetes` client is synchronous; each process has one event loop. Every call goes
through `call()` (a worker thread), and watches run in threads that hand events to the
loop, so nothing blocks RPCs or reconciles. (This lives in `api` because the agent and
the controller may not import each other.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)
T = TypeVar("T")


def api_client(kubeconfig: str) -> client.ApiClient:
    """From a kubeconfig file, or the in-cluster service account when empty."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    return client.ApiClient()


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.to_thread(fn, *args, **kwargs)


# A watch lasts this long times a random factor in [1, 2) before the server ends it (and
# it resumes from the last resourceVersion).
WATCH_TIMEOUT_S = 30

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


def is_transient(err: BaseException) -> bool:
    """A busy or flaky API server (429/5xx) or a connection that failed: worth retrying."""
    if isinstance(err, ApiException):
        return err.status in TRANSIENT_STATUSES
    return isinstance(err, (urllib3.exceptions.HTTPError, ConnectionError))


async def call_retrying(fn: Callable[..., T], *args: Any, within: float = 60.0,
                        **kwargs: Any) -> T:
    """`call`, retried with jittered exponential backoff while the error is transient, for
    up to `within` seconds. For requests whose repetition is harmless: reads, and writes
    that a retry turns into a clear answer (a PUT with a resourceVersion gets 409, a
    repeated create 409 AlreadyExists)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    delay = 0.1
    while True:
        try:
            return await call(fn, *args, **kwargs)
        except Exception as err:
            if not is_transient(err) or loop.time() + delay > end:
                raise
            log.info("%s: %s; retrying in %.1fs", getattr(fn, "__name__", "API call"),
                     error_text(err), delay)
        await asyncio.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, 5.0)


def status_of(err: Exception) -> int | None:
    return err.status if isinstance(err, ApiException) else None


def error_text(err: Exception) -> str:
    """One line for a log: `404 NotFound: <the server's message>` instead of the client's
    multi-line dump of headers and body."""
    if not isinstance(err, ApiException):
        return f"{type(err).__name__}: {err}"
    message = ""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        message = str(json.loads(err.body or "{}").get("message") or "")
    return f"{err.status} {err.reason}" + (f": {message}" if message else "")


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
                    listing = self._to_dict(self._list_fn(**self._kwargs, _request_timeout=30))
                    self._post(self._replace, [self._convert(self._to_dict(o))
                                               for o in listing.get("items") or []])
                    rv = str(listing["metadata"]["resourceVersion"])
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
