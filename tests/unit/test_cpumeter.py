"""sim/cluster/cpumeter.py: work is counted as the driver's or the sim's by who runs it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sim.cluster.cpumeter import DRIVER, SIM, CpuMeter, as_driver, run_as


def _burn(rounds: int = 2_000_000) -> int:
    total = 0
    for i in range(rounds):
        total += i * i
    return total


@pytest.fixture
def meter():
    m = CpuMeter()
    m.install()
    yield m
    m.uninstall()


async def _driver_work() -> None:
    _burn()  # a task step
    await asyncio.to_thread(_burn)  # the pool, submitted from the driver's context
    thread = threading.Thread(target=_burn)  # a thread of its own, started here
    thread.start()
    await asyncio.to_thread(thread.join)
    await run_as(SIM, _sim_work())  # a fake the driver starts: the sim's


async def _sim_work() -> None:
    _burn()


def test_driver_work_is_counted_as_the_drivers_and_the_rest_as_the_sims(meter):
    async def main() -> None:
        await asyncio.gather(asyncio.ensure_future(as_driver(_driver_work())), _sim_work())

    asyncio.run(main())
    spent = meter.seconds()
    # Three bursts of the driver's, two of the sim's (its own and the fake's), alike.
    unit = spent["total"] / 5
    assert spent[DRIVER] == pytest.approx(3 * unit, rel=0.3), spent
    assert spent[SIM] == pytest.approx(2 * unit, rel=0.4), spent


def test_the_callers_context_keeps_its_owner(meter):
    async def main() -> None:
        await run_as(DRIVER, _sim_work())  # the driver's, in a task of its own
        _burn()  # still the sim's

    asyncio.run(main())
    spent = meter.seconds()
    assert spent[DRIVER] == pytest.approx(spent["total"] / 2, rel=0.35), spent


def test_uninstall_puts_back_what_it_patched():
    before = (asyncio.Handle._run, threading.Thread.start, threading.Thread.run)
    m = CpuMeter()
    m.install()
    assert asyncio.Handle._run is not before[0]
    m.uninstall()
    assert (asyncio.Handle._run, threading.Thread.start, threading.Thread.run) == before
