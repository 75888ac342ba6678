"""The driver's CPU-seconds and the sim's, told apart inside one in-process sim process.

In in-process mode (sim/cluster/inprocess.py) a process runs the sim's kubelets and fake
`nvidia-imex` beside the driver's node agents and IMEX daemon containers, all on one
event loop and one thread pool, so its CPU time alone cannot say which of the two costs
what. The meter attributes each unit of work to whoever it runs for, by a context
variable (`OWNER`) that the in-process host sets to `DRIVER` in the tasks that run driver
code (`as_driver`) and back to `SIM` in the fake IMEX's (`as_sim`); a context is copied
into every task, callback and `asyncio.to_thread` call made from there, so what the
driver code starts is the driver's too. Measured, each on the thread it runs on:

- the loop's callbacks and task steps (`asyncio.Handle._run`), by the handle's context;
- work handed to a thread pool (`ThreadPoolExecutor.submit`), by the submitter's context;
- threads of their own (the driver's informers and gRPC helpers), by the context their
  `start()` was called in: their CPU clock while alive, their total when they end.

The driver's share is what was attributed to it; the sim's is the process's CPU time
less that, so loop and pool overhead and anything unattributed count as the sim's (an
upper bound on the sim, a lower one on the driver). It costs two thread-CPU clock reads
per callback, so it is installed only where a bench asks (`ClusterSpec(cpu_meter=True)`).
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


async def as_driver(coro: Coroutine[Any, Any, T]) -> T:
    """`coro` with everything it runs and starts counted as the driver's."""
    OWNER.set(DRIVER)
    return await coro


async def as_sim(coro: Coroutine[Any, Any, T]) -> T:
    """`coro` (a fake the driver starts, such as `nvidia-imex`) counted as the sim's."""
    OWNER.set(SIM)
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

    def install(self) -> None:
        self._since = time.process_time()
        self._patch_handles()
        self._patch_pools()
        self._patch_threads()

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

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
            started = time.thread_time()
            try:
                run(handle)
            finally:
                # Read after the step: a task's first step is where `as_driver` sets it.
                owner = handle._context.get(OWNER, SIM)  # type: ignore[attr-defined]
                meter._add(owner, time.thread_time() - started)

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
