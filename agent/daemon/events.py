"""Warning Events on the daemon's own pod, so `kubectl describe pod` of the daemon pod says
why this node's IMEX daemon is not Ready (a crash loop, a start that never finishes).

Events are best effort and must never hold up or stop the supervisor: `warning()` only
schedules the write and returns at once, a write is bounded by a request timeout, at most a
few are in flight (more are dropped with a log line), and an API error (including a 403 from
RBAC that lacks `events: create`) is logged and forgotten. Each reason is written at most
once per `interval` (default a minute): a crash-looping IMEX yields one Event per minute,
not one per crash; the skipped repeats are counted in the next Event's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from kubernetes import client

from agent.daemon.identity import DaemonIdentity
from api.kube import call, error_text

log = logging.getLogger(__name__)

COMPONENT: Final = "compute-domain-daemon"
REASON_EXITED: Final = "IMEXDaemonExited"
REASON_NOT_READY: Final = "IMEXDaemonNotReady"
DEFAULT_INTERVAL: Final = 60.0
_MAX_IN_FLIGHT: Final = 4
_REQUEST_TIMEOUT: Final = 10.0
_MESSAGE_LIMIT: Final = 1024  # the API rejects longer Event messages


def exited_message(code: int, ran: float, restart: int, delay: float) -> str:
    """`nvidia-imex exited with code 1 after 1.0s; restart #3 in 3.6s`."""
    how = f"code {code}"
    if code < 0:  # asyncio's returncode for a signal
        with contextlib.suppress(ValueError):
            how += f" (killed by {signal.Signals(-code).name})"
    return f"nvidia-imex exited with {how} after {ran:.1f}s; restart #{restart} in {delay:.1f}s"


def not_ready_message(state: str, after: float, *, was_ready: bool = False) -> str:
    """`nvidia-imex is INIT_GPU, not READY, 61s after it started`."""
    if was_ready:
        return f"nvidia-imex is {state}, not READY for {after:.0f}s (it was READY before)"
    return f"nvidia-imex is {state}, not READY, {after:.0f}s after it started"


class PodEvents:
    """Writes Warning Events with the daemon pod as involvedObject, rate-limited per reason."""

    def __init__(
        self,
        api: client.ApiClient,
        identity: DaemonIdentity,
        *,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._identity = identity
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}  # reason -> when its last Event was scheduled
        self._skipped: dict[str, int] = {}  # reason -> repeats suppressed since then
        self._tasks: set[asyncio.Task[None]] = set()

    def warning(self, reason: str, message: str) -> bool:
        """Schedule a Warning Event unless `reason` had one within `interval`; never raises.
        True if one was scheduled."""
        try:
            return self._schedule(reason, message)
        except Exception:  # a bug here must not take the supervisor down
            log.exception("could not schedule event %s", reason)
            return False

    def _schedule(self, reason: str, message: str) -> bool:
        now = self._clock()
        last = self._last.get(reason)
        if last is not None and now - last < self._interval:
            self._skipped[reason] = self._skipped.get(reason, 0) + 1
            log.debug("event %s rate-limited: %s", reason, message)
            return False
        if len(self._tasks) >= _MAX_IN_FLIGHT:
            log.warning("dropping event %s (%d writes still in flight): %s", reason,
                        len(self._tasks), message)
            return False
        skipped = self._skipped.pop(reason, 0)
        if skipped:
            message += f" ({skipped} more since the last such event)"
        self._last[reason] = now
        task = asyncio.get_running_loop().create_task(self._write(reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def body(self, reason: str, message: str) -> dict[str, Any]:
        ident = self._identity
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved = {"apiVersion": "v1", "kind": "Pod", "name": ident.pod_name,
                    "namespace": ident.pod_namespace}
        if ident.pod_uid:
            involved["uid"] = ident.pod_uid
        return {
            "metadata": {"generateName": f"{ident.pod_name}-", "namespace": ident.pod_namespace},
            "involvedObject": involved,
            "reason": reason, "message": message[:_MESSAGE_LIMIT], "type": "Warning",
            "count": 1, "firstTimestamp": stamp, "lastTimestamp": stamp,
            "source": {"component": COMPONENT, "host": ident.node_name},
            "reportingComponent": COMPONENT, "reportingInstance": ident.node_name,
        }

    async def _write(self, reason: str, message: str) -> None:
        ident = self._identity
        try:
            await call(self._core.create_namespaced_event, ident.pod_namespace,
                       self.body(reason, message), _request_timeout=_REQUEST_TIMEOUT)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # best effort: log and go on
            log.warning("could not record event %s on pod %s/%s: %s", reason,
                        ident.pod_namespace, ident.pod_name, error_text(err))
            return
        log.info("recorded event %s on pod %s/%s: %s", reason, ident.pod_namespace,
                 ident.pod_name, message)

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
