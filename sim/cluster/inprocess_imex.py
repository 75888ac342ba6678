"""The fake `nvidia-imex` and `nvidia-imex-ctl` as tasks of the simulated cluster's process
(in-process mode): the child the daemon's `ImexProcess` supervises, the launcher that makes
it, and the `-q` queries the readiness probe sends, all on the event loop instead of as
processes. The fake's own code does the work; only the process boundary is replaced."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import logging
import signal
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final, cast

from agent.daemon.process import ImexChild
from sim.cluster.cpumeter import SIM, as_sim, run_as
from sim.fakeimex import ctl as fake_ctl
from sim.fakeimex.daemon import build as build_fake_imex
from sim.fakeimex.imexd import FakeImex
from sim.fakeimex.protocol import MAX_LINE, ProtocolError, decode, encode

log = logging.getLogger(__name__)

IMEX_BINARY: Final = "nvidia-imex"
# Synthetic pids of in-process IMEX daemons: above Linux's pid_max, never a real process.
_FIRST_PID: Final = 1 << 22
# What an in-process container or daemon "killed by SIGKILL" exits with (as asyncio
# reports a process killed by a signal).
KILLED: Final = -signal.SIGKILL


class _LogPipe:
    """The write end of an in-process child's stdout: ImexLog writes lines, the supervisor's
    forwarder reads them from the StreamReader."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.closed = False

    def write(self, text: str) -> int:
        if not self.closed:
            self.reader.feed_data(text.encode("utf-8", errors="replace"))
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.reader.feed_eof()


