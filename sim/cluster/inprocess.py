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
  `daemon check` as `agent.cli.check_daemon`, each given the container's env as a mapping
  (with no mount namespace, the host paths of its /imexd and /etc/hosts mounts and a
  kubeconfig file reach it as IMEXD_DIR, HOSTS_FILE and KUBECONFIG); SIGTERM sets the
  daemon's stop event; the plugin pod's init container (`prestart`) runs in a thread with
  its driver root as the host path mounted there; every other container (workloads) runs
  as a sandboxed process;
- fake `nvidia-imex` (module `inprocess_imex`): the supervisor's `ImexLauncher` hook
  (`InProcessImexLauncher`) runs `sim.fakeimex`'s daemon as a task; signals go to its
  handlers, its log lines feed the stdout reader the supervisor forwards, and strays are
  found among the tasks;
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
import logging
import signal
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final

from agent import cli as agent_cli
from agent.plugin.imexhost import ImexHooks
from api import names
from runtime import kubecall
from runtime.cli import program_parser
from runtime.logsetup import KlogFormatter
from sim.cluster.cpumeter import DRIVER, as_driver, run_as
from sim.cluster.inprocess_imex import KILLED, InProcessCtl, InProcessImexLauncher
from sim.cluster.inprocess_init import run_prestart
from sim.cluster.sandbox import Launch, SandboxExecutor

log = logging.getLogger(__name__)

_PARSE_CACHE: Final = 4096


# --------------------------------------------------------------------------------------
# Logs


class LogRouter(logging.Handler):
    """Writes the records of the driver's loggers to the log file of the in-process
    component they come from: each agent and daemon container runs in a context
    (`context(stream)`) naming its file. While installed, those loggers log at the agents'
    verbosity and do not propagate; a record from outside any such context (an informer
    thread, the sim itself) goes on to the root logger if it would have before."""

    def __init__(
        self, verbosity: int, loggers: Sequence[str] = ("agent", "api", "runtime")
    ) -> None:
        super().__init__()
        self.setFormatter(KlogFormatter())  # what the agent's own process writes
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


def _host_value(value: str, launch: Launch) -> str:
    """A container path in an env value (or after `fixture:`) as the host path that is
    mounted there: what the program would have opened through its mounts."""
    prefix, sep, rest = value.partition(":")
    if sep and prefix == "fixture":
        return f"fixture:{_host_value(rest, launch)}"
    if not value.startswith("/"):
        return value
    best: tuple[int, str] | None = None
    for mount in launch.mounts:
        target = mount.target.rstrip("/") or "/"
        if mount.type != "bind" or not (value == target or value.startswith(target + "/")):
            continue
        if best is None or len(target) > best[0]:
            tail = value[len(target):].lstrip("/")
            best = (len(target), str(Path(mount.source) / tail) if tail else mount.source)
    return best[1] if best is not None else value


def task_env(launch: Launch) -> dict[str, str]:
    """The container's env plus what its mounts and credentials would have given it."""
    env = dict(launch.env)
    for path, variable in ((names.IMEXD_DIR, "IMEXD_DIR"), ("/etc/hosts", "HOSTS_FILE")):
        host = launch.host_path(path)
        if host is not None:
            env[variable] = host
    if launch.kubeconfig:
        env[names.ENV_KUBECONFIG] = launch.kubeconfig
    return env


class _AgentTask:
    """An agent container running as a task: SIGTERM sets its stop event, SIGKILL cancels
    it (its cleanup still runs)."""

    def __init__(self, agent: InProcessAgent) -> None:
        self.agent = agent

    @property
    def returncode(self) -> int | None:
        return self.agent.returncode

    async def wait(self) -> int:
        task = self.agent.task
        if task is not None:
            await asyncio.wait([task])  # never raises: a cancelled agent is an exit too
        code = self.agent.returncode
        return KILLED if code is None else code

    def signal(self, sig: int) -> None:
        task = self.agent.task
        if task is None or task.done():
            return
        if sig == signal.SIGKILL:
            task.cancel()
        elif self.agent._stop is not None:
            self.agent._stop.set()


