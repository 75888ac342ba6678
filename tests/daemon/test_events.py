"""Warning Events on the daemon's pod: texts, rate limit, never blocking or raising, and the
supervisor's triggers (an unexpected IMEX exit, IMEX not READY past the threshold)."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from eventually import eventually_async
from kubernetes.client.rest import ApiException

from agent.daemon.events import (
    REASON_EXITED,
    REASON_NOT_READY,
    PodEvents,
    exited_message,
    not_ready_message,
)
from agent.daemon.identity import DaemonIdentity
from agent.daemon.process import ImexProcess
from agent.daemon.supervisor import ImexSupervisor

IDENTITY = DaemonIdentity(
    clique_id="c.1", cd_uid="0f2a6e3c-1111-2222-3333-444455556666", cd_name="cd",
    cd_namespace="default", node_name="node-1", pod_ip="10.0.0.1", pod_uid="pod-uid",
    pod_name="cd-daemon-x", pod_namespace="driver-ns", max_nodes=4)


class FakeCore:
    def __init__(self, fail: Exception | None = None, block: threading.Event | None = None):
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail
        self.block = block

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        if self.block is not None:
            self.block.wait(5)
        if self.fail is not None:
            raise self.fail
        self.created.append((namespace, body))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def events_with(core: FakeCore, clock: Clock | None = None) -> PodEvents:
    events = PodEvents(None, IDENTITY, clock=clock or Clock())  # type: ignore[arg-type]
    events._core = core  # type: ignore[assignment]
    return events


def test_message_texts():
    assert exited_message(1, 1.04, 3, 3.61) == (
        "nvidia-imex exited with code 1 after 1.0s; restart #3 in 3.6s")
    assert exited_message(-9, 12.0, 1, 0.9) == (
        "nvidia-imex exited with code -9 (killed by SIGKILL) after 12.0s; restart #1 in 0.9s")
    assert not_ready_message("INIT_GPU", 61.2) == (
        "nvidia-imex is INIT_GPU, not READY, 61s after it started")
    assert not_ready_message("UNAVAILABLE", 90, was_ready=True) == (
        "nvidia-imex is UNAVAILABLE, not READY for 90s (it was READY before)")


def test_event_is_on_the_own_pod_and_rate_limited_per_reason():
    core, clock = FakeCore(), Clock()

    async def scenario() -> None:
        events = events_with(core, clock)
        assert events.warning(REASON_EXITED, "first")
        assert events.warning(REASON_NOT_READY, "other reason")
        clock.now += 59
        assert not events.warning(REASON_EXITED, "second")
        assert not events.warning(REASON_EXITED, "third")
        clock.now += 2
        assert events.warning(REASON_EXITED, "fourth")
        await events.close()

    asyncio.run(scenario())
    assert [(ns, b["reason"], b["message"]) for ns, b in core.created] == [
        ("driver-ns", REASON_EXITED, "first"),
        ("driver-ns", REASON_NOT_READY, "other reason"),
        ("driver-ns", REASON_EXITED, "fourth (2 more since the last such event)"),
    ]
    body = core.created[0][1]
    assert body["type"] == "Warning"
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "cd-daemon-x",
                                      "namespace": "driver-ns", "uid": "pod-uid"}
    assert body["source"] == {"component": "compute-domain-daemon", "host": "node-1"}


def test_api_errors_are_logged_not_raised(caplog):
    core = FakeCore(fail=ApiException(status=403, reason="Forbidden"))

    async def scenario() -> None:
        events = events_with(core)
        assert events.warning(REASON_EXITED, "m")
        await events.close()

    asyncio.run(scenario())
    [record] = [r for r in caplog.records if r.name == "agent.daemon.events"]
    assert record.levelno == logging.WARNING
    assert "could not record event IMEXDaemonExited on pod driver-ns/cd-daemon-x: 403" in (
        record.getMessage())


def test_a_hanging_api_never_blocks_and_writes_in_flight_are_bounded():
    release = threading.Event()
    core, clock = FakeCore(block=release), Clock()

    async def scenario() -> list[bool]:
        events = events_with(core, clock)
        scheduled = []
        for i in range(6):
            scheduled.append(events.warning(f"Reason{i}", "m"))  # returns at once
        await events.close(timeout=0.1)  # gives up on the hanging writes
        release.set()
        return scheduled

    assert asyncio.run(asyncio.wait_for(scenario(), 5)) == [True] * 4 + [False] * 2


def test_unexpected_exit_reports_code_and_restart_number(tmp_path: Path):
    child = tmp_path / "dies"
    child.write_text("#!/bin/sh\nexit 3\n")
    child.chmod(0o755)
    crashes: list[tuple[int, float, int, float]] = []
    imex = ImexProcess([str(child)], backoff_base=0.05, backoff_max=0.05,
                       on_crash=lambda *a: crashes.append(a))

    async def scenario() -> None:
        await imex.ensure_started()
        await eventually_async(lambda: len(crashes) >= 3, "three crashes")
        await imex.stop()

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert [(c[0], c[2]) for c in crashes[:3]] == [(3, 1), (3, 2), (3, 3)]
    assert all(0 < c[3] <= 0.05 for c in crashes)


def test_not_ready_event_after_the_threshold_since_start_or_last_ready():
    recorded: list[tuple[str, str]] = []
    fake_events = SimpleNamespace(warning=lambda r, m: recorded.append((r, m)))
    sup = ImexSupervisor(IDENTITY, None, events=fake_events,  # type: ignore[arg-type]
                         not_ready_event_after=3.0)
    sup.imex = SimpleNamespace(started_at=100.0)  # type: ignore[assignment]
    sup._check_not_ready(False, "INIT_GPU", 102.0)
    assert recorded == []
    sup._check_not_ready(False, "INIT_GPU", 104.0)
    assert recorded == [(REASON_NOT_READY,
                         "nvidia-imex is INIT_GPU, not READY, 4s after it started")]
    recorded.clear()
    sup._check_not_ready(True, "READY", 110.0)
    sup._check_not_ready(False, "UNAVAILABLE", 112.0)
    assert recorded == []
    # A failed poll the hysteresis still reports as ready warns of nothing, however late.
    sup._check_not_ready(True, "UNAVAILABLE", 113.5)
    assert recorded == []
    sup._check_not_ready(False, "UNAVAILABLE", 113.5)
    assert recorded == [(REASON_NOT_READY,
                         "nvidia-imex is UNAVAILABLE, not READY for 4s (it was READY before)")]
    recorded.clear()
    sup.imex = SimpleNamespace(started_at=None)  # type: ignore[assignment]
    sup._check_not_ready(False, "UNAVAILABLE", 200.0)  # not running: the exit Event's business
    disabled = ImexSupervisor(IDENTITY, None, events=fake_events,  # type: ignore[arg-type]
                              not_ready_event_after=0)
    disabled.imex = SimpleNamespace(started_at=0.0)  # type: ignore[assignment]
    disabled._check_not_ready(False, "INIT_GPU", 1000.0)
    assert recorded == []
