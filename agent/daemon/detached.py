"""`nvidia-imex` children that outlive the agent that started them (agent placement).

When the node agent itself supervises IMEX, an agent restart (a crash, `kill -9`, an
upgrade under systemd) must not take the domain down on this node: peers would see the
node leave and come back, and workloads would lose their IMEX imports. So the child runs
in its own session, its output goes to a log file instead of a pipe (a pipe's reader dies
with the agent, and the next write would kill IMEX with SIGPIPE), and its pid, start time
and command line are recorded in the domain's directory. The next agent adopts the child
if all three still match (psutil), so a reused pid is never mistaken for it, and watches
it through a pidfd, since it is no longer its parent: the exit status of an adopted
child is not known (reported as -1).

Whoever is the child's parent after the agent died reaps it: systemd (PID 1) under the
systemd unit, the keeper (agent/keeper.py, a child subreaper) in the DaemonSet.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from agent.daemon.process import ImexChild, SubprocessChild
from agent.daemon.strays import kill_stray
from cdi.atomic import NotRegularFileError, atomic_write, read_file

log = logging.getLogger(__name__)

RECORD_FILE = "nvidia-imex.json"
LOG_FILE = "nvidia-imex.log"
# The log is started afresh (the old one kept as .1) when it grows past this at a start.
LOG_LIMIT = 16 << 20
UNKNOWN_EXIT = -1
_POLL_S = 0.5  # where no pidfd is available (kernel < 5.3)


@dataclass(frozen=True)
class ChildRecord:
    pid: int
    create_time: float
    cmdline: tuple[str, ...]

    def to_json(self) -> bytes:
        return json.dumps({"pid": self.pid, "createTime": self.create_time,
                           "cmdline": list(self.cmdline)}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ChildRecord | None:
        try:
            data = json.loads(raw)
            pid, created, cmdline = data["pid"], data["createTime"], data["cmdline"]
        except (ValueError, KeyError, TypeError):
            return None
        if not (isinstance(pid, int) and pid > 1 and isinstance(created, int | float)
                and isinstance(cmdline, list) and all(isinstance(a, str) for a in cmdline)):
            return None
        return cls(pid, float(created), tuple(cmdline))


class AdoptedChild:
    """A child an earlier agent started. Every signal first checks that the pid is still
    that process (psutil compares its start time), so a reused pid is never signalled."""

    def __init__(self, proc: psutil.Process) -> None:
        self._proc = proc
        self._code: int | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        if self._code is None and not _alive(self._proc):
            self._code = UNKNOWN_EXIT
        return self._code

    async def wait(self) -> int:
        if self.returncode is None:
            await _exited(self._proc)
            self._code = UNKNOWN_EXIT
        return UNKNOWN_EXIT

    def send_signal(self, sig: int) -> None:
        if not _alive(self._proc):
            raise ProcessLookupError(self.pid)
        self._proc.send_signal(sig)

    def kill_group(self) -> None:
        if _alive(self._proc):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)


def _runs(cmdline: tuple[str, ...], command: tuple[str, ...]) -> bool:
    """Whether a process whose /proc cmdline is `cmdline` runs `command`: the same
    arguments at the end (a launcher script may put an interpreter in front), and the
    program's name in front of them. With the start time checked as well, a reused pid
    cannot pass."""
    args = command[1:]
    head = cmdline[:len(cmdline) - len(args)]
    return (len(cmdline) > len(args) and cmdline[len(head):] == args
            and any(Path(part).name == Path(command[0]).name for part in head))


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def _exited(proc: psutil.Process) -> None:
    """Until `proc` (not our child) has exited: a pidfd becomes readable then."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (OSError, AttributeError):
        while _alive(proc):
            await asyncio.sleep(_POLL_S)
        return
    try:
        if not _alive(proc):  # the pid may have been reused between the check and the open
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not done.done():
                done.set_result(None)

        loop.add_reader(fd, readable)
        try:
            while _alive(proc):  # a zombie's pidfd is readable: confirm the exit
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5.0):
                        await asyncio.shield(done)
                if done.done() and _alive(proc):
                    await asyncio.sleep(_POLL_S)
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


class DetachedLauncher:
    """Starts, records and adopts the `nvidia-imex` of one domain; `directory` is that
    domain's directory (private to the agent in agent placement)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @property
    def record_path(self) -> Path:
        return self.directory / RECORD_FILE

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_FILE

    async def spawn(
        self, command: Sequence[str], env: Mapping[str, str] | None, limit: int
    ) -> ImexChild:
        fd = self._open_log()
        try:
            proc = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.DEVNULL, stdout=fd, stderr=fd, env=env,
                start_new_session=True)
        finally:
            os.close(fd)
        try:
            created = psutil.Process(proc.pid).create_time()
        except psutil.Error:  # already gone: nothing to record, its exit is reported
            return SubprocessChild(proc)
        atomic_write(self.record_path,
                     ChildRecord(proc.pid, created, tuple(command)).to_json(), 0o600)
        log.info("nvidia-imex pid %d logs to %s", proc.pid, self.log_path)
        return SubprocessChild(proc)

    def _open_log(self) -> int:
        """The log, appended to; a link planted in its place is refused, not followed."""
        path = self.log_path
        with contextlib.suppress(FileNotFoundError):
            if path.lstat().st_size > LOG_LIMIT:
                path.replace(path.with_name(LOG_FILE + ".1"))
        flags = (os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
                 | os.O_NONBLOCK)  # a FIFO planted there must not block the open
        fd = os.open(path, flags, 0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotRegularFileError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        return fd

    def record(self) -> ChildRecord | None:
        try:
            return ChildRecord.from_json(read_file(self.record_path))
        except (FileNotFoundError, NotRegularFileError):
            return None

    async def adopt(self, command: Sequence[str]) -> ImexChild | None:
        record = self.record()
        if record is None:
            return None
        try:
            proc = psutil.Process(record.pid)
            same = (abs(proc.create_time() - record.create_time) < 0.01
                    and record.cmdline == tuple(command)
                    and _runs(tuple(proc.cmdline()), record.cmdline))
        except psutil.Error:
            same = False
        if not same or not _alive(proc):
            log.info("recorded nvidia-imex pid %d is gone (or another process now): "
                     "starting a new one", record.pid)
            self.forget()
            return None
        return AdoptedChild(proc)

    def forget(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.record_path.unlink()

    async def kill_stray(
        self, binary_name: str, *, ports: Iterable[int], addresses: Iterable[str] | None,
        exclude: Iterable[int] = (),
    ) -> list[int]:
        return await kill_stray(binary_name, ports=ports, addresses=addresses, exclude=exclude)
