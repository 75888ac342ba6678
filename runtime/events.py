"""Best-effort Kubernetes Events (core/v1), so `kubectl describe` of the object they are about
says why something waits or failed, in words of the component that knows.

An Event must never hold up or stop its caller: `warning()` / `normal()` only schedule the
write on the running event loop and return at once, a write is bounded by a request
timeout, at most a few are in flight (more are dropped with a log line), and an API error
(including a 403 from RBAC that lacks `events: create`) is logged and forgotten. Each
(involved object, reason, key) is written at most once per `interval` (default a minute):
a retry loop yields one Event per minute, not one per retry; the skipped repeats are counted
in the next Event's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from kubernetes import client

from runtime.corev1 import CoreV1
from runtime.kubecall import call, error_text

TYPE_WARNING: Final = "Warning"
TYPE_NORMAL: Final = "Normal"
DEFAULT_INTERVAL: Final = 60.0
MAX_IN_FLIGHT: Final = 4
MESSAGE_LIMIT: Final = 1024  # the API rejects longer Event messages
_REQUEST_TIMEOUT: Final = 10.0
_PRUNE_ABOVE: Final = 1024  # rate-limit entries kept before old ones are swept

Key = tuple[str, str, str]


def pod_ref(name: str, namespace: str, uid: str = "") -> dict[str, str]:
    """An involvedObject for a Pod (uid left out when unknown)."""
    ref = {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace}
    if uid:
        ref["uid"] = uid
    return ref


def node_ref(name: str) -> dict[str, str]:
    """An involvedObject for a Node (`kubectl describe node` shows its Events, which live
    in the default namespace)."""
    return {"apiVersion": "v1", "kind": "Node", "name": name}


def _with_suffix(message: str, suffix: str) -> str:
    """`message` + `suffix` within MESSAGE_LIMIT, cutting the message, not the suffix."""
    room = MESSAGE_LIMIT - len(suffix)
    if len(message) > room:
        message = message[:max(room - 3, 0)] + "..."
    return (message + suffix)[:MESSAGE_LIMIT]


class EventRecorder:
    """Writes Events about any object, rate-limited per (object, reason, key)."""

    def __init__(
        self,
        api: client.ApiClient | None,
        component: str,
        host: str,
        *,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        max_in_flight: int = MAX_IN_FLIGHT,
        logger: logging.Logger | None = None,
    ) -> None:
        self._core = CoreV1(api)
        self.component = component
        self.host = host
        self.interval = interval
        self._clock = clock
        self._max_in_flight = max_in_flight
        self._log = logger or logging.getLogger(__name__)
        self._last: dict[Key, float] = {}  # when the key's last Event was scheduled
        self._skipped: dict[Key, int] = {}  # repeats suppressed since then
        self._tasks: set[asyncio.Task[None]] = set()

    def warning(self, involved: dict[str, str], reason: str, message: str, *,
                key: str = "") -> bool:
        """Schedule a Warning Event; never raises. True if one was scheduled."""
        return self.record(involved, reason, message, TYPE_WARNING, key=key)

    def normal(self, involved: dict[str, str], reason: str, message: str, *,
               key: str = "") -> bool:
        """Schedule a Normal Event; never raises. True if one was scheduled."""
        return self.record(involved, reason, message, TYPE_NORMAL, key=key)

    def record(self, involved: dict[str, str], reason: str, message: str, type_: str, *,
               key: str = "") -> bool:
        """Schedule an Event unless (involved, reason, key) had one within `interval`."""
        try:
            return self._schedule(involved, reason, message, type_, key)
        except Exception:  # a bug here must not take the caller down
            self._log.exception("could not schedule event %s", reason)
            return False

    def _schedule(self, involved: dict[str, str], reason: str, message: str, type_: str,
                  key: str) -> bool:
        now = self._clock()
        who = involved.get("uid") or f"{involved.get('namespace', '')}/{involved['name']}"
        rate_key = (who, reason, key)
        last = self._last.get(rate_key)
        if last is not None and now - last < self.interval:
            self._skipped[rate_key] = self._skipped.get(rate_key, 0) + 1
            self._log.debug("event %s rate-limited: %s", reason, message)
            return False
        if len(self._tasks) >= self._max_in_flight:
            self._log.warning("dropping event %s (%d writes still in flight): %s", reason,
                              len(self._tasks), message)
            return False
        skipped = self._skipped.pop(rate_key, 0)
        suffix = f" ({skipped} more since the last such event)" if skipped else ""
        self._last[rate_key] = now
        if len(self._last) > _PRUNE_ABOVE:
            self._prune(now)
        body = self.body(involved, reason, _with_suffix(message, suffix), type_)
        task = asyncio.get_running_loop().create_task(self._write(body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def _prune(self, now: float) -> None:
        """Forget keys that no longer limit anything (objects come and go); a suppressed
        count is kept for ten intervals, then dropped with its key."""
        for key, last in list(self._last.items()):
            age = now - last
            if age >= self.interval and (key not in self._skipped or age >= 10 * self.interval):
                del self._last[key]
                self._skipped.pop(key, None)

    def body(self, involved: dict[str, str], reason: str, message: str,
             type_: str = TYPE_WARNING) -> dict[str, Any]:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = involved.get("namespace") or "default"
        return {
            "metadata": {"generateName": f"{involved['name']}-", "namespace": namespace},
            "involvedObject": dict(involved),
            "reason": reason, "message": message[:MESSAGE_LIMIT], "type": type_,
            "count": 1, "firstTimestamp": stamp, "lastTimestamp": stamp,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component, "reportingInstance": self.host,
        }

    async def _write(self, body: dict[str, Any]) -> None:
        obj, reason = body["involvedObject"], body["reason"]
        where = f"{obj.get('kind', '').lower()} {body['metadata']['namespace']}/{obj['name']}"
        try:
            await call(self._core.create_namespaced_event, body["metadata"]["namespace"], body,
                       _request_timeout=_REQUEST_TIMEOUT)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # best effort: log and go on
            self._log.warning("could not record event %s on %s: %s", reason, where,
                              error_text(err))
            return
        self._log.info("recorded event %s on %s: %s", reason, where, body["message"])

    async def close(self, timeout: float = 2.0) -> None:
        """Give writes in flight a moment to finish (the last Event is often the useful
        one), then cancel the rest."""
        tasks = list(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
