"""A keyed asyncio work queue with client-go workqueue semantics and jittered backoff.

Why not a plain `asyncio.Queue`: reconcilers need three guarantees it lacks. A burst of events
for one object must collapse into one run (dedup); one key must never be reconciled by two
workers at once (an event during a run marks the key dirty and it runs once more afterwards);
and a failing key must retry with growing delays rather than spin. Keys are plain strings
(e.g. `namespace/name` or a UID) so the handler always re-reads current state.

Differences from client-go's default controller queue, which the reference controller uses
(https://github.com/kubernetes/client-go/blob/master/util/workqueue/default_rate_limiters.go),
on purpose:
- Several workers (default 4) instead of one; the per-key exclusion keeps that safe.
- Backoff starts at 0.1 s and caps at 30 s (client-go: 5 ms to 1000 s), with jitter so keys
  that failed together (an API outage) do not retry in lockstep.
- A plain `add()` of a key that waits for a backoff retry supersedes that retry: the fresh run
  happens now and, if it fails, schedules the next retry itself. client-go would run it twice.
- There is no global token bucket; the backoff alone bounds retry traffic.

All methods must be called from the event loop the queue runs on.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from runtime.logsetup import vlog

log = logging.getLogger(__name__)

Handler = Callable[[str], Awaitable[None]]
ResultHook = Callable[[str, float, BaseException | None], None]
RetryHook = Callable[[str, int, float], None]

# Jitter factor range: mean 1, and since 2 * 2/3 == 4/3 the delays of consecutive failures of
# one key never decrease, whatever the draws.
JITTER_LOW = 2 / 3
JITTER_HIGH = 4 / 3
# 2.0 ** 1024 overflows a float; far past any sane cap anyway.
_MAX_EXPONENT = 64


def backoff_delay(failures: int, base: float, cap: float, jitter: float) -> float:
    """Delay before retry number `failures` (1-based): base * 2**(failures-1) * jitter, capped."""
    exponent = min(max(failures - 1, 0), _MAX_EXPONENT)
    return min(cap, base * (2.0**exponent) * jitter)


@dataclass
class _Delayed:
    when: float
    timer: asyncio.TimerHandle
    retry: bool  # scheduled by a handler failure (superseded by a plain add)


class KeyedQueue:
    """Deduplicating, per-key-exclusive work queue processed by `workers` asyncio tasks.

    `on_result(key, seconds, error)` runs after every handler call (error is None on success),
    for reconcile counters and latency histograms; `on_retry(key, failures, delay)` runs when a
    failed key is scheduled for retry. Hook exceptions are logged and ignored.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        workers: int = 4,
        base_delay: float = 0.1,
        max_delay: float = 30.0,
        rng: random.Random | None = None,
        on_result: ResultHook | None = None,
        on_retry: RetryHook | None = None,
        name: str = "workqueue",
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("need 0 < base_delay <= max_delay")
        self._handler = handler
        self._workers = workers
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._rng = rng or random.Random()
        self._on_result = on_result
        self._on_retry = on_retry
        self._name = name

        # Invariant: a key in _ready is also in _dirty and not in _processing.
        self._ready: asyncio.Queue[str] = asyncio.Queue()
        self._dirty: set[str] = set()  # wanted a run: queued, or waiting for its run to end
        self._processing: set[str] = set()
        self._delayed: dict[str, _Delayed] = {}
        self._failures: dict[str, int] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False

    # --- producers ------------------------------------------------------------------

    def add(self, key: str) -> None:
        """Queue `key` to run as soon as a worker is free (no-op if it is already queued)."""
        if self._stopped:
            return
        pending = self._delayed.get(key)
        if pending is not None and pending.retry:
            pending.timer.cancel()
            del self._delayed[key]
        self._enqueue(key)

    def add_after(self, key: str, delay: float) -> None:
        """Queue `key` after `delay` seconds; of several pending delays the earliest wins."""
        self._schedule(key, delay, retry=False)

    def forget(self, key: str) -> None:
        """Drop `key`'s failure count and pending retry (e.g. its object was deleted)."""
        self._failures.pop(key, None)
        pending = self._delayed.get(key)
        if pending is not None and pending.retry:
            pending.timer.cancel()
            del self._delayed[key]
            self._update_idle()

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker tasks on the running loop."""
        if self._tasks:
            raise RuntimeError("queue already started")
        if self._stopped:
            raise RuntimeError("queue was stopped")
        self._tasks = [
            asyncio.create_task(self._worker(), name=f"{self._name}-worker-{i}")
            for i in range(self._workers)
        ]

    async def stop(self) -> None:
        """Cancel the workers (and any running handler) and drop everything pending."""
        self._stopped = True
        for pending in self._delayed.values():
            pending.timer.cancel()
        self._delayed.clear()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._ready = asyncio.Queue()
        self._dirty.clear()
        self._processing.clear()
        self._update_idle()

    async def idle(self) -> None:
        """Wait until nothing is queued, delayed or running (for tests and graceful drains)."""
        while True:
            await self._idle.wait()
            # Re-check: an add may have raced with the wakeup.
            if self._is_idle():
                return

    # --- introspection ----------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Keys waiting to run: queued now (including re-runs owed after a run) plus delayed."""
        return len(self._dirty) + len(self._delayed)

    @property
    def running(self) -> int:
        """Keys whose handler is running now."""
        return len(self._processing)

    def failures(self, key: str) -> int:
        """Consecutive failures of `key` since its last success."""
        return self._failures.get(key, 0)

    # --- internals --------------------------------------------------------------------

    def _enqueue(self, key: str) -> None:
        if self._stopped or key in self._dirty:
            return
        self._dirty.add(key)
        self._idle.clear()
        if key in self._processing:
            return  # requeued by _finish, so the key never runs twice at once
        self._ready.put_nowait(key)

    def _schedule(self, key: str, delay: float, *, retry: bool) -> None:
        if self._stopped:
            return
        if delay <= 0:
            self._enqueue(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        pending = self._delayed.get(key)
        if pending is not None:
            if pending.when <= when:
                return
            pending.timer.cancel()
        timer = loop.call_at(when, self._fire, key)
        self._delayed[key] = _Delayed(when, timer, retry)
        self._idle.clear()

    def _fire(self, key: str) -> None:
        self._delayed.pop(key, None)
        self._enqueue(key)
        self._update_idle()

    async def _worker(self) -> None:
        while True:
            key = await self._ready.get()
            self._dirty.discard(key)
            self._processing.add(key)
            start = time.perf_counter()
            error: BaseException | None = None
            try:
                await self._handler(key)
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if self._stopped or (task is not None and task.cancelling()):
                    self._processing.discard(key)
                    raise
                error = exc  # the handler's own stray cancel: a failure, not our shutdown
            except Exception as exc:
                error = exc
            self._finish(key, time.perf_counter() - start, error)

    def _finish(self, key: str, seconds: float, error: BaseException | None) -> None:
        self._processing.discard(key)
        if error is None:
            self._failures.pop(key, None)
        else:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            vlog(log, 1, "%s: %s: %s (attempt %d)", self._name, key, error, failures)
            if key not in self._dirty:
                # A re-add during the run already owes an immediate run; that run supersedes
                # the retry and, if it fails too, backs off further (the count is kept).
                delay = backoff_delay(
                    failures,
                    self._base_delay,
                    self._max_delay,
                    self._rng.uniform(JITTER_LOW, JITTER_HIGH),
                )
                self._schedule(key, delay, retry=True)
                self._hook(self._on_retry, key, failures, delay)
        self._hook(self._on_result, key, seconds, error)
        if key in self._dirty:  # re-added while running: run once more, now
            self._ready.put_nowait(key)
        self._update_idle()

    def _hook(self, hook: Callable[..., None] | None, *args: object) -> None:
        if hook is None:
            return
        try:
            hook(*args)
        except Exception:
            log.exception("%s: hook %r failed", self._name, hook)

    def _is_idle(self) -> bool:
        return not (self._dirty or self._processing or self._delayed)

    def _update_idle(self) -> None:
        if self._is_idle():
            self._idle.set()