class InProcessExecutor:
    """`ContainerExecutor` running `compute-domain-agent daemon run` / `daemon check` as
    coroutines given the container's environment, and the plugin pod's `prestart` init
    container in a thread; other containers go to `fallback`."""

    def __init__(self, launcher: InProcessImexLauncher, ctl: InProcessCtl, router: LogRouter):
        self.launcher = launcher
        self.ctl = ctl
        self.router = router
        self.fallback = SandboxExecutor()
        self._parsed: OrderedDict[tuple[Any, ...], argparse.Namespace] = OrderedDict()
        self.containers: set[_TaskContainer] = set()

    @staticmethod
    def runs(launch: Launch) -> bool:
        """The project's image running the agent: a task here; anything else a process."""
        return launch.image_known and len(launch.argv) > 1 and (
            Path(launch.argv[0]).name == agent_cli.PROG
        ) and launch.argv[1] in ("plugin", "daemon", "keep", "prestart")

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
        if want == "prestart":
            if args.command != "prestart":
                raise FileNotFoundError(f"in-process: only `{agent_cli.PROG} prestart` here")
        elif args.command != "daemon" or getattr(args, "daemon_command", None) != want:
            raise FileNotFoundError(f"in-process: only `{agent_cli.PROG} daemon {want}` runs here")
        return args

    async def start(self, launch: Launch, log_path: Path) -> Any:
        if not self.runs(launch):
            return await self.fallback.start(launch, log_path)
        if launch.argv[1] in ("plugin", "keep"):
            env = {k: _host_value(v, launch) for k, v in task_env(launch).items()}
            hosts = launch.host_path("/etc/hosts")
            if hosts is not None:  # agent placement: the peers' names go to the pod's file
                env.setdefault("IMEX_HOSTS_FILE", hosts)
            # `keep plugin`: the kubelet's container restart is the keeper here.
            argv = [launch.argv[0], *_plugin_args(launch.argv)]
            hooks = ImexHooks(launcher_for=self.launcher.detached, ctl_runner=self.ctl, env=env)
            agent = InProcessAgent(log_path.parent.name, argv, log_path, env, self.router,
                                   imex_hooks=hooks)
            await agent.start()
            return _AgentTask(agent)
        argv, env = list(launch.argv), task_env(launch)
        init = argv[1] == "prestart"
        if init:  # its driver root, as the mounts would have shown it
            env = {k: _host_value(v, launch) for k, v in env.items()}
        stream = _open_log(log_path)
        container = _TaskContainer(asyncio.Event())
        try:
            args = self._daemon_args(argv, env, stream, "prestart" if init else "run")
        except OSError:
            stream.close()
            raise
        if isinstance(args, int):
            stream.close()
            container.finished(args)
            return container
        loop = asyncio.get_running_loop()
        work = (
            run_prestart(args, stream, container.stop) if init else agent_cli.run_daemon(
                args,
                dict(env),
                container.stop,
                launcher=self.launcher,
                ctl_runner=self.ctl,
                err=stream,
            )
        )  # fmt: skip
        container.task = loop.create_task(
            as_driver(work),
            name=f"daemon-{env.get('POD_NAME', log_path.parent.name)}",
            context=self.router.context(stream),
        )
        self.containers.add(container)

        def done(task: asyncio.Task[int]) -> None:
            self.containers.discard(container)
            if task.cancelled():
                code = KILLED
            elif (exc := task.exception()) is not None:
                stream.write(f"daemon failed: {exc!r}\n")
                code = 1
            else:
                code = task.result()
            stream.close()
            container.finished(code)

        container.task.add_done_callback(done)
        return container

    async def probe(
        self, container: Any, launch: Launch, argv: Sequence[str], timeout: float
    ) -> bool:
        if not isinstance(container, _TaskContainer):
            return await self.fallback.probe(container, launch, argv, timeout)
        env = task_env(launch)
        argv = list(argv)
        sink = io.StringIO()
        try:
            args = self._daemon_args(argv, env, sink, "check")
        except OSError:
            return False
        if isinstance(args, int):
            return False
        try:
            async with asyncio.timeout(timeout):  # not wait_for: see InProcessCtl
                code = await run_as(DRIVER, agent_cli.check_daemon(
                    args, env, ctl_runner=self.ctl, out=sink, err=sink
                ))
        except TimeoutError:
            return False
        return code == 0

    async def exec(self, container: Any, launch: Launch, argv: Sequence[str], **pipes: Any) -> Any:
        """`kubectl exec` into a workload; a daemon running as a task has no process."""
        if isinstance(container, _TaskContainer):
            raise RuntimeError("exec into an in-process daemon container is not possible")
        return await self.fallback.exec(container, launch, argv, **pipes)

    async def stop_all(self, grace: float = 5.0) -> None:
        """SIGTERM every daemon container still running, cancel it after `grace`."""
        containers = list(self.containers)
        for container in containers:
            container.signal(signal.SIGTERM)
        for container in containers:
            try:
                async with asyncio.timeout(grace):
                    await container.wait()
            except TimeoutError:
                container.signal(signal.SIGKILL)
                await container.wait()


# --------------------------------------------------------------------------------------
# Node agents as tasks


def _plugin_args(argv: Sequence[str]) -> list[str]:
    """`plugin` and its flags, from `compute-domain-agent [keep [OPTIONS]] plugin ...`."""
    args = list(argv[1:])
    return args[args.index("plugin"):] if "plugin" in args else args


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
        imex_hooks: ImexHooks | None = None,
    ) -> None:
        self.imex_hooks = imex_hooks
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
        if task.cancelled():
            return KILLED
        return 1 if task.exception() else task.result()

    async def start(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running (in-process)")
        from agent.plugin.app import run
        from agent.plugin.config import config_from_args
        from api.validation_error import ValidationError

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
        api = kubecall.api_client(config.kubeconfig)
        self._stop = asyncio.Event()

        async def main(stop: asyncio.Event) -> int:
            try:
                return await run(config, stop, api, self.imex_hooks)
            finally:
                api.close()

        self.task = asyncio.get_running_loop().create_task(
            as_driver(main(self._stop)), name=f"agent-{self.name}",
            context=self.router.context(stream),
        )
        self.task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[int]) -> None:
        if self._stream is None:
            return
        if task.cancelled():
            self._stream.write("--- killed (cancelled: it did not stop in time)\n")
        elif (exc := task.exception()) is not None:
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
            async with asyncio.timeout(timeout):
                await asyncio.shield(self.task)
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
