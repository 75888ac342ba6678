"""The progress lines of long steps (sim/progress.py), on a virtual clock: nothing for a
quick step, then at most one line per interval, with the elapsed time."""

from __future__ import annotations

import io

from sim.cluster.demo import ready_reporter
from sim.cluster.evidence import EvidenceChain
from sim.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_quiet_at_first_then_one_line_per_interval() -> None:
    clock, out = Clock(), io.StringIO()
    progress = Progress("cluster start", interval=5.0, stream=out, clock=clock)
    for seconds in (0.0, 1.0, 4.9):
        clock.now = 100.0 + seconds
        assert not progress.update("3/144 agents registered with kubelet")
    assert out.getvalue() == ""
    printed = []
    for tenth in range(50, 160):  # updates every 0.1 s from 5.0 s to 15.9 s
        clock.now = 100.0 + tenth / 10
        printed.append(progress.update(f"{tenth}/144"))
    assert sum(printed) == 3  # at 5 s, 10 s and 15 s
    assert out.getvalue().splitlines() == [
        "cluster start: 50/144 (5s)", "cluster start: 100/144 (10s)",
        "cluster start: 150/144 (15s)"]


def test_ready_reporter_names_each_domains_first_missing_link() -> None:
    clock, out = Clock(), io.StringIO()
    report = ready_reporter(Progress("waiting for ready", stream=out, clock=clock))
    chain = EvidenceChain("default", "cd", driver_namespace="dra-driver-nvidia-gpu",
                          host_managed=False, node_roots={})
    for link in chain.links[:4]:
        link.done_at = 1.0
    chain.links[4].count = "37/144"
    report(chain)
    clock.now += 6
    report(chain)
    assert out.getvalue() == "waiting for ready: default/cd: IMEX daemon pods running 37/144 (6s)\n"
