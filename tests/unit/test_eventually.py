"""The tests' waiting helpers: `eventually`, `eventually_async` and the virtual clock."""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest
from eventually import eventually, eventually_async, run_virtual, virtual_loop


def test_eventually_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert eventually(lambda: next(counter) >= 3 and "done", interval=0) == "done"


def test_eventually_retries_assertions_and_reports_the_last_one() -> None:
    calls = itertools.count(1)

    def check() -> int:
        n = next(calls)
        assert n > 2, f"only {n}"
        return n

    assert eventually(check, interval=0) == 3

    def never() -> None:
        raise AssertionError("still 0 replicas")

    with pytest.raises(AssertionError, match="waiting for the rollout; last error: Assertion"
                       ) as failed:
        eventually(never, "the rollout", timeout=0, interval=0)
    assert isinstance(failed.value.__cause__, AssertionError)
    assert "still 0 replicas" in str(failed.value)


def test_eventually_names_a_lambda_by_its_source_and_shows_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"`eventually\(lambda: \[\], .*`; last value: \[\]"):
        eventually(lambda: [], timeout=0, interval=0)


def test_other_errors_propagate_unless_ignored() -> None:
    def broken() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        eventually(broken, timeout=5)
    with pytest.raises(AssertionError, match="KeyError"):
        eventually(broken, timeout=0, interval=0, ignore=(KeyError,))


def test_eventually_async_awaits_async_checks_on_the_loop_clock() -> None:
    async def main() -> None:
        loop = virtual_loop()
        seen: list[int] = []

        async def grows() -> bool:
            seen.append(len(seen))
            return len(seen) == 4

        start = loop.time()
        assert await eventually_async(grows, timeout=100, interval=10) is True
        assert loop.time() - start == pytest.approx(30)  # three waits of 10 virtual seconds
        assert await eventually_async(lambda: "sync", interval=10) == "sync"
        with pytest.raises(AssertionError, match="waiting for nothing; last value: False"):
            await eventually_async(lambda: False, "nothing", timeout=3600, interval=60)

    run_virtual(main(), timeout=7200)


def test_the_virtual_clock_jumps_idle_waits_and_keeps_timer_order() -> None:
    async def main() -> list[str]:
        loop = virtual_loop()
        order: list[str] = []

        async def after(delay: float, name: str) -> None:
            await asyncio.sleep(delay)
            order.append(name)

        start = loop.time()
        await asyncio.gather(after(3600, "hour"), after(60, "minute"), after(1, "second"))
        assert loop.time() - start == pytest.approx(3600)
        return order

    assert run_virtual(main(), timeout=7200) == ["second", "minute", "hour"]


def test_the_virtual_clock_waits_for_threads_in_real_time() -> None:
    """While a thread works the clock does not jump: a timer due later than the thread's
    work does not fire before the thread is done."""
    release = threading.Event()

    async def main() -> None:
        timer = asyncio.create_task(asyncio.sleep(100))
        thread = asyncio.create_task(asyncio.to_thread(release.wait, 30))
        await asyncio.sleep(0)  # both started
        assert virtual_loop().in_threads
        asyncio.get_running_loop().call_soon(release.set)
        assert await thread is True
        assert not timer.done()
        await timer  # and once the thread is done the clock jumps again

    run_virtual(main())


def test_a_wait_for_nothing_fails_at_once_on_the_virtual_clock() -> None:
    with pytest.raises(TimeoutError):
        run_virtual(asyncio.Event().wait(), timeout=3600)
