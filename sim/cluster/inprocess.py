"""The simulated cluster's scale mode: agents, daemons and fake IMEX as tasks of one process.

One process per node agent, per IMEX daemon container and per fake `nvidia-imex` (plus one
`nvidia-imex-ctl` process per readiness query) does not fit hundreds of nodes on a small
machine. With `ClusterSpec(in_process=True)` the same driver code runs on the sim's event
loop instead; only the process boundary is replaced, through hooks the driver exposes:

- node agents: `agent.plugin.app.run` with a stop event instead of signal handlers, its
  flags parsed by the real command line (`agent.cli.add_commands(environ=...)`) from the
  argv and environment the agent process would get (`InProcessAgent`);
- daemon containers: the kubelet's `ContainerExecutor` hook (`InProcessExecutor`) runs
  `compute-domain-agent daemon run` as `agent.cli.run_daemon` and the exec probe
  `daemon check` as `agent.cli.check_daemon`, each given the container's env as a mapping;
  SIGTERM sets the daemon's stop event;
- fake `nvidia-imex`: the supervisor's `ImexLauncher` hook (`InProcessImexLauncher`) runs
  `sim.fakeimex`'s daemon as a task; signals go to its handlers, its log lines feed the
  stdout reader the supervisor forwards, and strays are found among the tasks;
- `nvidia-imex-ctl -q`: the `CtlRunner` hook (`InProcessCtl`) runs the fake tool's own
  parsing and printing with an asyncio exchange instead of a blocking socket.

Each agent's and daemon container's log records go to its own log file (the same files as
in process mode) through `LogRouter`, which tells them apart by context variable.

What does not carry over: nothing in-process can be SIGKILLed. Killing an agent or a daemon
container stops it gracefully (its cleanup runs); only the fake IMEX's `abort` drops its
sockets like a kill. Crash tests use the default process mode.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import io
import itertools
import logging
import signal
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final, cast

from agent import cli as agent_cli
from agent.daemon.process import ImexChild
from api import kube
from api.cli import program_parser
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
_KILLED: Final = -signal.SIGKILL
_PARSE_CACHE: Final = 4096
_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


# --------------------------------------------------------------------------------------
# Logs


class LogRouter(logging.Handler):
    """Writes the records of the driver's loggers to the log file of the in-process
    component they come from: each agent and daemon container runs in a context
    (`context(stream)`) naming its file. While installed, those loggers log at the agents'
    verbosity and do not propagate; a record from outside any such context (an informer
    thread, the sim itself) goes on to the root logger if it would have before."""

    def __init__(self, verbosity: int, loggers: Sequence[str] = ("agent", "api")) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(_FORMAT))
        self.var: contextvars.ContextVar[IO[str] | None] = contextvars.ContextVar(
            f"inprocess-log-{id(self)}", default=None
        )
        # What `_setup_logging` of the agent's command line would choose.
        self.level_for_loggers = (
            logging.DEBUG if verbosity >= 5 else logging.INFO if verbosity >= 1 else logging.WARNING
        )
        self.loggers = tuple(loggers)
        self._saved: dict[str, tuple[int, bool, int]] = {}  # level, propagate, effective

    def install(self) -> None:
        for name in self.loggers:
            logger = logging.getLogger(name)
            self._saved[name] = (logger.level, logger.propagate, logger.getEffectiveLevel())
            logger.setLevel(self.level_for_loggers)
            logger.propagate = False
            logger.addHandler(self)

    def uninstall(self) -> None:
        for name, (level, propagate, _) in self._saved.items():
            logger = logging.getLogger(name)
            logger.removeHandler(self)
            logger.setLevel(level)
            logger.propagate = propagate
        self._saved.clear()

    def context(self, stream: IO[str]) -> contextvars.Context:
        """A context whose tasks (and threads started by asyncio.to_thread) log to `stream`."""
        ctx = contextvars.copy_context()
        ctx.run(self.var.set, stream)
        return ctx

    def emit(self, record: logging.LogRecord) -> None:
        stream = self.var.get()
        if stream is None:
            top = record.name.split(".", 1)[0]
            saved = self._saved.get(top)
            if saved is not None and saved[1] and record.levelno >= saved[2]:
                logging.getLogger().handle(record)
            return
        if stream.closed:
            return
        try:
            stream.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def _open_log(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a", buffering=1)  # line-buffered: tails are readable at once


# --------------------------------------------------------------------------------------
# Fake nvidia-imex as a task


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
            self._run(built), name=f"fake-imex-{self.pid}"
        )

    async def _run(self, daemon: FakeImex) -> None:
        try:
            code = await daemon.run(signals=False)
        except asyncio.CancelledError:
            code = self._exit_code if self._exit_code is not None else _KILLED
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
            self._end(_KILLED)
        elif self.daemon is not None:
            self.daemon.deliver(sig)

    def kill_group(self) -> None:
        self._end(_KILLED)

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
        grace: float = 5.0,
    ) -> list[int]:
        wanted = set(ports)
        only = frozenset(addresses) if addresses is not None else None
        strays = [
            c
            for c in self.children.values()
            if Path(c.command[0]).name == Path(binary_name).name and c.listens(wanted, only)
        ]
        for child in strays:
            log.warning("Terminating stray %s pid %d holding our ports", binary_name, child.pid)
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
        for child in strays:
            try:
                await asyncio.wait_for(child.wait(), grace)
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
                await asyncio.wait_for(child.wait(), grace)
            except TimeoutError:
                child.kill_group()
                await child.wait()


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
            return await self._run(list(argv[1:]))

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


class _TaskContainer:
    """A daemon container running as a task: SIGTERM/SIGINT set its stop event; SIGKILL
    cancels it (its cleanup still runs: nothing in-process dies uncleanly)."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.returncode: int | None = None
        self.task: asyncio.Task[int] | None = None
        self._done = asyncio.Event()

    def finished(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._done.set()

    async def wait(self) -> int:
        await self._done.wait()  # not the task itself: a cancelled waiter must not kill it
        assert self.returncode is not None
        return self.returncode

    def signal(self, sig: int) -> None:
        if self.returncode is not None:
            return
        if sig == signal.SIGKILL:
            if self.task is not None:
                self.task.cancel()
        else:
            self.stop.set()


class InProcessExecutor:
    """`ContainerExecutor` running `compute-domain-agent daemon run` / `daemon check` as
    coroutines given the container's environment."""

    def __init__(self, launcher: InProcessImexLauncher, ctl: InProcessCtl, router: LogRouter):
        self.launcher = launcher
        self.ctl = ctl
        self.router = router
        self._parsed: OrderedDict[tuple[Any, ...], argparse.Namespace] = OrderedDict()
        self.containers: set[_TaskContainer] = set()

    def _parse(self, argv: list[str], env: Mapping[str, str], err: IO[str]) -> argparse.Namespace:
        """The agent's command line as the process would parse it (flags over `env`);
        cached, as probes parse the same command every period."""
        key = (tuple(argv), frozenset(env.items()))
        args = self._parsed.get(key)
        if args is None:
            parser, sub = program_parser(agent_cli.PROG, agent_cli.__doc__)
            agent_cli.add_commands(sub, environ=env)
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(argv[1:])
            self._parsed[key] = args
            if len(self._parsed) > _PARSE_CACHE:
                self._parsed.popitem(last=False)
        else:
            self._parsed.move_to_end(key)
        return args

    def _daemon_args(
        self, argv: list[str], env: Mapping[str, str], err: IO[str], want: str
    ) -> argparse.Namespace | int:
        if not argv or Path(argv[0]).name != agent_cli.PROG:
            raise FileNotFoundError(
                f"in-process: cannot execute {argv[:1]} (only {agent_cli.PROG})"
            )
        try:
            args = self._parse(argv, env, err)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 2
        if args.command != "daemon" or getattr(args, "daemon_command", None) != want:
            raise FileNotFoundError(f"in-process: only `{agent_cli.PROG} daemon {want}` runs here")
        return args

    async def start(self, argv: list[str], env: dict[str, str], log_path: Path) -> _TaskContainer:
        stream = _open_log(log_path)
        container = _TaskContainer(asyncio.Event())
        try:
            args = self._daemon_args(argv, env, stream, "run")
        except OSError:
            stream.close()
            raise
        if isinstance(args, int):
            stream.close()
            container.finished(args)
            return container
        loop = asyncio.get_running_loop()
        container.task = loop.create_task(
            agent_cli.run_daemon(
                args,
                dict(env),
                container.stop,
                launcher=self.launcher,
                ctl_runner=self.ctl,
                err=stream,
            ),
            name=f"daemon-{env.get('POD_NAME', log_path.parent.name)}",
            context=self.router.context(stream),
        )
        self.containers.add(container)

        def done(task: asyncio.Task[int]) -> None:
            self.containers.discard(container)
            if task.cancelled():
                code = _KILLED
            elif (exc := task.exception()) is not None:
                stream.write(f"daemon failed: {exc!r}\n")
                code = 1
            else:
                code = task.result()
            stream.close()
            container.finished(code)

        container.task.add_done_callback(done)
        return container

    async def probe(self, argv: list[str], env: dict[str, str], timeout: float) -> bool:
        sink = io.StringIO()
        try:
            args = self._daemon_args(argv, env, sink, "check")
        except OSError:
            return False
        if isinstance(args, int):
            return False
        try:
            async with asyncio.timeout(timeout):  # not wait_for: see InProcessCtl
                code = await agent_cli.check_daemon(
                    args, env, ctl_runner=self.ctl, out=sink, err=sink
                )
        except TimeoutError:
            return False
        return code == 0

    async def stop_all(self, grace: float = 5.0) -> None:
        """SIGTERM every daemon container still running, cancel it after `grace`."""
        containers = list(self.containers)
        for container in containers:
            container.signal(signal.SIGTERM)
        for container in containers:
            try:
                await asyncio.wait_for(container.wait(), grace)
            except TimeoutError:
                container.signal(signal.SIGKILL)
                await container.wait()


# --------------------------------------------------------------------------------------
# Node agents as tasks


class InProcessAgent:
    """`compute-domain-agent plugin` as a task: the shape of `ManagedProcess` (start, stop,
    kill, restart, log_tail), `pid` None. `kill` stops it gracefully (see module doc)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str],
        router: LogRouter,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.env = dict(env)
        self.router = router
        self.pid: int | None = None
        self.starts = 0
        self.task: asyncio.Task[int] | None = None
        self._stop: asyncio.Event | None = None
        self._stream: IO[str] | None = None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    @property
    def returncode(self) -> int | None:
        task = self.task
        if task is None or not task.done():
            return None
        return 1 if task.cancelled() or task.exception() else task.result()

    async def start(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running (in-process)")
        from agent.plugin.app import run
        from agent.plugin.config import config_from_args
        from api.errors import ValidationError

        stream = self._stream = _open_log(self.log_path)
        stream.write(f"--- start {self.starts + 1} (in-process): {' '.join(self.argv)}\n")
        self.starts += 1
        parser, sub = program_parser(agent_cli.PROG, agent_cli.__doc__)
        agent_cli.add_commands(sub, environ=self.env)
        try:
            with contextlib.redirect_stderr(stream):
                args = parser.parse_args(self.argv[1:])
            config = config_from_args(args)
        except (SystemExit, ValidationError) as err:
            stream.write(f"{agent_cli.PROG} plugin: {err}\n")
            raise RuntimeError(f"{self.name}: bad agent command line: {err}") from None
        api = kube.api_client(config.kubeconfig)
        self._stop = asyncio.Event()

        async def main(stop: asyncio.Event) -> int:
            try:
                return await run(config, stop, api)
            finally:
                api.close()

        self.task = asyncio.get_running_loop().create_task(
            main(self._stop), name=f"agent-{self.name}", context=self.router.context(stream)
        )
        self.task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[int]) -> None:
        if self._stream is None:
            return
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._stream.write(f"agent failed: {exc!r}\n")
        self._stream.write(f"--- exited {self.returncode}\n")
        self._stream.close()

    async def stop(self, timeout: float = 20.0) -> int | None:
        """Set its stop event (SIGTERM), cancel it after `timeout`; the exit status."""
        if self.task is None:
            return None
        if self._stop is not None:
            self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        except TimeoutError:
            log.warning("%s did not stop within %.0fs; cancelling it", self.name, timeout)
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        except Exception:  # reported by _done in its log
            pass
        return self.returncode

    async def kill(self) -> None:
        await self.stop()

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


# --------------------------------------------------------------------------------------
# All of it, for one simulated cluster


class InProcessHost:
    """What the in-process nodes of one cluster share: the log router, the "process table"
    of fake IMEX daemons, the ctl runner, and the kubelets' executor."""

    def __init__(self, verbosity: int) -> None:
        self.router = LogRouter(verbosity)
        self.launcher = InProcessImexLauncher()
        self.ctl = InProcessCtl()
        self.executor = InProcessExecutor(self.launcher, self.ctl, self.router)
        self._open = False

    def open(self) -> None:
        if not self._open:
            self.router.install()
            self._open = True

    def agent(
        self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str]
    ) -> InProcessAgent:
        return InProcessAgent(name, argv, log_path, env, self.router)

    async def close(self) -> None:
        """End daemon containers and IMEX daemons still running; stop routing logs."""
        await self.executor.stop_all()
        await self.launcher.stop_all()
        if self._open:
            self.router.uninstall()
            self._open = False
