"""LeaderElector against the API emulator: exclusion, hand-over, expiry, conflicts, outages.

The electors run on the virtual clock (tests/eventually.py), their clocks injected: periods,
lease expiry and renew deadlines are virtual seconds, exact and free; the API calls (in
threads) are real.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from eventually import eventually_async, run_virtual, virtual_loop
from kubernetes import client

from controller.leader import LeaderElector, format_micro_time, parse_time
from sim.apiserver.runner import ServerThread

LEASE = "dra-driver-nvidia-gpu-controller"
NS = "default"
FAST = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1}
T = TypeVar("T")
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Exclusive:
    """A shared flag that fails the test if two `lead()` calls ever overlap."""

    def __init__(self) -> None:
        self.holder: str | None = None
        self.overlaps: list[tuple[str, str]] = []
        self.starts: dict[str, list[float]] = {}
        self.ends: dict[str, list[float]] = {}

    def lead(self, who: str, body: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        async def lead() -> None:
            if self.holder is not None:
                self.overlaps.append((self.holder, who))
            self.holder = who
            self.starts.setdefault(who, []).append(now())
            try:
                await body()
            finally:
                self.holder = None
                self.ends.setdefault(who, []).append(now())

        return lead


@pytest.fixture
def clients(apiserver: ServerThread) -> Iterator[Callable[[], Any]]:
    """One ApiClient per elector, as separate replicas would have."""
    made: list[Any] = []

    def make() -> Any:
        made.append(apiserver.api_client())
        return made[-1]

    yield make
    for c in made:
        c.close()


def read_lease(k8s: Any) -> dict[str, Any]:
    raw = client.CoordinationV1Api(k8s).read_namespaced_lease(LEASE, NS, _preload_content=False)
    return json.loads(raw.data)


def now() -> float:
    return asyncio.get_running_loop().time()


def elector(api_client: Any, identity: str, **kwargs: Any) -> LeaderElector:
    """An elector on the running virtual loop's clocks."""
    loop = virtual_loop()
    return LeaderElector(
        api_client,
        name=LEASE,
        namespace=NS,
        identity=identity,
        clock=loop.time,
        wall_clock=loop.wall,
        **{**FAST, **kwargs},
    )


def arun(coro: Coroutine[Any, Any, T], timeout: float) -> T:
    """Run on the virtual clock, bounded by `timeout` virtual seconds."""
    return run_virtual(coro, timeout)


async def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    await eventually_async(predicate, timeout=timeout, interval=0.01)


def test_release_hands_over_at_once_and_fields_match_client_go(k8s, clients) -> None:
    flag = Exclusive()
    changes: list[str] = []

    async def main() -> None:
        a = elector(clients(), "a", on_change=changes.append)
        b = elector(clients(), "b")
        a_task = asyncio.create_task(a.run(flag.lead("a", lambda: asyncio.sleep(0.4))))
        await wait_until(lambda: a.is_leader, 2)
        lease = await asyncio.to_thread(read_lease, k8s)
        spec = lease["spec"]
        assert spec["holderIdentity"] == "a"
        assert spec["leaseDurationSeconds"] == 1
        assert spec["leaseTransitions"] == 0
        assert MICRO_TIME.match(spec["renewTime"]) and MICRO_TIME.match(spec["acquireTime"])

        b_task = asyncio.create_task(b.run(flag.lead("b", lambda: asyncio.sleep(0.3))))
        assert await a_task is True
        assert not a.is_leader
        assert await b_task is True

    arun(main(), 10)
    assert flag.overlaps == []
    # Release makes the hand-over immediate (well under the 1 s lease).
    assert flag.starts["b"][0] - flag.ends["a"][0] < 0.5
    spec = read_lease(k8s)["spec"]
    assert spec["holderIdentity"] == ""  # b released too
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 1  # a -> b
    assert changes[:2] == ["a", ""]


def test_standby_waits_for_expiry_when_leader_dies_without_release(k8s, clients) -> None:
    flag = Exclusive()
    forever = asyncio.Event

    async def main() -> float:
        a = elector(clients(), "a", release_on_cancel=False)
        b = elector(clients(), "b")
        a_task = asyncio.create_task(a.run(flag.lead("a", forever().wait)))
        await wait_until(lambda: a.is_leader, 2)
        b_task = asyncio.create_task(b.run(flag.lead("b", forever().wait)))
        await wait_until(lambda: b.holder == "a", 2)  # b tried, and found a holding it
        await asyncio.sleep(0.3)  # virtual: b tried again at least once more
        assert not b.is_leader
        a_task.cancel()  # a crash: no release
        with pytest.raises(asyncio.CancelledError):
            await a_task
        died = now()
        await wait_until(lambda: b.is_leader, 3)
        took = now() - died
        b_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await b_task
        return took

    took = arun(main(), 10)
    assert flag.overlaps == []
    assert 0.5 < took < 1.8  # the 1 s lease had to lapse first
    spec = read_lease(k8s)["spec"]
    assert spec["leaseTransitions"] == 1
    assert spec["holderIdentity"] == ""  # b was cancelled and released


