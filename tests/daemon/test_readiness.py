"""IMEX readiness through the real (fake) `nvidia-imex-ctl -q` against fake daemons."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
from collections.abc import Coroutine, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
from eventually import eventually_async, run_virtual

from agent.daemon.readiness import (
    ReadinessPoller,
    check_main,
    is_ready,
    query_state,
)
from sim.fakeimex.install import install

ADDRESS = "127.0.1.31"
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 15.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


class Imex:
    """One fake daemon's files, and the processes started from them (killed at teardown)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bins = install(root / "bin")
        self.ctl = str(self.bins["nvidia-imex-ctl"])
        (root / "nodes.cfg").write_text(f"{ADDRESS}\n")
        (root / "hosts").write_text("127.0.0.1\tlocalhost\n")
        values = {
            "LOG_FILE_NAME": "",
            "DAEMONIZE": 0,
            "SERVER_PORT": free_port(),
            "IMEX_NODE_CONFIG_FILE": root / "nodes.cfg",
            "IMEX_CMD_ENABLED": 1,
            "IMEX_CMD_BIND_INTERFACE_IP": ADDRESS,
            "IMEX_CMD_PORT": free_port(),
        }
        self.config = root / "imexd.cfg"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, **knobs: object) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_IMEX_")}
        env["FAKE_IMEX_HOSTS_FILE"] = str(self.root / "hosts")
        env.update({k: str(v) for k, v in knobs.items()})
        proc = subprocess.Popen(
            [str(self.bins["nvidia-imex"]), "-c", str(self.config)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def imex(tmp_path: Path) -> Iterator[Imex]:
    daemon = Imex(tmp_path)
    try:
        yield daemon
    finally:
        daemon.stop_all()


async def states_until(imex: Imex, final: str, timeout: float = 8.0) -> list[str]:
    """Distinct states seen, polling quickly, until `final` shows."""
    seen: list[str] = []

    async def reached() -> bool:
        state = await query_state(imex.ctl, str(imex.config))
        if not seen or seen[-1] != state:
            seen.append(state)
        return state == final

    try:
        await eventually_async(reached, final, timeout=timeout, interval=0.03)
    except AssertionError:
        pytest.fail(f"no {final} within {timeout}s; saw {seen}")
    return seen


def test_is_ready_needs_an_exact_line():
    assert is_ready("READY\n") and is_ready("READY") and is_ready("warning: x\nREADY\n")
    assert not is_ready("NOT_READY\n") and not is_ready("") and not is_ready("READY_SOON")
    assert not is_ready("INITIALIZING\n")


def test_starting_then_ready_and_check(imex, capsys):
    imex.start(FAKE_IMEX_START_DELAY=0.6, FAKE_IMEX_HOLD_STATE="INITIALIZING")
    seen = run(states_until(imex, "READY"))
    assert "INITIALIZING" in seen and set(seen) <= {"UNAVAILABLE", "INITIALIZING", "READY"}
    assert check_main(imex.ctl, str(imex.config)) == 0
    assert capsys.readouterr().out == ""


def test_never_ready(imex, capsys):
    imex.start(FAKE_IMEX_NEVER_READY=1, FAKE_IMEX_HOLD_STATE="WAITING_FOR_RECOVERY")
    seen = run(states_until(imex, "WAITING_FOR_RECOVERY"))
    assert "READY" not in seen
    assert check_main(imex.ctl, str(imex.config)) == 1
    assert capsys.readouterr().out == "Error: IMEX daemon not ready: WAITING_FOR_RECOVERY\n"


def test_not_running_is_unavailable(imex, capsys):
    assert run(query_state(imex.ctl, str(imex.config))) == "UNAVAILABLE"
    assert check_main(imex.ctl, str(imex.config)) == 1
    captured = capsys.readouterr()
    assert captured.out == "Error: IMEX daemon not ready: UNAVAILABLE\n"
    assert "cannot connect" in captured.err


def test_missing_tool_or_config(imex, tmp_path, capsys):
    missing_tool = str(tmp_path / "no-such-ctl")
    assert run(query_state(missing_tool, str(imex.config))) == "UNAVAILABLE"
    missing_cfg = str(tmp_path / "absent.cfg")
    assert run(query_state(imex.ctl, missing_cfg)) == "UNAVAILABLE"
    assert check_main(imex.ctl, missing_cfg) == 1
    assert capsys.readouterr().out == (
        f"Error: IMEX daemon check failed: config file {missing_cfg} does not exist\n"
    )


def test_poller_reports_transitions_only(imex):
    events: list[tuple[bool, str]] = []
    polls = 0

    async def on_change(ready: bool, state: str) -> None:
        events.append((ready, state))

    def on_poll(ready: bool, state: str) -> None:
        nonlocal polls
        polls += 1

    async def more_polls(n: int) -> None:
        """Until the poller has polled `n` more times (each could have reported a change)."""
        target = polls + n
        await eventually_async(lambda: polls >= target, f"{n} more polls", timeout=10)

    async def scenario() -> None:
        poller = ReadinessPoller(
            partial(query_state, imex.ctl, str(imex.config)),
            on_change,
            interval=0.05,
            on_poll=on_poll,
        )
        task = asyncio.create_task(poller.run())
        try:
            await eventually_async(lambda: events, "the first report")
            proc = imex.start(FAKE_IMEX_START_DELAY=0.3)
            await eventually_async(lambda: len(events) >= 2, "READY reported")
            assert poller.ready is True and poller.state == "READY"
            await more_polls(2)  # still READY: no further calls
            assert len(events) == 2
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 5)
            await eventually_async(lambda: len(events) >= 3, "NotReady reported")
            await more_polls(2)  # still not READY: no further calls
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    run(scenario())
    assert [ready for ready, _ in events] == [False, True, False]
    assert events[1] == (True, "READY") and events[2][1] in ("SHUTTING_DOWN", "UNAVAILABLE")


def test_poller_retries_a_failed_report_and_survives_query_errors():
    answers = iter(["INITIALIZING", "READY", "READY", RuntimeError("boom"), "READY"])
    calls: list[tuple[bool, str]] = []
    failures = [True]  # the first report of READY fails (e.g. entry not listed yet)

    async def query() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def on_change(ready: bool, state: str) -> None:
        calls.append((ready, state))
        if ready and failures:
            failures.pop()
            raise RuntimeError("daemon info not yet listed")

    async def scenario() -> list[bool]:
        poller = ReadinessPoller(query, on_change, interval=0, failures_to_not_ready=1)
        return [await poller.poll_once() for _ in range(5)]

    assert run(scenario()) == [False, True, True, False, True]
    assert calls == [
        (False, "INITIALIZING"),
        (True, "READY"),  # failed: retried on the next poll
        (True, "READY"),
        (False, "UNAVAILABLE"),
        (True, "READY"),
    ]


def test_poller_hysteresis_holds_ready_through_isolated_failures():
    """READY at once; NotReady only after three polls in a row were not READY, and at once
    after mark_down() (IMEX exited)."""
    answers = iter(["INITIALIZING", "READY", "UNAVAILABLE", "READY", "UNAVAILABLE",
                    "UNAVAILABLE", "READY", "UNAVAILABLE", "UNAVAILABLE", "UNAVAILABLE",
                    "READY", "SHUTTING_DOWN", "READY"])
    calls: list[tuple[bool, str]] = []
    polled: list[bool] = []

    async def query() -> str:
        return next(answers)

    async def on_change(ready: bool, state: str) -> None:
        calls.append((ready, state))

    async def scenario() -> list[bool]:
        poller = ReadinessPoller(query, on_change, interval=0,
                                 on_poll=lambda r, s: polled.append(r))
        out = [await poller.poll_once() for _ in range(11)]
        poller.mark_down()
        out += [await poller.poll_once() for _ in range(2)]
        return out

    reported = run(scenario())
    assert reported == [False, True, True, True, True, True, True, True, True, False,
                        True, False, True]
    assert polled == reported
    assert calls == [(False, "INITIALIZING"), (True, "READY"), (False, "UNAVAILABLE"),
                     (True, "READY"), (False, "SHUTTING_DOWN"), (True, "READY")]


def test_poller_refuses_a_threshold_below_one():
    async def query() -> str:
        return "READY"

    async def on_change(ready: bool, state: str) -> None:
        return None

    with pytest.raises(ValueError, match="at least 1"):
        ReadinessPoller(query, on_change, failures_to_not_ready=0)


def test_poller_polls_every_interval_and_at_once_when_poked():
    """On the virtual clock: the interval is exact, and poke() or mark_down() polls now."""
    polled_at: list[float] = []
    answers = iter(["READY"] * 4 + ["UNAVAILABLE"] * 3)

    async def query() -> str:
        polled_at.append(asyncio.get_running_loop().time())
        return next(answers)

    async def on_change(ready: bool, state: str) -> None:
        return None

    async def scenario() -> None:
        poller = ReadinessPoller(query, on_change, interval=30)
        task = asyncio.create_task(poller.run())
        try:
            await eventually_async(lambda: len(polled_at) == 3, "three polls", timeout=90)
            poller.poke()
            await eventually_async(lambda: len(polled_at) == 4, "the poked poll", timeout=1)
            await eventually_async(lambda: len(polled_at) == 5, "the next poll", timeout=40)
            assert poller.ready is True  # one failure: held READY
            poller.mark_down()
            await eventually_async(lambda: poller.ready is False, "NotReady", timeout=1)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    run_virtual(scenario())
    gaps = [b - a for a, b in itertools.pairwise(polled_at)]
    assert gaps[:2] == pytest.approx([30, 30])
    assert gaps[2] < 1 and gaps[3] == pytest.approx(30) and gaps[4] < 1
