"""A kubelet's list+watch of its pods as an asyncio task instead of a thread.

`runtime.informer.Informer` lists and watches in a thread of its own (the `kubernetes`
client is synchronous). That is one thread per simulated node for its kubelet alone,
each taking the GIL for every event it decodes: at hundreds of nodes in one process the
threads cost more than the work. `PodInformer` keeps the same cache, waiters and change
callbacks (it is an `Informer`, loop side unchanged) but lists and watches with aiohttp
on the event loop: list, then watch from the list's resourceVersion with bookmarks,
resume a watch that timed out from the last version seen, re-list on 410 Gone or an
error after a jittered back-off, as the thread does. Objects are the API's JSON as sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes import client

from runtime.informer import WATCH_TIMEOUT_S, Informer

log = logging.getLogger(__name__)

Obj = dict[str, Any]
LIST_TIMEOUT = 30.0
READ_BUFFER = 2**22  # one watch event is one line; a pod with big annotations fits


class _GoneError(Exception):
    """410: the version to resume from was compacted away; list again."""


class _FailedError(Exception):
    """Any other non-200 answer to a list or a watch."""


# What makes a list or watch start over (after a back-off) rather than end the task.
_RETRIED = (aiohttp.ClientError, TimeoutError, ValueError, OSError, _FailedError)


class PodInformer(Informer):
    """The pods of `GET {path}?fieldSelector=...` (e.g. spec.nodeName=N), cached on the
    loop by a task; `api` gives the server, CA and credentials."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        api: client.ApiClient,
        key: Callable[[Obj], str],
        name: str,
        field_selector: str,
        on_change: Callable[[Obj], None] | None = None,
        path: str = "/api/v1/pods",
    ) -> None:
        super().__init__(loop, _unused, key, name, on_change=on_change)
        config = api.configuration
        self._url = str(config.host).rstrip("/") + path
        self._selector = field_selector
        self._headers = {"Accept": "application/json"}
        auth = (config.api_key or {}).get("authorization")
        if auth:
            self._headers["Authorization"] = str(auth)
        self._ca = config.ssl_ca_cert
        self._cert = (config.cert_file, config.key_file) if config.cert_file else None
        self._jitter = random.Random()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = self._loop.create_task(self._serve(), name=f"informer-{self.name}")

    def stop(self) -> None:
        super().stop()
        if self._task is not None:
            self._task.cancel()

    async def wait_stopped(self) -> None:
        """Until its task ended (its connection closed)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self._url.startswith("https"):
            return False
        context = ssl.create_default_context(cafile=self._ca)
        if self._cert is not None:
            context.load_cert_chain(*self._cert)
        return context

    async def _serve(self) -> None:
        connector = aiohttp.TCPConnector(ssl=self._ssl(), limit=2)
        async with aiohttp.ClientSession(
            connector=connector, headers=self._headers, read_bufsize=READ_BUFFER
        ) as session:
            delay = 0.2
            rv: str | None = None
            while not self.stopped:
                try:
                    if rv is None:
                        rv = await self._list(session)
                    started = time.monotonic()
                    rv = await self._watch(session, rv)
                    if time.monotonic() - started < 1.0:  # ended at once: not a hot loop
                        await asyncio.sleep(delay * self._jitter.uniform(0.5, 1.5))
                        delay = min(delay * 2, 10.0)
                    else:
                        delay = 0.2
                except _GoneError:
                    rv = None
                except _RETRIED as err:
                    rv = None
                    log.warning("%s watch failed (%s); re-listing", self.name, err)
                    await asyncio.sleep(delay * self._jitter.uniform(0.5, 1.5))
                    delay = min(delay * 2, 10.0)

    async def _list(self, session: aiohttp.ClientSession) -> str:
        timeout = aiohttp.ClientTimeout(total=LIST_TIMEOUT)
        params = {"fieldSelector": self._selector}
        async with session.get(self._url, params=params, timeout=timeout) as answer:
            if answer.status == 410:
                raise _GoneError()
            if answer.status != 200:
                raise _FailedError(f"list: {answer.status} {answer.reason}")
            listing = await answer.json()
        self._replace(list(listing.get("items") or []))
        return str(listing["metadata"]["resourceVersion"])

    async def _watch(self, session: aiohttp.ClientSession, rv: str) -> str:
        """Watch from `rv` until the server ends it; the version to resume from."""
        seconds = int(WATCH_TIMEOUT_S * self._jitter.uniform(1.0, 2.0))
        params = {
            "fieldSelector": self._selector, "watch": "1", "resourceVersion": rv,
            "timeoutSeconds": str(seconds), "allowWatchBookmarks": "true",
        }  # fmt: skip
        timeout = aiohttp.ClientTimeout(total=seconds + 30, sock_read=seconds + 30)
        async with session.get(self._url, params=params, timeout=timeout) as answer:
            if answer.status == 410:
                raise _GoneError()
            if answer.status != 200:
                raise _FailedError(f"watch: {answer.status} {answer.reason}")
            async for line in answer.content:
                if self.stopped:
                    break
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _GoneError()
                    raise _FailedError(f"watch: {obj.get('message') or obj}")
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(kind, obj)
        return rv


def _unused(**_: Any) -> Any:
    raise AssertionError("PodInformer lists with aiohttp, never through the client")
