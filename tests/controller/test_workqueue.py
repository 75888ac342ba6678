"""KeyedQueue: dedup, per-key exclusion, bounded concurrency, backoff and clean shutdown."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from eventually import eventually_async, run_virtual

from controller.workqueue import JITTER_HIGH, JITTER_LOW, KeyedQueue, backoff_delay


def run(coro_fn: Callable[[], Coroutine[Any, Any, None]], timeout: float = 10) -> None:
    """On the virtual clock (tests/eventually.py): the queue's timers are the loop's, so its
    delays and back-offs land exactly when due and take no wall time."""
    run_virtual(coro_fn(), timeout)


def now() -> float:
    return asyncio.get_running_loop().time()


def test_dedup_collapses_adds_of_a_queued_key() -> None:
    calls: list[str] = []

    async def handler(key: str) -> None:
        calls.append(key)

    async def main() -> None:
        queue = KeyedQueue(handler)
        for _ in range(5):
            queue.add("a")
        queue.add("b")
        assert queue.depth == 2
        queue.start()
        await queue.idle()
        assert sorted(calls) == ["a", "b"]
        assert queue.depth == 0
        await queue.stop()

    run(main)


def test_never_two_concurrent_runs_of_one_key() -> None:
    active: set[str] = set()
    runs: dict[str, int] = {}
    overlaps: list[str] = []

    async def handler(key: str) -> None:
        if key in active:
            overlaps.append(key)
        active.add(key)
        runs[key] = runs.get(key, 0) + 1
        await asyncio.sleep(0.005)
        active.discard(key)

    async def main() -> None:
        queue = KeyedQueue(handler, workers=8)
        queue.start()
        for _ in range(40):
            for key in ("a", "b"):
                queue.add(key)
            await asyncio.sleep(0.002)
        await queue.idle()
        await queue.stop()

    run(main)
    assert overlaps == []
    assert runs["a"] > 1 and runs["b"] > 1


def test_distinct_keys_run_concurrently_up_to_workers() -> None:
    active = 0
    peak = 0

    async def handler(key: str) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1

    async def main() -> None:
        queue = KeyedQueue(handler, workers=3)
        for i in range(9):
            queue.add(f"k{i}")
        started = now()
        queue.start()
        await asyncio.sleep(0.02)  # virtual: the first three are 20 ms into their 50
        assert queue.running == 3
        await queue.idle()
        assert now() - started == pytest.approx(0.15)  # three rounds of 50 ms, not nine
        await queue.stop()

    run(main)
    assert peak == 3


def test_readd_during_a_run_causes_exactly_one_more_run() -> None:
    runs = 0
    started = asyncio.Event()
    release = asyncio.Event()

    async def handler(key: str) -> None:
        nonlocal runs
        runs += 1
        started.set()
        if runs == 1:
            await release.wait()

    async def main() -> None:
        queue = KeyedQueue(handler)
        queue.start()
        queue.add("a")
        await started.wait()
        assert queue.running == 1
        for _ in range(3):
            queue.add("a")
        assert queue.depth == 1  # owed once, not queued beside the running one
        await asyncio.sleep(1)  # virtual: every idle worker had its chance at the key
        assert runs == 1
        release.set()
        await queue.idle()
        await queue.stop()

    run(main)
    assert runs == 2


def test_failures_back_off_exponentially_capped_and_success_resets() -> None:
    base, cap = 0.01, 0.05
    fail_left = 6
    call_times: list[float] = []
    retries: list[tuple[int, float]] = []
    results: list[BaseException | None] = []

    async def handler(key: str) -> None:
        nonlocal fail_left
        call_times.append(now())
        if fail_left > 0:
            fail_left -= 1
            raise RuntimeError("boom")

    async def main() -> None:
        nonlocal fail_left
        queue = KeyedQueue(
            handler,
            base_delay=base,
            max_delay=cap,
            rng=random.Random(7),
            on_retry=lambda key, n, delay: retries.append((n, delay)),
            on_result=lambda key, seconds, error: results.append(error),
        )
        queue.start()
        queue.add("a")
        await queue.idle()
        assert queue.failures("a") == 0  # the seventh run succeeded
        assert len(call_times) == 7

        # Delays follow the envelope, never decrease, and stop at the cap.
        assert [n for n, _ in retries] == [1, 2, 3, 4, 5, 6]
        delays = [d for _, d in retries]
        for n, delay in retries:
            low = min(cap, base * 2 ** (n - 1) * JITTER_LOW)
            high = min(cap, base * 2 ** (n - 1) * JITTER_HIGH)
            assert low <= delay <= high
        assert delays == sorted(delays)
        assert delays[-2:] == [cap, cap]
        # The queue honoured them: each retry ran when its delay was up, not before.
        gaps = [b - a for a, b in itertools.pairwise(call_times)]
        assert gaps == pytest.approx(delays)
        assert [e is None for e in results] == [False] * 6 + [True]

        # After the success a new failure starts again from the base delay.
        fail_left = 1
        retries.clear()
        queue.add("a")
        await queue.idle()
        assert retries[0][0] == 1 and retries[0][1] <= base * JITTER_HIGH
        await queue.stop()

    run(main)


def test_backoff_delay_is_capped_without_overflow() -> None:
    assert backoff_delay(1, 0.1, 30, 1.0) == pytest.approx(0.1)
    assert backoff_delay(4, 0.1, 30, 1.0) == pytest.approx(0.8)
    assert backoff_delay(10_000, 0.1, 30, 1.0) == 30


def test_failure_count_is_per_key_and_add_supersedes_a_pending_retry() -> None:
    calls: list[str] = []

    async def handler(key: str) -> None:
        calls.append(key)
        if key == "bad" and calls.count("bad") == 1:
            raise ValueError("first run fails")

    async def main() -> None:
        queue = KeyedQueue(handler, base_delay=5, max_delay=10)
        queue.start()
        queue.add("bad")
        queue.add("good")
        await eventually_async(lambda: sorted(calls) == ["bad", "good"] and queue.running == 0)
        assert queue.failures("bad") == 1 and queue.failures("good") == 0
        assert queue.depth == 1  # the retry, 5 s away
        queue.add("bad")  # a fresh event: run now instead of in 5 s, and only once
        async with asyncio.timeout(1):
            await queue.idle()
        assert calls.count("bad") == 2
        assert queue.failures("bad") == 0
        await queue.stop()

    run(main)


def test_add_after_delays_and_the_earliest_schedule_wins() -> None:
    seen: list[tuple[str, float]] = []

    async def handler(key: str) -> None:
        seen.append((key, now()))

    async def main() -> None:
        queue = KeyedQueue(handler)
        queue.start()
        start = now()
        queue.add_after("a", 5)
        queue.add_after("a", 0.03)
        queue.add_after("a", 1)
        assert queue.depth == 1
        async with asyncio.timeout(1):
            await queue.idle()
        assert len(seen) == 1
        assert seen[0][1] - start == pytest.approx(0.03)
        await queue.stop()

    run(main)


def test_stop_cancels_running_and_pending_work() -> None:
    cancelled = asyncio.Event()

    async def handler(key: str) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main() -> None:
        queue = KeyedQueue(handler, workers=2)
        queue.start()
        queue.add("a")
        queue.add_after("b", 60)
        await eventually_async(lambda: queue.running == 1)
        async with asyncio.timeout(1):
            await queue.stop()
        assert cancelled.is_set()
        assert queue.depth == 0 and queue.running == 0
        queue.add("c")  # ignored after stop
        assert queue.depth == 0
        async with asyncio.timeout(1):
            await queue.idle()
        with pytest.raises(RuntimeError):
            queue.start()

    run(main)


def test_a_failing_hook_does_not_break_the_queue() -> None:
    calls = 0

    async def handler(key: str) -> None:
        nonlocal calls
        calls += 1

    def bad_hook(key: str, seconds: float, error: BaseException | None) -> None:
        raise RuntimeError("metrics down")

    async def main() -> None:
        queue = KeyedQueue(handler, on_result=bad_hook)
        queue.start()
        queue.add("a")
        await queue.idle()
        queue.add("a")
        await queue.idle()
        await queue.stop()

    run(main)
    assert calls == 2


def test_a_stray_cancel_inside_the_handler_is_a_failure_not_a_dead_worker() -> None:
    calls = 0

    async def handler(key: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise asyncio.CancelledError  # e.g. awaited a future someone else cancelled

    async def main() -> None:
        queue = KeyedQueue(handler, workers=1, base_delay=0.01)
        queue.start()
        queue.add("a")
        await queue.idle()
        assert calls == 2 and queue.failures("a") == 0
        await queue.stop()

    run(main)


def test_forget_drops_the_retry_and_the_count() -> None:
    async def handler(key: str) -> None:
        raise RuntimeError("always")

    async def main() -> None:
        queue = KeyedQueue(handler, base_delay=5, max_delay=10)
        queue.start()
        queue.add("gone")
        await eventually_async(lambda: queue.failures("gone") == 1)
        assert queue.depth == 1
        queue.forget("gone")
        assert queue.failures("gone") == 0 and queue.depth == 0
        async with asyncio.timeout(1):
            await queue.idle()
        await queue.stop()

    run(main)
