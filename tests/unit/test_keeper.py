"""agent/keeper.py: the backoff, and the keeper as a real process (it installs signal
handlers and becomes a child subreaper, so it never runs inside the test process) keeping
a shell-script "agent" running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from eventually import eventually

from agent.cli import main
from agent.keeper import Backoff

BIN = Path(sys.executable).parent


# --- Backoff -------------------------------------------------------------------------------


def test_backoff_doubles_from_initial_to_the_maximum():
    backoff = Backoff(initial=1.0, maximum=30.0, stable_after=10.0)
    assert [backoff.next(0.5) for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff.failures == 7


def test_a_stable_run_restarts_at_once_and_resets_the_backoff():
    backoff = Backoff(initial=0.5, maximum=8.0, stable_after=10.0)
    assert [backoff.next(1.0) for _ in range(3)] == [0.5, 1.0, 2.0]
    assert backoff.next(10.0) == 0.0  # exactly stable_after counts as stable
    assert backoff.failures == 0
    assert backoff.next(9.99) == 0.5


def test_backoff_defaults_and_a_zero_initial_delay():
    assert Backoff().next(0.0) == 1.0
    fast = Backoff(initial=0.0, maximum=5.0)
    assert [fast.next(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]


def test_many_quick_exits_stay_at_the_maximum():
    """An agent that keeps failing (about 8.5 hours at a 30 s maximum) still gets the
    maximum delay; ImexProcess.next_delay caps its exponent for the same reason."""
    backoff = Backoff(initial=1.0, maximum=30.0)
    delays = [backoff.next(0.0) for _ in range(1100)]
    assert delays[-1] == 30.0


# --- the keeper process ----------------------------------------------------------------------


KEEPER = (
    "import logging, sys\n"
    "from agent.keeper import Backoff, Keeper\n"
    "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
    "sys.exit(Keeper(sys.argv[1:], Backoff(initial=0.05, maximum=0.2, stable_after=60)).run())\n"
)


def agent_script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "agent.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


class Keeper:
    """`python -c KEEPER agent.sh`, its stderr in a file."""

    def __init__(self, tmp_path: Path, script: Path) -> None:
        self.log = tmp_path / "keeper.log"
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", KEEPER, str(script)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=err, cwd=tmp_path)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.log.read_text()

    def close(self) -> None:
        """Whatever is still running below the keeper, then the keeper."""
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


@pytest.fixture
def keepers(tmp_path: Path) -> Iterator[list[Keeper]]:
    started: list[Keeper] = []
    try:
        yield started
    finally:
        for keeper in started:
            keeper.close()


def start(keepers: list[Keeper], tmp_path: Path, body: str) -> Keeper:
    keeper = Keeper(tmp_path, agent_script(tmp_path, body))
    keepers.append(keeper)
    return keeper


def test_an_agent_that_exits_is_started_again(tmp_path, keepers):
    starts = tmp_path / "starts"
    keeper = start(keepers, tmp_path, f"echo $$ >> {starts}\nexit 3\n")
    eventually(lambda: len(lines(starts)) >= 3, "three starts")
    assert len(set(lines(starts))) == len(lines(starts))  # a new process each time
    # The keeper logs a start after spawning, so the agent may have written first.
    eventually(lambda: "(start 3)" in keeper.text(), "the keeper's third start logged")
    assert "agent exited (exit status 3); starting it again in 0.1s" in keeper.text()
    assert keeper.proc.poll() is None  # the keeper itself keeps running
    keeper.proc.send_signal(signal.SIGTERM)
    assert keeper.proc.wait(30) == 0


def test_an_orphan_the_agent_leaves_is_reparented_to_the_keeper_and_reaped(tmp_path, keepers):
    """The first agent starts a long-lived child in its own session (as nvidia-imex is
    started in agent placement) and dies; later agents just run."""
    orphan_pid = tmp_path / "orphan.pid"
    up = tmp_path / "up"
    keeper = start(keepers, tmp_path, (
        f"if [ ! -e {orphan_pid} ]; then\n"
        f"  setsid sleep 1000 </dev/null >/dev/null 2>&1 &\n"
        f"  echo $! > {orphan_pid}.tmp && mv {orphan_pid}.tmp {orphan_pid}\n"
        "  exit 1\n"
        "fi\n"
        f"echo $$ >> {up}\n"
        "exec sleep 1000\n"))
    eventually(lambda: lines(up), "the second agent up")
    pid = int(lines(orphan_pid)[0])
    orphan = psutil.Process(pid)
    assert orphan.ppid() == keeper.pid  # not init: the keeper is a child subreaper
    assert orphan.name() == "sleep"
    orphan.kill()

    def gone() -> bool:
        try:
            return psutil.Process(pid).create_time() != orphan.create_time()
        except psutil.NoSuchProcess:
            return True
    eventually(gone, "the orphan reaped (not left a zombie)")
    eventually(lambda: f"keeper: reaped pid {pid}" in keeper.text(), "the reap logged")
    assert len(lines(up)) == 1  # reaping an orphan is not an agent exit


def test_sigterm_reaches_the_agent_and_the_keeper_exits_with_its_status(tmp_path, keepers):
    events = tmp_path / "events"
    keeper = start(keepers, tmp_path, (
        f"trap 'kill $! 2>/dev/null; echo TERM >> {events}; exit 7' TERM\n"
        f"echo up >> {events}\n"
        "sleep 1000 &\n"
        "wait\n"))
    eventually(lambda: lines(events) == ["up"], "the agent up with its trap set")
    keeper.proc.send_signal(signal.SIGTERM)
    assert keeper.proc.wait(30) == 7
    assert lines(events) == ["up", "TERM"]  # got the signal, and was not started again
    assert "agent exited (exit status 7) after signal 15: exiting" in keeper.text()


def test_sigint_and_sighup_are_forwarded_too(tmp_path, keepers):
    events = tmp_path / "events"
    keeper = start(keepers, tmp_path, (
        f"trap 'echo HUP >> {events}; exit 0' HUP\n"
        f"echo up >> {events}\n"
        "while :; do sleep 0.05; done\n"))
    eventually(lambda: lines(events) == ["up"], "the agent up with its trap set")
    keeper.proc.send_signal(signal.SIGHUP)
    assert keeper.proc.wait(30) == 0
    assert lines(events) == ["up", "HUP"]


def test_a_stop_signal_during_the_backoff_ends_the_keeper(tmp_path, keepers):
    """The agent crash-loops; SIGTERM while the keeper waits to restart it ends the keeper
    at once, without another start."""
    starts = tmp_path / "starts"
    keeper = start(keepers, tmp_path, f"echo $$ >> {starts}\nexit 1\n")
    eventually(lambda: "starting it again in 0.2s" in keeper.text(), "at the maximum delay")
    keeper.proc.send_signal(signal.SIGTERM)
    assert keeper.proc.wait(30) == 0
    count = len(lines(starts))
    assert keeper.text().count("agent started") in (count, count + 1)


def test_an_agent_killed_by_a_signal_after_sigterm_is_a_clean_exit(tmp_path, keepers):
    events = tmp_path / "events"
    keeper = start(keepers, tmp_path, f"echo up >> {events}\nexec sleep 1000\n")
    eventually(lambda: lines(events) == ["up"], "up")
    keeper.proc.send_signal(signal.SIGTERM)  # sleep dies of it
    assert keeper.proc.wait(30) == 0
    assert "killed by signal 15" in keeper.text()


# --- the CLI ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "got"), [
    ([], "nothing"),
    (["--"], "nothing"),
    (["daemon", "run"], "['daemon']"),
    (["--restart-delay", "1", "diagnose"], "['diagnose']"),
])
def test_keep_refuses_anything_but_the_plugin(capsys, args, got):
    assert main(["keep", *args]) == 2
    err = capsys.readouterr().err
    assert f"compute-domain-agent keep: expected `plugin` and its flags, got {got}" in err


def test_keep_refuses_a_delay_above_its_maximum(capsys):
    assert main(["keep", "--restart-delay", "5s", "--max-restart-delay", "1s", "plugin"]) == 2
    assert "need 0 <= --restart-delay <= --max-restart-delay" in capsys.readouterr().err


def test_the_keep_command_keeps_the_real_plugin_running(tmp_path):
    """`compute-domain-agent keep plugin` runs the same program's plugin: one that fails
    at once (no node name) is started again, each time as a new process."""
    log = tmp_path / "keeper.log"
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [BIN / "compute-domain-agent", "keep", "--restart-delay", "10ms",
             "--max-restart-delay", "20ms", "plugin"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        eventually(lambda: "(start 2)" in log.read_text(), "the plugin started twice",
                   timeout=60)
        text = log.read_text()
        assert "the following arguments are required: --node-name" in text
        assert "agent exited (exit status 2); starting it again" in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) in (0, 2)  # the plugin run then, or none (between runs)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
