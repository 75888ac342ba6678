"""The driver's CPU-seconds and the sim's, told apart inside one in-process sim process.

In in-process mode (sim/cluster/inprocess.py) a process runs the sim's kubelets and fake
`nvidia-imex` beside the driver's node agents and IMEX daemon containers, all on one
event loop and one thread pool, so its CPU time alone cannot say which of the two costs
what. The meter attributes work to whoever it runs for, by a context
variable (`OWNER`) that the in-process host sets to `DRIVER` in the tasks that run driver
code (`as_driver`) and back to `SIM` in the fake IMEX's (`as_sim`); a context is copied
into every task, callback and `asyncio.to_thread` call made from there, so what the
driver code starts is the driver's too. Measured:

- the event loop's thread by sampling: each callback and task step (`asyncio.Handle._run`)
  marks whose it is while it runs (an attribute write), and a sampler thread adds the
  loop thread's CPU clock, every `SAMPLE_S`, to whoever is marked then (between callbacks:
  the sim, whose loop it is). A clock read per callback would cost about 2 us each, a
  fifth of a busy node worker's time: the bench would load what it measures;
- work handed to a thread pool (`ThreadPoolExecutor.submit`), by the submitter's context,
  with the thread's CPU clock around each call (calls are API round trips: milliseconds);
- threads of their own (the driver's informers and gRPC helpers), by the context their
  `start()` was called in: their CPU clock while alive, their total when they end.

The driver's share is what was attributed to it; the sim's is the process's CPU time
less that, so pool overhead and anything unattributed count as the sim's (an upper bound
on the sim, a lower one on the driver). Installed only where a bench asks
(`ClusterSpec(cpu_meter=True)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import thread as pool_thread
from typing import Any, Final, TypeVar

T = TypeVar("T")

DRIVER: Final = "driver"
SIM: Final = "sim"
OWNER: contextvars.ContextVar[str] = contextvars.ContextVar("cpu_owner", default=SIM)
SAMPLE_S: Final = 0.005  # the loop thread's CPU clock read this often


async def as_driver(coro: Coroutine[Any, Any, T]) -> T:
    """`coro` with everything it runs and starts counted as the driver's (from its task's
    second step: the first one, which sets the owner, returns at once)."""
    OWNER.set(DRIVER)
    await asyncio.sleep(0)
    return await coro


async def as_sim(coro: Coroutine[Any, Any, T]) -> T:
    """`coro` (a fake the driver starts, such as `nvidia-imex`) counted as the sim's."""
    OWNER.set(SIM)
    await asyncio.sleep(0)
    return await coro


async def run_as(owner: str, coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro` as a task of its own counted as `owner`'s, so the caller's context
    keeps its owner (a cancel of the caller cancels the task)."""
    return await asyncio.ensure_future(as_driver(coro) if owner == DRIVER else as_sim(coro))


class CpuMeter:
    """Per-owner CPU-seconds of this process, from `install()` on (one per process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spent: dict[str, float] = {DRIVER: 0.0, SIM: 0.0}
        self._alive: dict[threading.Thread, str] = {}  # own threads, by owner, running
        self._undo: list[Callable[[], None]] = []
        self._since = 0.0
        self.running = SIM  # whose callback the loop thread runs now
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def install(self) -> None:
        """Meter from now on; the calling thread is the event loop's."""
        self._since = time.process_time()
        clock = time.pthread_getcpuclockid(threading.get_ident())
        self._sampler = threading.Thread(target=self._sample, args=(clock,), daemon=True,
                                         name="cpu-meter")
        self._sampler.start()  # before the thread patch: its own CPU is the sim's
        self._patch_handles()
        self._patch_pools()
        self._patch_threads()

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()

    def _sample(self, clock: int) -> None:
        last = time.clock_gettime(clock)
        while not self._stop.wait(SAMPLE_S):
            now = time.clock_gettime(clock)
            self._add(self.running, now - last)
            last = now

    def seconds(self) -> dict[str, float]:
        """{"driver": s, "sim": s, "total": s} since `install()`."""
        total = time.process_time() - self._since
        with self._lock:
            driver = self._spent[DRIVER]
            alive = [t for t, owner in self._alive.items() if owner == DRIVER]
        driver += sum(_thread_cpu(t) for t in alive)
        return {DRIVER: driver, SIM: max(total - driver, 0.0), "total": total}

    def _add(self, owner: str, seconds: float) -> None:
        with self._lock:
            self._spent[owner] = self._spent.get(owner, 0.0) + seconds

    def _patch(self, cls: type, name: str, new: Callable[..., Any]) -> None:
        old = cls.__dict__[name]
        setattr(cls, name, new)
        self._undo.append(lambda: setattr(cls, name, old))

    def _patch_handles(self) -> None:
        run = asyncio.Handle._run
        meter = self

        def _run(handle: asyncio.Handle) -> None:
            meter.running = handle._context.get(OWNER, SIM)  # type: ignore[attr-defined]
            try:
                run(handle)
            finally:
                meter.running = SIM

        self._patch(asyncio.Handle, "_run", _run)

    def _patch_pools(self) -> None:
        submit = ThreadPoolExecutor.submit
        meter = self

        def _submit(pool: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any,
                    **kwargs: Any) -> Future[Any]:
            owner = OWNER.get()

            def metered(*a: Any, **kw: Any) -> Any:
                started = time.thread_time()
                try:
                    return fn(*a, **kw)
                finally:
                    meter._add(owner, time.thread_time() - started)

            return submit(pool, metered, *args, **kwargs)

        self._patch(ThreadPoolExecutor, "submit", _submit)

    def _patch_threads(self) -> None:
        start, run = threading.Thread.start, threading.Thread.run
        meter = self

        def _start(thread: threading.Thread) -> None:
            # A pool's worker runs what is submitted to it, metered there per call.
            if getattr(thread, "_target", None) is not pool_thread._worker:
                thread._cpu_owner = OWNER.get()  # type: ignore[attr-defined]
            start(thread)

        def _run(thread: threading.Thread) -> None:
            owner = getattr(thread, "_cpu_owner", None)
            if owner is None:
                run(thread)
                return
            with meter._lock:
                meter._alive[thread] = owner
            try:
                run(thread)
            finally:
                with meter._lock:
                    meter._alive.pop(thread, None)
                    meter._spent[owner] = meter._spent.get(owner, 0.0) + time.thread_time()

        self._patch(threading.Thread, "start", _start)
        self._patch(threading.Thread, "run", _run)


def _thread_cpu(thread: threading.Thread) -> float:
    """A live thread's CPU-seconds so far (0 once it has ended)."""
    ident = thread.ident
    if ident is None:
        return 0.0
    with contextlib.suppress(OSError, ProcessLookupError):
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    return 0.0
