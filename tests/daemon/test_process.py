"""ImexProcess and stray detection against real processes: the fake IMEX and small scripts."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from eventually import eventually_async, run_virtual

from agent.daemon.process import SPAWN_SETTLE, ImexProcess, ImexStartError
from agent.daemon.strays import find_stray, kill_stray
from sim.fakeimex.install import install

ADDRESS = "127.0.1.21"


T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 15.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def fake_imex_config(root: Path, address: str) -> Path:
    """A one-node config shaped like the driver's template
    (agent/templates/compute-domain-daemon-config.tmpl.cfg)."""
    (root / "nodes.cfg").write_text(f"{address}\n")
    (root / "hosts").write_text("127.0.0.1\tlocalhost\n")
    values = {
        "LOG_LEVEL": 4,
        "LOG_FILE_NAME": "",
        "DAEMONIZE": 0,
        "SERVER_PORT": free_port(),
        "IMEX_NODE_CONFIG_FILE": root / "nodes.cfg",
        "IMEX_WAIT_FOR_QUORUM": "RECOVERY",
        "IMEX_CMD_ENABLED": 1,
        "IMEX_CMD_BIND_INTERFACE_IP": address,
        "IMEX_CMD_PORT": free_port(),
        "IMEX_NODE_DISCONNECTED_GRACE_TIME": -1,
    }
    path = root / "imexd.cfg"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def dead(pid: int) -> bool:
    """Gone, or a zombie left for init to reap (a grandchild is not ours to reap)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def no_children() -> bool:
    return psutil.Process().children(recursive=True) == []


@pytest.fixture
def bins(tmp_path: Path) -> dict[str, Path]:
    return install(tmp_path / "bin")


def read_state(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def test_fake_imex_start_reload_stop(tmp_path, bins, caplog):
    caplog.set_level(logging.INFO)
    cfg = fake_imex_config(tmp_path, ADDRESS)
    state_file = tmp_path / "state.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_IMEX_")}
    env.update(
        FAKE_IMEX_HOSTS_FILE=str(tmp_path / "hosts"),
        FAKE_IMEX_STATE_FILE=str(state_file),
        FAKE_IMEX_RELOAD_INTERVAL="0",
    )
    imex = ImexProcess([str(bins["nvidia-imex"]), "-c", str(cfg)], env=env, grace=5)

    async def scenario() -> int:
        assert not imex.running and imex.pid is None
        assert await imex.signal_reload() is False  # nothing to signal
        try:
            assert await imex.ensure_started() is True
            pid = imex.pid
            assert imex.running and pid is not None
            assert await imex.ensure_started() is False  # already running
            await eventually_async(lambda: read_state(state_file).get("state") == "READY", "READY")
            assert await imex.signal_reload() is True
            await eventually_async(
                lambda: read_state(state_file).get("reload_count") == 1, "reload"
            )
        finally:
            await imex.stop()
        await imex.stop()  # idempotent
        return pid

    pid = run(scenario())
    assert not imex.running and imex.last_exit == 0 and imex.restarts == 0
    assert not psutil.pid_exists(pid) and no_children()  # reaped, no zombie
    forwarded = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("nvidia-imex[")
    ]
    assert any(m.startswith(f"nvidia-imex[{pid}]: ") and "SIGUSR1" in m for m in forwarded)


