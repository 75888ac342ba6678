"""A container's probe loop lives only as long as the run it probes.

The IMEX daemon's startup probe may fail 1,200 times a second apart. If the loop kept
going after its container's process was gone (a cancel lost in a race with a probe that
just finished, as `asyncio.wait_for` loses them on Python 3.11), stopping the pod waited
for those 20 minutes: a simulated cluster's tear-down hung in CI."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.cluster.containers import Container


@dataclass
class Proc:
    returncode: int | None = None


@dataclass
class FailingProbes:
    """An executor whose exec probes all fail; counts them."""

    calls: int = 0
    container: Any = None
    after: int = 3  # the container's process exits after this many probes

    async def probe(self, container: Any, launch: Any, argv: Sequence[str], timeout: float
                    ) -> bool:  # fmt: skip
        self.calls += 1
        if self.calls == self.after:
            self.container.proc.returncode = 137
        return False


@dataclass
class Kubelet:
    executor: FailingProbes = field(default_factory=FailingProbes)
    backoff_base: float = 0.01
    backoff_cap: float = 0.01
    probe_period_cap: float | None = None


async def _noop_launch() -> Any:
    raise AssertionError("not started in this test")


def _container(tmp_path: Path, kubelet: Kubelet, probe: dict[str, Any]) -> Container:
    spec = {"name": "imex", "startupProbe": probe}
    container = Container(
        kubelet, spec, _noop_launch, tmp_path, lambda: None,
        grace=0.01, restart_policy="Always", host="127.0.0.1", pod_name="p",
    )  # fmt: skip
    kubelet.executor.container = container
    container.proc = Proc()  # type: ignore[assignment]
    container.launch = object()  # type: ignore[assignment]
    return container


def test_a_probe_loop_ends_when_its_containers_process_is_gone(tmp_path: Path) -> None:
    kubelet = Kubelet()
    probe = {"exec": {"command": ["check"]}, "periodSeconds": 0.001, "failureThreshold": 10**6}
    container = _container(tmp_path, kubelet, probe)

    async def body() -> bool:
        async with asyncio.timeout(60):  # a guard against a hang, not a timing assertion
            return await container._run_probe(probe, "startup")

    assert asyncio.run(body()) is False
    assert kubelet.executor.calls == 3  # nothing probed after the process went


def test_a_stopping_container_is_not_probed(tmp_path: Path) -> None:
    kubelet = Kubelet()
    probe = {"exec": {"command": ["check"]}, "periodSeconds": 0.001, "failureThreshold": 10**6}
    container = _container(tmp_path, kubelet, probe)
    container.stopping = True
    assert asyncio.run(container._run_probe(probe, "startup")) is False
    assert kubelet.executor.calls == 0


def test_a_capped_period_keeps_the_restart_window_of_startup_and_liveness() -> None:
    """The simulated cluster probes at most every second (the cap); a liveness probe of
    10 s x 3 still restarts only after 30 failures, as after 30 s on a cluster, so an agent
    that takes 5 s to come back on a loaded machine is not restarted by the sim alone."""
    liveness = {"periodSeconds": 10, "failureThreshold": 3}
    assert Container._failure_threshold(liveness, "liveness", 1.0) == 30
    assert Container._failure_threshold(liveness, "liveness", 10.0) == 3  # not capped
    startup = {"periodSeconds": 1, "failureThreshold": 1200}
    assert Container._failure_threshold(startup, "startup", 1.0) == 1200
    assert Container._failure_threshold({"periodSeconds": 60, "failureThreshold": 20},
                                        "liveness", 1.0) == 1200
    assert Container._failure_threshold({}, "liveness", 1.0) == 30  # kubelet's defaults
    # Readiness only flips Ready: it stays as quick as the cap makes it.
    assert Container._failure_threshold(liveness, "readiness", 1.0) == 3


def test_the_window_is_what_restarts_the_container(tmp_path: Path) -> None:
    """Counted, not timed: a liveness probe of 0.01 s x 2 probed every 0.001 s fails 20
    times before the container is restarted."""
    kubelet = Kubelet(probe_period_cap=0.001)
    kubelet.executor.after = 10**6  # the process never exits by itself
    probe = {"exec": {"command": ["check"]}, "periodSeconds": 0.01, "failureThreshold": 2}
    container = _container(tmp_path, kubelet, probe)
    signals: list[int] = []

    async def record(sig: int) -> None:
        signals.append(sig)

    container.signal = record  # type: ignore[method-assign]

    async def body() -> bool:
        async with asyncio.timeout(60):  # a guard against a hang, not a timing assertion
            return await container._run_probe(probe, "liveness")

    assert asyncio.run(body()) is False
    assert kubelet.executor.calls == 20
    assert signals == [15, 9]