def test_only_one_of_several_candidates_leads_at_a_time(k8s, clients) -> None:
    flag = Exclusive()

    async def main() -> None:
        electors = [elector(clients(), f"c{i}") for i in range(3)]
        results = await asyncio.gather(
            *(e.run(flag.lead(e.identity, lambda: asyncio.sleep(0.15))) for e in electors)
        )
        assert results == [True, True, True]

    arun(main(), 10)
    assert flag.overlaps == []
    assert sorted(flag.starts) == ["c0", "c1", "c2"]
    assert read_lease(k8s)["spec"]["leaseTransitions"] == 2


def test_conflicting_writer_is_handled_by_rereading(apiserver, k8s, clients) -> None:
    flag = Exclusive()
    stop = asyncio.Event

    async def main() -> None:
        a = elector(clients(), "a")
        done = stop()
        a_task = asyncio.create_task(a.run(flag.lead("a", done.wait)))
        await wait_until(lambda: a.is_leader, 2)
        api = client.CoordinationV1Api(k8s)
        # Another writer keeps bumping the resourceVersion under the leader's feet.
        for i in range(25):
            await asyncio.to_thread(
                api.patch_namespaced_lease,
                LEASE,
                NS,
                {"metadata": {"labels": {"touched": str(i)}}},
            )
            await asyncio.sleep(0.03)  # virtual clock: paces the writes over a few renewals
            assert a.is_leader
        # One more write right before lead() returns: the release meets a stale
        # resourceVersion too, and must still hand the lease back.
        await asyncio.to_thread(
            api.patch_namespaced_lease, LEASE, NS, {"metadata": {"labels": {"touched": "last"}}}
        )
        done.set()
        assert await a_task is True

    arun(main(), 10)
    assert apiserver.server.stats.conflicts > 0
    lease = read_lease(k8s)
    assert lease["metadata"]["labels"] == {"touched": "last"}  # kept by the re-read writes
    assert lease["spec"]["holderIdentity"] == ""
    assert lease["spec"]["leaseTransitions"] == 0


def test_server_errors_past_renew_deadline_cancel_lead(apiserver, k8s, clients) -> None:
    flag = Exclusive()
    cancelled_at: list[float] = []

    async def lead_forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled_at.append(now())
            raise

    def faults(rate: float) -> None:
        apiserver.call(lambda: setattr(apiserver.server.faults, "error_rate", rate))

    async def main() -> None:
        a = elector(clients(), "a")
        b = elector(clients(), "b")
        a_task = asyncio.create_task(a.run(flag.lead("a", lead_forever)))
        await wait_until(lambda: a.is_leader, 2)
        b_task = asyncio.create_task(b.run(flag.lead("b", lambda: asyncio.sleep(0.1))))
        await wait_until(lambda: b.holder == "a", 2)  # b is standing by
        faults(1.0)
        broke = now()
        assert await a_task is False  # leadership lost, not an error
        assert not a.is_leader
        lost_after = cancelled_at[0] - broke
        assert 0.4 < lost_after < 1.0  # renew_deadline 0.6 s, not the 1 s lease
        assert not b.is_leader  # nobody can take it while the server fails
        faults(0.0)
        assert await b_task is True  # b takes over once the old lease has lapsed

    arun(main(), 10)
    assert flag.overlaps == []
    assert read_lease(k8s)["spec"]["leaseTransitions"] == 1


def test_lead_error_propagates_after_release(k8s, clients) -> None:
    async def boom() -> None:
        raise RuntimeError("controller failed")

    async def main() -> None:
        a = elector(clients(), "a")
        with pytest.raises(RuntimeError, match="controller failed"):
            await a.run(boom)

    arun(main(), 5)
    assert read_lease(k8s)["spec"]["holderIdentity"] == ""


def test_timing_contract_is_enforced(k8s) -> None:
    with pytest.raises(ValueError):
        LeaderElector(
            k8s, name=LEASE, namespace=NS, identity="a", lease_duration=1, renew_deadline=1
        )
    with pytest.raises(ValueError):
        LeaderElector(k8s, name=LEASE, namespace=NS, identity="a", renew_deadline=1, retry_period=1)
    with pytest.raises(ValueError):
        LeaderElector(k8s, name=LEASE, namespace=NS, identity="")


def test_micro_time_round_trip() -> None:
    moment = parse_time("2026-11-29T10:00:00.000000Z")
    assert moment is not None
    assert format_micro_time(moment) == "2026-11-29T10:00:00.000000Z"
    assert parse_time("2026-11-29T10:00:00.5+01:00") is not None
    assert parse_time("garbage") is None
    assert parse_time(None) is None
