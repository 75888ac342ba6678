"""Waiting in tests: the one poll-until helper, and an event loop on a virtual clock.

`tests/` is on `sys.path` for every test module (pytest puts the directory of the top-level
`tests/conftest.py` there), so a test imports these plainly::

    from eventually import eventually, eventually_async, run_virtual

`eventually(check)` calls `check()` until it returns something truthy, and returns that.
A check may also assert: an `AssertionError` counts as "not yet" (the last one is chained to
the timeout's error), so a check can be a block of plain assertions. On timeout it fails with
what it waited for and the last value or error. `eventually_async` is the same on a running
event loop; its check may be a plain function or return an awaitable.

"Something did NOT happen" is never a fixed sleep followed by an assertion (that passes
whenever the bug is slower than the sleep): wait for a later event that proves the window
passed (the next poll, heartbeat or reconcile counted), or run on the virtual clock.

`run_virtual(coro)` runs a coroutine on `VirtualClockLoop`: an asyncio loop whose clock
stands still while callbacks run and jumps straight to the next timer whenever the loop has
nothing else to do, so `asyncio.sleep`, `asyncio.timeout`, `loop.call_at` and everything
built on them (the work queue's back-off, the leader election's periods, the readiness
poller's interval) take no wall time and land exactly when due. Work sent to threads with
`asyncio.to_thread` or `loop.run_in_executor` is waited for in real time (the clock then
runs at wall speed).
Anything else outside the loop that it would wait on (a subprocess, a socket served
elsewhere) is invisible to it: use `asyncio.run` for those tests.
"""

from __future__ import annotations

import asyncio
import inspect
import selectors
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, TypeVarTuple, cast

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

TIMEOUT = 10.0
INTERVAL = 0.02


def _describe(check: Callable[..., Any], what: str | None) -> str:
    if what:
        return what
    name = getattr(check, "__qualname__", None) or repr(check)
    if name.endswith("<lambda>"):
        try:
            return "`" + inspect.getsource(check).strip() + "`"
        except (OSError, TypeError):
            pass
    return name


def _timed_out(
    check: Callable[..., Any], what: str | None, timeout: float, last: Any, error: Exception | None
) -> AssertionError:
    got = f"last error: {error!r}" if error is not None else f"last value: {last!r}"
    awaited = _describe(check, what)
    return AssertionError(f"timed out after {timeout:g}s waiting for {awaited}; {got}")


def eventually(
    check: Callable[[], T],
    what: str | None = None,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    ignore: tuple[type[Exception], ...] = (AssertionError,),
) -> T:
    """The first truthy result of `check()`, called every `interval` seconds.

    Exceptions of the types in `ignore` (by default AssertionError) count as "not yet".
    Fails with an AssertionError naming `what` and the last value or error after `timeout`.
    """
    deadline = time.monotonic() + timeout
    while True:
        error: Exception | None = None
        last: T | None = None
        try:
            last = check()
            if last:
                return last
        except ignore as exc:
            error = exc
        if time.monotonic() > deadline:
            raise _timed_out(check, what, timeout, last, error) from error
        time.sleep(interval)


async def eventually_async(
    check: Callable[[], T | Awaitable[T]],
    what: str | None = None,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    ignore: tuple[type[Exception], ...] = (AssertionError,),
) -> T:
    """`eventually` on the running loop: `check()` may return an awaitable, which is awaited.

    The deadline is on the loop's clock, so on `VirtualClockLoop` it is virtual time.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        error: Exception | None = None
        last: Any = None
        try:
            last = check()
            if inspect.isawaitable(last):
                last = await last
            if last:
                return cast(T, last)
        except ignore as exc:
            error = exc
        if loop.time() > deadline:
            raise _timed_out(check, what, timeout, last, error) from error
        await asyncio.sleep(interval)


class _JumpingSelector(selectors.DefaultSelector):
    """Waits as the real selector does, except that an idle wait for a timer is skipped."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self._loop
        if loop.in_threads or timeout is None:
            start = time.monotonic()
            events = super().select(timeout)
            if loop.in_threads:
                loop.advance(time.monotonic() - start)
            return events
        events = super().select(0)
        if not events and timeout > 0:
            loop.advance(timeout)
        return events


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop on a virtual clock: it stands still while callbacks run, jumps to the
    next timer when the loop would wait idle, and runs at wall speed while a call sent to a
    thread through `run_in_executor` (so `asyncio.to_thread`) is running.
    """

    def __init__(self) -> None:
        self._start = self._now = time.monotonic()
        self._in_threads = 0
        self._wall_start = datetime.now(UTC)
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    @property
    def in_threads(self) -> bool:
        return self._in_threads > 0

    def wall(self) -> datetime:
        """A wall clock that keeps pace with `time()`: the real one at the start, plus
        the loop time since."""
        return self._wall_start + timedelta(seconds=self._now - self._start)

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self._in_threads += 1
        future.add_done_callback(self._thread_done)
        return future

    def _thread_done(self, _: asyncio.Future[Any]) -> None:
        self._in_threads -= 1


def virtual_loop() -> VirtualClockLoop:
    """The running loop, which must be a `VirtualClockLoop` (inside `run_virtual`)."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualClockLoop), "not running on the virtual clock"
    return loop


def run_virtual(coro: Coroutine[Any, Any, T], timeout: float | None = 600.0) -> T:
    """`asyncio.run(coro)` on a `VirtualClockLoop`, bounded by `timeout` virtual seconds.

    A test stuck on something that never happens fails at once with TimeoutError: the
    guard's timer is the only thing left, and the clock jumps to it.
    """

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(bounded())


__all__ = [
    "VirtualClockLoop",
    "eventually",
    "eventually_async",
    "run_virtual",
    "virtual_loop",
]
