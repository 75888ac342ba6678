"""DetachedLauncher and ImexProcess adoption (agent placement) against real processes.

The child is a small Python script named `nvidia-imex` that says in its output (which goes
to the domain's log file) that it started, got SIGUSR1 or got SIGTERM. The children are
this test process's own, so each test reaps what it started (an unreaped child would stay
a zombie for the rest of the run)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from eventually import eventually, eventually_async

from agent.daemon.detached import (
    LOG_FILE,
    LOG_LIMIT,
    RECORD_FILE,
    UNKNOWN_EXIT,
    AdoptedChild,
    ChildRecord,
    DetachedLauncher,
)
from agent.daemon.process import ImexProcess, ImexStartError

T = TypeVar("T")
LIMIT = 1 << 20


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def fake_imex(tmp_path: Path, *, ignore_term: bool = False) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    path = bindir / "nvidia-imex"
    path.write_text(
        f"#!{sys.executable}\n"
        "import os, signal, sys\n"
        "def term(*_):\n"
        "    print('got SIGTERM', flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGUSR1, lambda *_: print('got SIGUSR1', flush=True))\n"
        f"signal.signal(signal.SIGTERM, {'signal.SIG_IGN' if ignore_term else 'term'})\n"
        "print('a line on stderr', file=sys.stderr, flush=True)\n"
        "print(f'started {os.getpid()}', flush=True)\n"
        "while True:\n"
        "    signal.pause()\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def domain(tmp_path: Path) -> Path:
    directory = tmp_path / "domain"
    directory.mkdir()
    return directory


@pytest.fixture
def command(tmp_path: Path) -> list[str]:
    return [str(fake_imex(tmp_path)), "-c", str(tmp_path / "imexd.cfg")]


def reaped(pid: int) -> bool:
    """Reap `pid` if it is our exited child; True once it is gone (reaped by us, or by
    asyncio's child watcher thread, which waits for every child asyncio started)."""
    try:
        got, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return got == pid


def dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def ours(tmp_path: Path) -> list[psutil.Process]:
    """Our children that run something under `tmp_path` (the fake IMEX)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE and any(
                    str(tmp_path) in arg for arg in proc.cmdline()):
                found.append(proc)
    return found


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    """Whatever a test left running is killed and reaped."""
    yield
    left = ours(tmp_path)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    pids = {p.pid for p in left} | {p.pid for p in psutil.Process().children() if dead(p.pid)}
    for pid in pids:
        eventually(lambda pid=pid: reaped(pid), f"pid {pid} reaped")


def log_text(directory: Path) -> str:
    try:
        return (directory / LOG_FILE).read_text()
    except FileNotFoundError:
        return ""


def started(directory: Path, pid: int) -> bool:
    return f"started {pid}\n" in log_text(directory)


# --- DetachedLauncher ----------------------------------------------------------------------


def test_spawn_records_the_child_and_its_output_goes_to_the_log(domain, command):
    async def scenario() -> int:
        child = await DetachedLauncher(domain).spawn(command, None, LIMIT)
        assert child.stdout is None and child.stderr is None  # no pipe to die with us
        await eventually_async(lambda: started(domain, child.pid), "the child's output")
        assert "a line on stderr\n" in log_text(domain)  # printed before `started`
        return child.pid

    pid = run(scenario())
    record_path = domain / RECORD_FILE
    assert stat.S_IMODE(record_path.stat().st_mode) == 0o600
    assert stat.S_IMODE((domain / LOG_FILE).stat().st_mode) == 0o600
    record = json.loads(record_path.read_text())
    proc = psutil.Process(pid)
    assert record == {"pid": pid, "createTime": proc.create_time(), "cmdline": command}
    assert DetachedLauncher(domain).record() == ChildRecord(pid, proc.create_time(),
                                                             tuple(command))
    # Its own session: a terminal's or the agent's process group signals do not reach it.
    assert os.getsid(pid) == pid != os.getsid(0)
    assert proc.is_running() and not dead(pid)  # the loop that started it is gone


def test_a_second_launcher_adopts_the_recorded_child(domain, command):
    async def scenario() -> None:
        child = await DetachedLauncher(domain).spawn(command, None, LIMIT)
        await eventually_async(lambda: started(domain, child.pid), "started")
        adopted = await DetachedLauncher(domain).adopt(command)
        assert isinstance(adopted, AdoptedChild)
        assert adopted.pid == child.pid and adopted.returncode is None
        adopted.send_signal(signal.SIGUSR1)
        await eventually_async(lambda: "got SIGUSR1\n" in log_text(domain), "signal delivered")
        assert (domain / RECORD_FILE).exists()  # adopting keeps the record
        adopted.send_signal(signal.SIGTERM)
        assert await adopted.wait() == UNKNOWN_EXIT
        assert await child.wait() == 0  # its parent (this loop) still learns the status

    run(scenario())
    assert log_text(domain).endswith("got SIGTERM\n")


def test_a_changed_command_is_not_adopted_and_the_record_is_forgotten(domain, command):
    async def scenario() -> int:
        child = await DetachedLauncher(domain).spawn(command, None, LIMIT)
        await eventually_async(lambda: started(domain, child.pid), "started")
        other = [*command[:-1], str(domain / "another.cfg")]
        assert await DetachedLauncher(domain).adopt(other) is None
        return child.pid

    pid = run(scenario())
    assert not (domain / RECORD_FILE).exists()
    assert not dead(pid)  # adopt() only declines: it signals nothing
    assert run(DetachedLauncher(domain).adopt(command)) is None  # the record is gone


def test_a_dead_child_is_not_adopted_and_the_record_is_forgotten(domain, command):
    async def scenario() -> None:
        child = await DetachedLauncher(domain).spawn(command, None, LIMIT)
        await eventually_async(lambda: started(domain, child.pid), "started")
        child.send_signal(signal.SIGKILL)
        assert await child.wait() == -signal.SIGKILL
        assert (domain / RECORD_FILE).exists()
        assert await DetachedLauncher(domain).adopt(command) is None

    run(scenario())
    assert not (domain / RECORD_FILE).exists()


def test_a_pid_that_now_runs_another_program_is_not_adopted(domain):
    """Same pid, same start time (an exec keeps both), but no longer our command."""
    command = ["/bin/sh", "-c", "exec sleep 1000"]

    async def scenario() -> None:
        child = await DetachedLauncher(domain).spawn(command, None, LIMIT)
        await eventually_async(lambda: psutil.Process(child.pid).cmdline() == ["sleep", "1000"],
                               "the shell exec'd into sleep")
        assert await DetachedLauncher(domain).adopt(command) is None
        child.send_signal(signal.SIGKILL)
        await child.wait()

    run(scenario())
    assert not (domain / RECORD_FILE).exists()


def test_a_reused_pid_is_not_adopted(domain, command):
    """A record whose pid runs our very command but started at another time (the pid was
    reused, e.g. after a reboot): not ours."""
    async def scenario() -> None:
        child = await DetachedLauncher(domain).spawn(command, None, LIMIT)
        await eventually_async(lambda: started(domain, child.pid), "started")
        real = psutil.Process(child.pid).create_time()
        (domain / RECORD_FILE).write_bytes(
            ChildRecord(child.pid, real - 5.0, tuple(command)).to_json())
        assert await DetachedLauncher(domain).adopt(command) is None
        assert not (domain / RECORD_FILE).exists()
        assert not dead(child.pid)
        child.send_signal(signal.SIGKILL)
        await child.wait()

    run(scenario())


@pytest.mark.parametrize("record", [b"", b"{", b'{"pid": 1, "createTime": 1, "cmdline": []}',
                                    b'{"pid": "7", "createTime": 1, "cmdline": ["x"]}'])
def test_an_unreadable_record_adopts_nothing(domain, command, record):
    (domain / RECORD_FILE).write_bytes(record)
    assert run(DetachedLauncher(domain).adopt(command)) is None


@pytest.mark.parametrize("victim_exists", [True, False])
def test_a_link_planted_at_the_log_path_is_refused(domain, command, tmp_path, victim_exists):
    victim = tmp_path / "victim"
    if victim_exists:
        victim.write_text("precious\n")
    (domain / LOG_FILE).symlink_to(victim)
    with pytest.raises(OSError):
        run(DetachedLauncher(domain).spawn(command, None, LIMIT))
    assert (victim.read_text() == "precious\n") if victim_exists else not victim.exists()
    assert not (domain / RECORD_FILE).exists()
    assert ours(tmp_path) == []  # nothing was started

    imex = ImexProcess(command, launcher=DetachedLauncher(domain))
    with pytest.raises(ImexStartError, match="cannot start"):
        run(imex.ensure_started())
    assert ours(tmp_path) == []


def test_the_log_is_appended_to_and_started_afresh_past_its_limit(domain, command):
    async def spawn_and_kill() -> int:
        child = await DetachedLauncher(domain).spawn(command, None, LIMIT)
        await eventually_async(lambda: started(domain, child.pid), "started")
        child.send_signal(signal.SIGKILL)
        await child.wait()
        return child.pid

    first = run(spawn_and_kill())
    second = run(spawn_and_kill())
    assert started(domain, first) and started(domain, second)  # appended, not truncated
    with (domain / LOG_FILE).open("r+b") as log:
        log.truncate(LOG_LIMIT + 1)  # sparse: costs no disk
    third = run(spawn_and_kill())
    old = domain / (LOG_FILE + ".1")
    assert old.stat().st_size == LOG_LIMIT + 1
    assert log_text(domain) == f"a line on stderr\nstarted {third}\n"


# --- AdoptedChild.wait --------------------------------------------------------------------


def test_waiting_for_an_adopted_child_ends_when_it_is_killed_from_outside(domain, command):
    async def scenario() -> None:
        child = await DetachedLauncher(domain).spawn(command, None, LIMIT)
        await eventually_async(lambda: started(domain, child.pid), "started")
        adopted = await DetachedLauncher(domain).adopt(command)
        assert adopted is not None
        waiting = asyncio.ensure_future(adopted.wait())
        for _ in range(5):  # let it reach its pidfd
            await asyncio.sleep(0)
        assert not waiting.done()
        os.kill(child.pid, signal.SIGKILL)  # not through the adopted child: from outside
        assert await waiting == UNKNOWN_EXIT
        assert adopted.returncode == UNKNOWN_EXIT
        with pytest.raises(ProcessLookupError):
            adopted.send_signal(signal.SIGTERM)  # never a signal to a dead (or reused) pid
        assert await child.wait() == -signal.SIGKILL

    run(scenario())


def test_an_unreaped_adopted_child_counts_as_exited(domain, command):
    """A child whose parent has not reaped it yet (a zombie, as under a slow reaper) has
    exited: wait() returns and signals are refused."""
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        eventually(lambda: psutil.Process(proc.pid).cmdline()[-2:] == command[1:], "started")
        (domain / RECORD_FILE).write_bytes(ChildRecord(
            proc.pid, psutil.Process(proc.pid).create_time(), tuple(command)).to_json())

        async def scenario() -> None:
            adopted = await DetachedLauncher(domain).adopt(command)
            assert adopted is not None and adopted.pid == proc.pid
            os.kill(proc.pid, signal.SIGKILL)
            assert await adopted.wait() == UNKNOWN_EXIT
            assert psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE  # still unreaped
            with pytest.raises(ProcessLookupError):
                adopted.send_signal(signal.SIGTERM)

        run(scenario())
    finally:
        proc.kill()
        proc.wait()


# --- ImexProcess over a DetachedLauncher ----------------------------------------------------


def test_detach_then_a_new_supervisor_adopts_and_stop_ends_it(domain, command):
    async def first() -> int:
        imex = ImexProcess(command, launcher=DetachedLauncher(domain), grace=5)
        assert await imex.adopt() is False  # nothing recorded yet
        assert await imex.ensure_started() is True
        pid = imex.pid
        assert pid is not None and not imex.adopted
        await eventually_async(lambda: started(domain, pid), "started")
        await imex.detach()
        assert not imex.running and imex.pid is None
        return pid

    pid = run(first())
    assert not dead(pid)
    assert "got SIGTERM" not in log_text(domain)  # detach signals nothing
    assert json.loads((domain / RECORD_FILE).read_text())["pid"] == pid

    async def second() -> None:
        imex = ImexProcess(command, launcher=DetachedLauncher(domain), grace=5,
                           reload_interval=0)
        assert await imex.adopt() is True
        assert imex.pid == pid and imex.running and imex.adopted
        assert await imex.ensure_started() is False  # adopted: nothing new started
        assert await imex.signal_reload() is True
        await eventually_async(lambda: "got SIGUSR1\n" in log_text(domain), "reload reached it")
        await imex.stop()
        assert not imex.running

    run(second())
    eventually(lambda: dead(pid), "the adopted child ended")
    assert log_text(domain).endswith("got SIGTERM\n")
    assert not (domain / RECORD_FILE).exists()
    assert run(DetachedLauncher(domain).adopt(command)) is None


def test_an_adopted_child_that_dies_is_started_again(domain, command):
    old = run(DetachedLauncher(domain).spawn(command, None, LIMIT)).pid
    eventually(lambda: started(domain, old), "started")
    crashes: list[int] = []

    async def scenario() -> int:
        imex = ImexProcess(command, launcher=DetachedLauncher(domain), grace=5,
                           backoff_base=0.05, on_crash=lambda code, *_: crashes.append(code))
        assert await imex.adopt() is True
        os.kill(old, signal.SIGKILL)
        await eventually_async(lambda: imex.running and imex.pid != old, "a new child")
        new = imex.pid
        assert new is not None and not imex.adopted
        assert imex.last_exit == UNKNOWN_EXIT and crashes == [UNKNOWN_EXIT]
        await eventually_async(lambda: started(domain, new), "the new child started")
        assert json.loads((domain / RECORD_FILE).read_text())["pid"] == new
        await imex.stop()
        return new

    new = run(scenario())
    assert dead(new) and not (domain / RECORD_FILE).exists()


def test_stop_escalates_to_sigkill_for_an_adopted_child_ignoring_sigterm(domain, tmp_path):
    command = [str(fake_imex(tmp_path, ignore_term=True)), "-c", str(tmp_path / "imexd.cfg")]
    pid = run(DetachedLauncher(domain).spawn(command, None, LIMIT)).pid
    eventually(lambda: started(domain, pid), "started")

    async def scenario() -> None:
        imex = ImexProcess(command, launcher=DetachedLauncher(domain), grace=0.5)
        assert await imex.adopt() is True
        await imex.stop()

    run(scenario())
    eventually(lambda: dead(pid), "killed")
    assert "got SIGTERM" not in log_text(domain)
    assert not (domain / RECORD_FILE).exists()