def test_sigkill_escalation_for_a_child_ignoring_sigterm(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    child = script(tmp_path, "stubborn", "trap '' TERM\necho armed\nsleep 100\n")
    imex = ImexProcess([str(child)], grace=0.3, log_prefix="stubborn")

    async def scenario() -> list[int]:
        await imex.ensure_started()
        # The trap is set before the shell says `armed` and starts `sleep`.
        await eventually_async(lambda: re.search(r"stubborn\[\d+\]: armed", caplog.text),
                               "armed")
        await eventually_async(lambda: len(psutil.Process(imex.pid).children()) == 1, "sleep")
        grandchildren = [p.pid for p in psutil.Process(imex.pid).children()]
        started = time.monotonic()
        await imex.stop()
        assert 0.25 < time.monotonic() - started < 3
        return grandchildren

    grandchildren = run(scenario())
    assert imex.last_exit == -9 and not imex.running
    assert no_children() and all(dead(p) for p in grandchildren)


def test_crash_loop_backs_off_and_forwards_last_line(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    starts = tmp_path / "starts"
    child = script(
        tmp_path,
        "crashy",
        f'date +%s.%N >> {starts}\necho "bye $$"\nexit 3\n',
    )
    imex = ImexProcess(
        [str(child)],
        log_prefix="crashy",
        backoff_base=0.05,
        backoff_max=0.4,
        stable_after=10,
        rng=random.Random(7),
    )

    def exits() -> int:
        return sum("exited with code 3" in r.getMessage() for r in caplog.records)

    async def scenario() -> None:
        await imex.ensure_started()
        # Five runs and their exits: the watchdog now waits out its fourth back-off.
        await eventually_async(lambda: exits() >= 5, "five crashes")
        await imex.stop()

    run(scenario())
    times = [float(t) for t in starts.read_text().split()]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert imex.restarts >= 4 and len(times) == imex.restarts + 1, gaps
    assert imex.last_exit == 3 and no_children()
    assert all(0.03 < g < 0.4 + 0.3 for g in gaps), gaps
    assert all(b >= a * 0.75 for a, b in itertools.pairwise(gaps)), gaps
    assert gaps[2] > gaps[0] * 2, gaps
    messages = [r.getMessage() for r in caplog.records]
    byes = [m for m in messages if m.startswith("crashy[") and "bye" in m]
    assert len(byes) == len(times)
    assert all(re.fullmatch(r"crashy\[(\d+)\]: bye \1", m) for m in byes), byes
    assert sum("exited with code 3" in m for m in messages) == len(times)


def test_backoff_doubles_to_the_cap_and_resets_after_a_stable_run():
    class NoJitter(random.Random):
        def random(self) -> float:
            return 0.0

    imex = ImexProcess(["true"], backoff_base=0.5, backoff_max=3, stable_after=30, rng=NoJitter())
    assert [imex.next_delay(1.0) for _ in range(5)] == [0.5, 1, 2, 3, 3]
    assert imex.next_delay(30.0) == 0.5  # ran long enough: back to the base
    jittered = ImexProcess(["true"], backoff_base=1, rng=random.Random(3))
    assert all(0.8 <= jittered.next_delay(0.0) / 2**n <= 1.0 for n in range(5))


def test_ensure_started_does_not_defeat_the_backoff(tmp_path):
    child = script(tmp_path, "dies", "exit 2\n")
    imex = ImexProcess([str(child)], backoff_base=5, backoff_max=5)

    async def scenario() -> None:
        assert await imex.ensure_started() is True
        await eventually_async(lambda: imex.restart_pending, what="backoff")
        assert await imex.ensure_started() is False
        await imex.stop()
        assert not imex.restart_pending

    run(scenario())
    assert imex.last_exit == 2 and imex.restarts == 0 and no_children()


def test_output_forwarding_keeps_every_line(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    child = script(
        tmp_path,
        "chatty",
        'i=0\nwhile [ $i -lt 300 ]; do i=$((i+1)); echo "out $i"; done\n'
        "echo 'to stderr' >&2\nprintf 'no newline at the end'\n",
    )
    imex = ImexProcess([str(child)], log_prefix="chatty", backoff_base=5)

    async def scenario() -> None:
        await imex.ensure_started()  # the child may be done before `pid` can be read
        await eventually_async(lambda: imex.last_exit is not None, what="exit")
        await imex.stop()

    run(scenario())
    prefix = re.compile(r"^chatty\[\d+\]: ")
    lines = [prefix.sub("", r.getMessage()) for r in caplog.records
             if prefix.match(r.getMessage())]
    assert [x for x in lines if x.startswith("out ")] == [f"out {i}" for i in range(1, 301)]
    assert "to stderr" in lines and "no newline at the end" in lines


def test_restart_replaces_the_child(tmp_path):
    child = script(tmp_path, "idle", "exec sleep 100\n")
    imex = ImexProcess([str(child)], grace=2)

    async def scenario() -> tuple[int, int]:
        await imex.ensure_started()
        first = imex.pid
        await imex.restart()
        second = imex.pid
        await imex.stop()
        return first, second

    first, second = run(scenario())
    assert first != second and imex.restarts == 0 and imex.last_exit == -15
    assert no_children()


# --- strays ----------------------------------------------------------------------------------

LISTENER = """
import signal, socket, sys, time
if sys.argv[3] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen()
print("listening", flush=True)
time.sleep(60)
"""


@pytest.fixture
def listeners(tmp_path) -> Iterator[Any]:
    """Start python listeners, optionally under the name `nvidia-imex`; kill them after."""
    (tmp_path / "named").mkdir()
    imex_named = tmp_path / "named" / "nvidia-imex"
    imex_named.symlink_to(sys.executable)
    procs: list[subprocess.Popen[str]] = []

    def start(address: str, port: int, *, as_imex: bool, ignore_term: bool = False):
        exe = str(imex_named) if as_imex else sys.executable
        mode = "ignore-term" if ignore_term else "default"
        proc = subprocess.Popen(
            [exe, "-c", LISTENER, address, str(port), mode], stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "listening\n"
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_stray_found_by_name_and_port_and_killed(listeners, caplog):
    ours, other = free_port(), free_port()
    stray = listeners("127.0.1.22", ours, as_imex=True, ignore_term=True)
    same_port_not_imex = listeners("127.0.1.23", ours, as_imex=False)
    imex_elsewhere = listeners("127.0.1.22", other, as_imex=True)

    assert [p.pid for p in find_stray(ports=[ours])] == [stray.pid]
    assert find_stray("something-else", ports=[ours, other]) == []
    assert find_stray(ports=[ours], exclude=[stray.pid]) == []

    started = time.monotonic()
    assert run(kill_stray(ports=[ours], grace=0.3)) == [stray.pid]
    assert time.monotonic() - started < 3
    stray.wait(2)  # (already reaped by psutil, which waited for it: our child here)
    assert not psutil.pid_exists(stray.pid)
    assert "ignored SIGTERM for 0.3s: sending SIGKILL" in caplog.text
    assert same_port_not_imex.poll() is None and imex_elsewhere.poll() is None
    assert run(kill_stray(ports=[ours])) == []


def test_missing_binary_is_a_start_error(tmp_path):
    imex = ImexProcess([str(tmp_path / "nvidia-imex"), "-c", "x"])
    with pytest.raises(ImexStartError, match="cannot start"):
        run(imex.ensure_started())
    assert not imex.running
    run(imex.stop())  # still fine


def test_reloads_are_coalesced_to_one_per_interval():
    """A burst of peer changes costs one SIGUSR1 now and one at the end of the interval;
    a stop cancels the deferred one. On the virtual clock: the interval is exact."""
    sent: list[int] = []
    sent_at: list[float] = []

    class Child:
        stdout = stderr = None
        pid = 4242
        returncode: int | None = None

        def __init__(self) -> None:
            self._exited = asyncio.Event()

        async def wait(self) -> int:
            await self._exited.wait()
            return 0

        def send_signal(self, sig: int) -> None:
            sent.append(sig)
            sent_at.append(asyncio.get_running_loop().time())
            if sig == signal.SIGTERM:
                self.returncode = 0
                self._exited.set()

        def kill_group(self) -> None:
            self.send_signal(signal.SIGTERM)

    class Launcher:
        async def spawn(self, command, env, limit):
            return Child()

        async def kill_stray(self, binary_name, *, ports, addresses):
            return []

    imex = ImexProcess(["nvidia-imex"], launcher=Launcher(), reload_interval=0.3)

    async def scenario() -> None:
        await imex.ensure_started()
        started = asyncio.get_running_loop().time()
        assert await imex.signal_reload() is True  # a child just forked: deferred, not lost
        assert sent == []
        await eventually_async(lambda: len(sent) == 1, what="the SIGUSR1 after the spawn")
        assert sent_at[0] - started == pytest.approx(SPAWN_SETTLE)
        await asyncio.sleep(0.3)  # the interval since that one is over
        sent.clear()
        sent_at.clear()
        imex.reloads_sent = imex.reloads_coalesced = 0
        for _ in range(5):
            assert await imex.signal_reload() is True
        assert sent == [signal.SIGUSR1]
        await eventually_async(lambda: len(sent) == 2, what="the deferred SIGUSR1")
        assert sent == [signal.SIGUSR1, signal.SIGUSR1]
        assert sent_at[1] - sent_at[0] == pytest.approx(0.3)  # at the end of the interval
        assert (imex.reloads_sent, imex.reloads_coalesced) == (2, 4)
        assert await imex.signal_reload() is True  # within the interval again: deferred
        deferred = imex._child.reload_later if imex._child else None
        assert deferred is not None and not deferred.done()
        await imex.stop()
        assert deferred.cancelled()  # the stopped child gets no late SIGUSR1
        assert sent == [signal.SIGUSR1, signal.SIGUSR1, signal.SIGTERM]

    run_virtual(scenario())