class InProcessImexChild:
    """One fake `nvidia-imex` task, shaped like the process `ImexProcess` supervises."""

    def __init__(self, pid: int, command: Sequence[str], limit: int) -> None:
        self.pid = pid
        self.command = list(command)
        self.stdout: asyncio.StreamReader | None = asyncio.StreamReader(limit=limit)
        self.stderr: asyncio.StreamReader | None = None
        self.returncode: int | None = None
        self.daemon: FakeImex | None = None
        self._pipe = _LogPipe(self.stdout)
        self._exit_code: int | None = None  # set when killed or crashed
        self._task: asyncio.Task[None] | None = None
        self._done = asyncio.Event()

    def start(self, env: Mapping[str, str]) -> None:
        try:
            built = build_fake_imex(
                self.command[1:], env, cast(IO[str], self._pipe), can_fork=False
            )
        except SystemExit as exc:  # argparse usage error (it printed to our stderr)
            built = exc.code if isinstance(exc.code, int) else 2
        if isinstance(built, int):
            self._finish(built)
            return
        built.exit_now = self._crash
        self.daemon = built
        self._task = asyncio.get_running_loop().create_task(
            as_sim(self._run(built)), name=f"fake-imex-{self.pid}"
        )

    async def _run(self, daemon: FakeImex) -> None:
        try:
            code = await daemon.run(signals=False)
        except asyncio.CancelledError:
            code = self._exit_code if self._exit_code is not None else KILLED
        except Exception as exc:  # a bug in the fake: an "uncaught exception" exit
            self._pipe.write(f"fake nvidia-imex failed: {exc!r}\n")
            code = 1
        self._finish(code)

    def _finish(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._pipe.close()
            self._done.set()

    def _crash(self, code: int) -> None:
        """FAKE_IMEX_CRASH_AFTER: what os._exit does to the process."""
        self._end(code)

    def _end(self, code: int) -> None:
        if self.returncode is not None or self._exit_code is not None:
            return
        self._exit_code = code
        if self.daemon is not None:
            self.daemon.abort()
        if self._task is not None:
            self._task.cancel()

    async def wait(self) -> int:
        await self._done.wait()
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None or self._exit_code is not None:
            raise ProcessLookupError(f"in-process nvidia-imex {self.pid} has exited")
        if sig == signal.SIGKILL:
            self._end(KILLED)
        elif self.daemon is not None:
            self.daemon.deliver(sig)

    def kill_group(self) -> None:
        self._end(KILLED)

    def listens(self, ports: set[int], addresses: frozenset[str] | None) -> bool:
        """Whether it listens on one of `ports` at one of `addresses` or a wildcard (None:
        anywhere), as `agent.daemon.process.find_stray` judges a process."""
        daemon = self.daemon
        if daemon is None or self.returncode is not None:
            return False
        return any(
            port in ports
            and (addresses is None or ip in addresses or ip in ("0.0.0.0", "::"))
            for ip, port in daemon.listening()
        )


class InProcessImexLauncher:
    """`ImexLauncher` for the whole simulated machine: fake IMEX daemons as tasks, and the
    stray search among them (the machine's "process table")."""

    def __init__(self) -> None:
        self._pids = itertools.count(_FIRST_PID)
        self.children: dict[int, InProcessImexChild] = {}
        self.recorded: dict[str, int] = {}  # domain directory -> pid (agent placement)

    def detached(self, directory: Path) -> InProcessDetached:
        """The launcher of one domain's IMEX in agent placement (`agent.daemon.detached`):
        a stopped in-process agent leaves its fake IMEX running here, and the next agent
        of that node adopts it."""
        return InProcessDetached(self, str(directory))

    async def spawn(
        self, command: Sequence[str], env: Mapping[str, str] | None, limit: int
    ) -> ImexChild:
        if Path(command[0]).name != IMEX_BINARY:
            raise FileNotFoundError(f"in-process: no program {command[0]!r} (only {IMEX_BINARY})")
        child = InProcessImexChild(next(self._pids), command, limit)
        self.children[child.pid] = child
        child.start(env if env is not None else {})
        asyncio.get_running_loop().create_task(self._forget(child))
        return child

    async def _forget(self, child: InProcessImexChild) -> None:
        await child.wait()
        self.children.pop(child.pid, None)

    async def kill_stray(
        self,
        binary_name: str,
        *,
        ports: Iterable[int],
        addresses: Iterable[str] | None,
        exclude: Iterable[int] = (),
        grace: float = 5.0,
    ) -> list[int]:
        wanted = set(ports)
        only = frozenset(addresses) if addresses is not None else None
        skip = set(exclude)
        strays = [
            c
            for c in self.children.values()
            if Path(c.command[0]).name == Path(binary_name).name and c.listens(wanted, only)
            and c.pid not in skip
        ]
        for child in strays:
            log.warning("Terminating stray %s pid %d holding our ports", binary_name, child.pid)
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
        for child in strays:
            try:
                async with asyncio.timeout(grace):
                    await child.wait()
            except TimeoutError:
                child.kill_group()
                await child.wait()
        return [c.pid for c in strays]

    async def stop_all(self, grace: float = 5.0) -> None:
        """End every daemon still running (the machine shuts down)."""
        children = list(self.children.values())
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                async with asyncio.timeout(grace):
                    await child.wait()
            except TimeoutError:
                child.kill_group()
                await child.wait()


class InProcessDetached:
    """`AdoptingLauncher` over the machine's fake IMEX tasks, recorded by domain directory."""

    def __init__(self, machine: InProcessImexLauncher, key: str) -> None:
        self._machine = machine
        self._key = key

    async def spawn(
        self, command: Sequence[str], env: Mapping[str, str] | None, limit: int
    ) -> ImexChild:
        child = await self._machine.spawn(command, env, limit)
        self._machine.recorded[self._key] = child.pid
        return child

    async def adopt(self, command: Sequence[str]) -> ImexChild | None:
        child = self._machine.children.get(self._machine.recorded.get(self._key, 0))
        if child is None or child.returncode is not None or child.command != list(command):
            self.forget()
            return None
        return child

    def forget(self) -> None:
        self._machine.recorded.pop(self._key, None)

    async def kill_stray(
        self, binary_name: str, *, ports: Iterable[int], addresses: Iterable[str] | None,
        exclude: Iterable[int] = (),
    ) -> list[int]:
        return await self._machine.kill_stray(binary_name, ports=ports, addresses=addresses,
                                              exclude=exclude)


# --------------------------------------------------------------------------------------
# nvidia-imex-ctl without a process


class InProcessCtl:
    """`CtlRunner`: the fake `nvidia-imex-ctl`'s own parsing, target resolution and output,
    with the one request/response exchange done on the event loop."""

    def __init__(self) -> None:
        self._parser = fake_ctl.make_parser()  # built once: parsing is per query

    async def __call__(self, argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
        # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that races the
        # answer, and the readiness poller calling this would never stop.
        async with asyncio.timeout(timeout):
            return await run_as(SIM, self._run(list(argv[1:])))

    async def _run(self, argv: list[str]) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stderr(err):  # argparse's usage message
                args = fake_ctl.parse(argv, self._parser)
        except SystemExit as exc:
            return (exc.code if isinstance(exc.code, int) else 2), "", err.getvalue()
        planned = fake_ctl.target_of(args, err)
        if isinstance(planned, int):
            return planned, "", err.getvalue()
        target, command = planned
        try:
            async with asyncio.timeout(args.timeout / 1000):
                response = await _request(target, command)
        except (OSError, ProtocolError, TimeoutError, ValueError) as exc:
            return fake_ctl.unreachable(target, exc, err), "", err.getvalue()
        code = fake_ctl.answer(args, response, out, err)
        return code, out.getvalue(), err.getvalue()


async def _request(target: fake_ctl.Target, command: str) -> dict[str, Any]:
    """`fake_ctl.request` on the event loop."""
    if target.unix:
        reader, writer = await asyncio.open_unix_connection(target.unix, limit=MAX_LINE)
    else:
        reader, writer = await asyncio.open_connection(target.host, target.port, limit=MAX_LINE)
    try:
        writer.write(encode({"cmd": command}))
        await writer.drain()
        data = await reader.readline()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if not data:
        raise ConnectionResetError("the daemon closed the connection without answering")
    return decode(data)


# --------------------------------------------------------------------------------------
# Daemon containers as tasks (the kubelet's executor)
