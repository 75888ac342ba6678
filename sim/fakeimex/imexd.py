"""The fake IMEX daemon's life: start-up, states, command service, signals, shutdown.

Faithful where the driver's supervision depends on it: it stays in the foreground, reads the
nodes config only at start (SIGUSR1 re-resolves names through the hosts file and restarts
outgoing connections, at most once per reload interval, but never changes the node map or our
node ID), serves the command service only with IMEX_CMD_ENABLED=1, exits 0 on SIGTERM after
telling peers, and dies uncleanly when told to crash. One asyncio loop does it all.

In-process (`sim.cluster.inprocess`, many daemons on one loop) the process boundary is
replaced: `run(signals=False)` installs no signal handlers and `deliver(sig)` stands for
kill(2); the scripted crash calls the `exit_now` hook instead of os._exit; `abort()` is
what SIGKILL does to the sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson

from sim.fakeimex.config import ConfigError, ImexConfig
from sim.fakeimex.domain import Link, nodes_report, view_domain_state
from sim.fakeimex.knobs import Knobs
from sim.fakeimex.logs import ImexLog
from sim.fakeimex.nodes import (
    NodeEntry,
    Placeholders,
    find_self,
    load_hosts,
    load_nodes_config,
    nodes_digest,
    resolve,
)
from sim.fakeimex.peering import NETWORK_ERRORS, Identity, Peering, read_line
from sim.fakeimex.protocol import CMD_NODES, CMD_QUERY, MAX_LINE, decode, encode
from sim.fakeimex.states import DaemonState, LinkStatus

# State-file writes within this window are one write (`FakeImex._publish`).
_PUBLISH_COALESCE_S = 0.05


class FakeImex:
    """One daemon: config and knobs in, a serving process until a stop signal or a crash."""

    def __init__(
        self,
        cfg: ImexConfig,
        knobs: Knobs,
        log: ImexLog,
        *,
        version: str,
        server_port: int,
        exit_now: Callable[[int], object] = os._exit,
    ) -> None:
        self.cfg = cfg
        self.exit_now = exit_now
        self.knobs = knobs
        self.log = log
        self.version = version
        self.server_port = server_port
        self.placeholders = Placeholders.parse(knobs.placeholders)
        self.state = DaemonState.INITIALIZING
        self.entries: list[NodeEntry] = []
        self.addresses: dict[int, str | None] = {}
        self.links: dict[int, Link] = {}
        self.peering: Peering | None = None
        self.reload_count = 0
        self.nodes_config_stale = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._servers: list[asyncio.Server] = []
        self._unix_path: Path | None = None
        self._stop = asyncio.Event()
        self._last_reload: float | None = None
        self._reload_pending = False
        self._last_report: dict[str, Any] | None = None
        self._state_file_error = False
        self._publish_handle: asyncio.TimerHandle | None = None

    @property
    def me(self) -> Identity | None:
        return self.peering.me if self.peering else None

    # --- lifecycle ---------------------------------------------------------------------

    async def run(self, *, signals: bool = True) -> int:
        """Serve until SIGTERM/SIGINT/SIGQUIT (0) or a start-up failure (1). With
        `signals=False` nothing is installed: signals come through `deliver`."""
        loop = asyncio.get_running_loop()
        if signals:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                loop.add_signal_handler(sig, self._on_stop_signal, sig)
            loop.add_signal_handler(signal.SIGUSR1, self._on_usr1)
            loop.add_signal_handler(signal.SIGHUP, self._on_hup)
        if self.knobs.crash_after is not None:
            self._spawn(self._crash_later(self.knobs.crash_after))
        self._publish()
        try:
            self._log_config()
            peering = self._load_topology()
            await self._start_command_service()
            self._set_state(DaemonState.STARTING_AUTH_SERVER)
            await self._start_peer_server(peering)
        except (ConfigError, OSError) as exc:
            self.log.fatal(str(exc))
            await self._close()
            self._flush_state()
            return 1
        peering.start()
        self._spawn(self._startup())
        await self._stop.wait()
        self._set_state(DaemonState.SHUTTING_DOWN)
        self.log.info("Shutting down: notifying peers and closing connections")
        await self._close()
        self._flush_state()
        self.log.info("IMEX daemon exited")
        return 0

    def _log_config(self) -> None:
        cfg = self.cfg
        self.log.info(
            f"IMEX version {self.version} is running with the following configuration options"
        )
        self.log.info(f"Config file = {cfg.source}")
        self.log.info(f"Logging level = {cfg.log_level}")
        self.log.info(f"Bind interface IP = {cfg.bind_interface_ip or '(from node config)'}")
        self.log.info(f"Server port = {self.server_port}")
        self.log.info(f"Node config file = {cfg.node_config_file}")
        self.log.info(f"Wait for quorum = {cfg.wait_for_quorum}")
        self.log.info(f"Command service enabled = {int(cfg.cmd_enabled)}")
        for key in cfg.unknown_keys:
            self.log.warning(f"{cfg.where(key)}: unknown configuration key {key} ignored")
        if cfg.auth_encryption:
            self.log.warning("IMEX_ENABLE_AUTH_ENCRYPTION=1: the fake does not encrypt")

    def _load_topology(self) -> Peering:
        """Nodes config, hosts file, our own ID; one Link per other entry."""
        path = self.cfg.node_config_path()
        self.entries = load_nodes_config(path)
        if not self.entries:
            raise ConfigError(f"{path}: node config file lists no nodes")
        hosts = self._read_hosts()
        self.addresses = {e.index: resolve(e.host, hosts) for e in self.entries}
        index = find_self(
            self.entries, self.addresses, self.cfg, self.placeholders, self.server_port
        )
        me = Identity(
            index=index,
            host=self.entries[index].host,
            ip=self.addresses[index] or "",
            version=self.version,
            digest=nodes_digest(self.entries),
            instance=uuid.uuid4().hex,
        )
        self.log.info(
            f"Identified this node as ID {me.index}, using bind IP of '{me.ip}', "
            f"and network interface of {self.cfg.network_interface or 'any'}"
        )
        for entry in self.entries:
            if entry.index == me.index:
                continue
            address = self.addresses[entry.index]
            self.links[entry.index] = Link(
                entry,
                address,
                entry.port or self.server_port,
                expected=address not in self.placeholders,
            )
            self._set_address(self.links[entry.index], address)
            if address is None:
                self.log.warning(f"Node {entry.index} ({entry.host}) does not resolve")
        self.peering = Peering(
            me,
            self.links,
            heartbeat=self.knobs.heartbeat,
            grace=self.cfg.node_disconnected_grace_time,
            log=self.log,
            state=lambda: self.state,
            spawn=self._spawn,
            changed=self._publish,
        )
        return self.peering

    def _set_address(self, link: Link, address: str | None) -> bool:
        """Point a link at an address; whether it is worth dialling."""
        link.address = address
        self.addresses[link.index] = address
        link.expected = address not in self.placeholders
        if address is None or not link.expected:
            if link.connected_count == 0:
                link.status = LinkStatus.INVALID
            return False
        if link.status is LinkStatus.INVALID:
            link.status = LinkStatus.NEVER_CONNECTED
        return True

    def _read_hosts(self) -> dict[str, str]:
        try:
            return load_hosts(self.knobs.hosts_file)
        except OSError as exc:
            self.log.warning(f"Cannot read hosts file {self.knobs.hosts_file}: {exc.strerror}")
            return {}

    async def _start_command_service(self) -> None:
        cfg = self.cfg
        if not cfg.cmd_enabled:
            if cfg.cmd_unix_domain_path:
                self.log.warning("IMEX_CMD_UNIX_DOMAIN_PATH is set but IMEX_CMD_ENABLED != 1")
            return
        if cfg.cmd_port is not None:
            host = cfg.cmd_bind_interface_ip or None
            try:
                server = await asyncio.start_server(self._serve_command, host, cfg.cmd_port)
            except OSError as exc:
                raise OSError(
                    f"Failed to start command service on {host or '*'}:{cfg.cmd_port}: "
                    f"{exc.strerror or exc}"
                ) from exc
            self._servers.append(server)
            self.log.info(f"Command service listening on {host or '*'}:{cfg.cmd_port}")
        if cfg.cmd_unix_domain_path:
            path = Path(cfg.cmd_unix_domain_path)
            if path.is_socket():  # left behind by a crashed instance
                path.unlink()
            try:
                server = await asyncio.start_unix_server(self._serve_command, path)
            except OSError as exc:
                raise OSError(
                    f"Failed to create command socket {path}: {exc.strerror or exc}"
                ) from exc
            self._unix_path = path
            self._servers.append(server)
            self.log.info(f"Command service listening on unix socket {path}")

    async def _start_peer_server(self, peering: Peering) -> None:
        ip = peering.me.ip
        try:
            server = await asyncio.start_server(peering.serve, ip, self.server_port, limit=MAX_LINE)
        except OSError as exc:
            raise OSError(
                f"Failed to bind server to {ip}:{self.server_port}: {exc.strerror or exc}"
            ) from exc
        self._servers.append(server)

    async def _startup(self) -> None:
        """Quorum wait (FULL only), the scripted hold, then READY."""
        if self.cfg.wait_for_quorum == "FULL":
            self._set_state(DaemonState.WAITING_FOR_PEERS)
            self.log.info("IMEX_WAIT_FOR_QUORUM=FULL, waiting for connections to all nodes.")
            while not all(
                ln.status is LinkStatus.CONNECTED for ln in self.links.values() if ln.expected
            ):
                await asyncio.sleep(0.05)
        else:
            self.log.info(
                "IMEX_WAIT_FOR_QUORUM != FULL, continuing initialization without waiting "
                "for connections to all nodes."
            )
        self._set_state(self.knobs.hold_state)
        if self.knobs.never_ready:
            self.log.info(f"FAKE_IMEX_NEVER_READY=1: staying in {self.state}")
            return
        await asyncio.sleep(self.knobs.start_delay)
        self._set_state(DaemonState.READY)

    async def _crash_later(self, after: float) -> None:
        await asyncio.sleep(after)
        code = self.knobs.exit_code
        self.log.fatal(
            f"Simulated crash after {after:g}s (FAKE_IMEX_CRASH_AFTER), exit status {code}"
        )
        self.exit_now(code)  # no clean-up, like a real crash: peers see the sockets reset

    async def _close(self) -> None:
        """Tell peers we leave, stop serving, cancel every task, remove the unix socket."""
        if self.peering is not None:
            self.peering.close()
        for server in self._servers:
            server.close()
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        for server in self._servers:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    await server.wait_closed()
        if self._unix_path is not None:
            with contextlib.suppress(OSError):
                self._unix_path.unlink()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error(f"Internal error: {task.exception()!r}")

    def listening(self) -> list[tuple[str, int]]:
        """(address, port) of every TCP socket it listens on (what a stray search sees)."""
        found = []
        for server in self._servers:
            for sock in server.sockets:
                name = sock.getsockname()
                if isinstance(name, tuple):
                    found.append((str(name[0]), int(name[1])))
        return found

    def abort(self) -> None:
        """What SIGKILL does to an in-process daemon: listeners and connections drop at
        once (peers see resets, no goodbye), every task is cancelled, files stay."""
        for server in self._servers:
            server.close()
        if self.peering is not None:
            self.peering.stopping = True
            for writer in list(self.peering.conns):
                writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()

    # --- signals -----------------------------------------------------------------------

    def deliver(self, sig: int) -> None:
        """A signal sent to an in-process daemon (what its handlers would do)."""
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            self._on_stop_signal(signal.Signals(sig))
        elif sig == signal.SIGUSR1:
            self._on_usr1()
        elif sig == signal.SIGHUP:
            self._on_hup()

    def _on_stop_signal(self, sig: signal.Signals) -> None:
        if not self._stop.is_set():
            self.log.info(f"Received signal {sig.name}, shutting down")
            self._stop.set()

    def _on_hup(self) -> None:
        self.log.info("SIGHUP received: no in-memory log buffer to dump in the fake")

    def _on_usr1(self) -> None:
        """Coalesce SIGUSR1s: act at once, or once the reload interval since the last passed."""
        if self._reload_pending or self._stop.is_set():
            return
        self._reload_pending = True
        last = self._last_reload
        now = time.monotonic()
        delay = 0.0 if last is None else max(0.0, last + self.knobs.reload_interval - now)
        if delay:
            self.log.info(f"SIGUSR1 received: reload deferred by {delay:.1f}s")
        self._spawn(self._reload(delay))

    async def _reload(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._reload_pending = False
        self._last_reload = time.monotonic()
        self.reload_count += 1
        self.log.info("SIGUSR1: re-resolving peer names and restarting all outgoing connections")
        self._check_nodes_config()
        hosts = self._read_hosts()
        me, peering = self.me, self.peering
        if me is None or peering is None:  # still starting: it reads the hosts file anyway
            self._publish()
            return
        if (own := resolve(me.host, hosts)) != me.ip:
            self.log.warning(
                f"Own name now resolves to {own}; node ID {me.index} and bind IP {me.ip} "
                "are kept until restart"
            )
        for link in self.links.values():
            await peering.hang_up(link)
            address = resolve(link.entry.host, hosts)
            if address != link.address:
                self.log.info(
                    f"Node {link.index} ({link.entry.host}) address: {link.address} -> {address}"
                )
            if self._set_address(link, address):
                peering.dial(link)
        self._publish()

    def _check_nodes_config(self) -> None:
        """IMEX reads the nodes config only at start: a changed file is reported, not applied."""
        path = Path(self.cfg.node_config_file)
        try:
            current = load_nodes_config(path)
        except ConfigError as exc:
            self.log.warning(f"{exc} (keeping the node map read at start-up)")
            return
        if self.entries and nodes_digest(current) != nodes_digest(self.entries):
            self.nodes_config_stale = True
            self.log.warning(
                f"Node config file {path} changed since start-up; the node map is read only "
                "at start-up: restart nvidia-imex to apply it"
            )

    # --- command service and observers ------------------------------------------------

    async def _serve_command(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """One request, one response (never ends cancelled; see Peering.serve)."""
        try:
            request = decode(await read_line(reader, 5))
            command = request.get("cmd")
            if command == CMD_QUERY:
                response: dict[str, Any] = {
                    "state": self.state.value,
                    "code": self.state.code,
                    "node": self.me.index if self.me else -1,
                    "version": self.version,
                }
            elif command == CMD_NODES:
                response = self.report()
            else:
                response = {"error": f"unknown command {command!r}"}
            writer.write(encode(response))
            await writer.drain()
        except (*NETWORK_ERRORS, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def report(self) -> dict[str, Any]:
        """The `-N -j` document (before our node ID is known: an empty, DOWN domain)."""
        if self.me is None:
            return {"nodes": {}, "status": "DOWN"}
        report = nodes_report(
            entries=self.entries,
            addresses=self.addresses,
            self_index=self.me.index,
            local_state=self.state,
            version=self.version,
            links=self.links,
            previous=self._last_report,
        )
        self._last_report = report
        return report

    def _set_state(self, state: DaemonState) -> None:
        if state is not self.state:
            self.log.info(f"IMEX daemon state: {self.state} -> {state}")
            self.state = state
            self._publish()

    def _publish(self) -> None:
        """Rewrite FAKE_IMEX_STATE_FILE soon: changes within `_PUBLISH_COALESCE_S` are one
        write. Each peer's link change publishes, so a clique of N daemons coming up made
        O(N) rewrites per daemon; a third of the in-process sim's file writes at 72 nodes."""
        if self.knobs.state_file is None or self._publish_handle is not None:
            return
        loop = asyncio.get_running_loop()  # every caller runs within `run`
        self._publish_handle = loop.call_later(_PUBLISH_COALESCE_S, self._write_state)

    def _flush_state(self) -> None:
        """Write a pending state now (the daemon is exiting)."""
        if self._publish_handle is not None:
            self._publish_handle.cancel()
            self._write_state()

    def _write_state(self) -> None:
        """Rewrite FAKE_IMEX_STATE_FILE atomically (tests poll it instead of running ctl)."""
        self._publish_handle = None
        path = self.knobs.state_file
        if path is None:
            return
        me = self.me
        document = {
            "pid": os.getpid(),
            "state": self.state.value,
            "domain_status": view_domain_state(self.state, self.links).value,
            "node_id": me.index if me else -1,
            "bind_ip": me.ip if me else "",
            "server_port": self.server_port,
            "version": self.version,
            "instance": me.instance if me else "",
            "reload_count": self.reload_count,
            "nodes_config_stale": self.nodes_config_stale,
            "peers": {
                str(k): {
                    "host": ln.entry.host,
                    "address": ln.address,
                    "status": ln.status.value,
                    "state": ln.peer_state,
                    "expected": ln.expected,
                    "connected_count": ln.connected_count,
                }
                for k, ln in self.links.items()
            },
            "updated": time.time(),
        }
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
            tmp.replace(path)
        except OSError as exc:
            if not self._state_file_error:
                self.log.warning(f"Cannot write state file {path}: {exc.strerror}")
                self._state_file_error = True
