"""Warning Events on the daemon's own pod, so `kubectl describe pod` of the daemon pod says
why this node's IMEX daemon is not Ready (a crash loop, a start that never finishes).

A thin layer over `runtime.events.EventRecorder` (best effort, never blocking, bounded in
flight, an API error only logged): the involvedObject is this daemon's pod (or, when the
node agent supervises IMEX itself, its Node: `kubectl describe node`), and each
reason is written at most once per `interval` (default a minute), so a crash-looping IMEX
yields one Event per minute, not one per crash, the skipped repeats counted in the next one.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Callable
from typing import Any, Final

from kubernetes import client

from agent.daemon.identity import DaemonIdentity
from runtime.corev1 import CoreV1
from runtime.events import DEFAULT_INTERVAL, EventRecorder, pod_ref

log = logging.getLogger(__name__)

COMPONENT: Final = "compute-domain-daemon"
REASON_EXITED: Final = "IMEXDaemonExited"
REASON_NOT_READY: Final = "IMEXDaemonNotReady"


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
        involved: dict[str, str] | None = None,
    ) -> None:
        """`involved`: the object the Events are about (None: the daemon's pod; the node
        agent, which has no daemon pod, records them on its Node)."""
        self._recorder = EventRecorder(api, COMPONENT, identity.node_name, interval=interval,
                                       clock=clock, logger=log)
        self._pod = involved or pod_ref(identity.pod_name, identity.pod_namespace,
                                        identity.pod_uid)

    @property
    def _core(self) -> CoreV1:
        return self._recorder._core

    @_core.setter
    def _core(self, core: CoreV1) -> None:  # tests put a fake API here
        self._recorder._core = core

    def warning(self, reason: str, message: str) -> bool:
        """Schedule a Warning Event unless `reason` had one within `interval`; never raises.
        True if one was scheduled."""
        return self._recorder.warning(self._pod, reason, message)

    def body(self, reason: str, message: str) -> dict[str, Any]:
        return self._recorder.body(self._pod, reason, message)

    async def close(self, timeout: float = 2.0) -> None:
        """Give writes in flight a moment to finish, then cancel the rest."""
        await self._recorder.close(timeout)
