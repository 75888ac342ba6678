"""The IMEX supervisor: one ComputeDomain's `nvidia-imex` on this node, kept in its clique.

Built from an identity, an API client and paths, with no pod-only assumptions, so the same
component can run in the per-domain daemon pod (`compute-domain-agent daemon run`) or,
later, inside the node agent. The flow (the reference daemon's `run`, with our fixes;
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-daemon/main.go):

1. label our pod with the clique ID; an empty clique ID means a non-fabric node: no IMEX;
2. check that the pod IP is local, write the IMEX config and the static nodes config;
3. end any stray `nvidia-imex` of an earlier run that still holds our ports;
4. join the clique (stable index), then follow it: each change rewrites the hosts file;
   IMEX is started once our entry exists, gets SIGUSR1 only when peers changed, and is
   restarted when our own index changed (IMEX reads its identity only at start);
5. poll `nvidia-imex-ctl -q` and flip our clique entry Ready at once, NotReady after
   consecutive failed polls or at once when IMEX exited (readiness.py ReadinessPoller);
   an unexpected exit of IMEX, and IMEX not READY longer than `not_ready_event_after`, are
   Warning Events on our own pod (`kubectl describe pod`), rate-limited (events.py);
6. on stop: stop IMEX (SIGTERM, then SIGKILL), leave the clique.

The process boundary is injected: `launcher` starts `nvidia-imex` (and ends strays),
`ctl_runner` runs `nvidia-imex-ctl`, `imex_env` is the child's environment. The defaults are
real processes with our own environment; the simulated cluster at scale runs both in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from agent.daemon import files
from agent.daemon.clique_membership import CliqueMembership
from agent.daemon.events import (
    REASON_EXITED,
    REASON_NOT_READY,
    PodEvents,
    exited_message,
    not_ready_message,
)
from agent.daemon.identity import DaemonIdentity
from agent.daemon.legacy_clique_membership import LegacyMembership
from agent.daemon.netcheck import check_local_address
from agent.daemon.process import ImexLauncher, ImexProcess
from agent.daemon.readiness import CtlRunner, ReadinessPoller, is_ready, query_state
from api import names
from api.clique import settled_indices
from cdi.atomic import NotRegularFileError, read_file
from runtime.corev1 import CoreV1
from runtime.kubecall import call_retrying
from runtime.logsetup import vlog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SupervisorPaths:
    imexd_dir: Path = Path(names.IMEXD_DIR)
    hosts_file: Path = Path(names.DEFAULT_HOSTS_FILE)
    imex_binary: str = names.IMEX_BINARY
    imex_ctl_binary: str = names.IMEX_CTL_BINARY

    @property
    def config(self) -> Path:
        return self.imexd_dir / names.IMEXD_CONFIG

    @property
    def nodes_config(self) -> Path:
        return self.imexd_dir / names.IMEXD_NODES_CONFIG


class ImexSupervisor:
    def __init__(
        self,
        identity: DaemonIdentity,
        api: client.ApiClient,
        *,
        dns_names: bool = True,
        cliques: bool = True,
        paths: SupervisorPaths | None = None,
        poll_interval: float = 1.0,
        imex_grace: float = 10.0,
        check_local: bool = True,
        launcher: ImexLauncher | None = None,
        ctl_runner: CtlRunner | None = None,
        imex_env: Mapping[str, str] | None = None,
        not_ready_event_after: float = 60.0,
        events: PodEvents | None = None,
        reload_interval: float = 5.0,
        label_pod: bool = True,
        adopt: bool = False,
        on_readiness: Callable[[bool, str], None] | None = None,
        may_rejoin: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """`not_ready_event_after`: seconds IMEX may stay not READY before an
        IMEXDaemonNotReady Event (0: never); `events` writes them (None: on our pod
        through `api`).

        Hosted in the node agent (agent placement): no pod to label (`label_pod`), a
        child left running by the previous agent is adopted (`adopt`, with a launcher
        that records its children), each reported readiness is also told to
        `on_readiness(ready, state)`, and an entry that disappeared is put back only if
        `may_rejoin()` says the domain still wants this node (a deleted domain's cliques
        go away with it)."""
        self.identity = identity
        self._api = api
        self._dns = dns_names
        self._cliques = cliques
        self.paths = paths or SupervisorPaths()
        self._poll_interval = poll_interval
        self._check_local = check_local
        self._ctl_runner = ctl_runner
        self.events = events if events is not None else PodEvents(api, identity)
        self._not_ready_after = not_ready_event_after
        self._ready_at: float | None = None  # when IMEX was last seen READY
        self.imex = ImexProcess(
            [self.paths.imex_binary, "-c", str(self.paths.config)],
            env=imex_env,
            log_prefix="nvidia-imex",
            grace=imex_grace,
            launcher=launcher,
            on_crash=self._on_crash,
            reload_interval=reload_interval,
        )
        self.membership: CliqueMembership | LegacyMembership | None = None
        self.index: int | None = None
        self._mappings: dict[int, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.running = asyncio.Event()
        self._poller: ReadinessPoller | None = None
        self._label = label_pod
        self._adopt = adopt
        self._on_readiness = on_readiness
        self._may_rejoin = may_rejoin
        self._followed = False  # the first clique update was handled
        self._detach = False  # on stop: leave IMEX running and our entry in place
        self.state = ""  # the last state nvidia-imex-ctl reported

    def detach_on_stop(self) -> None:
        """The agent is exiting or restarting, not the domain leaving this node: stop
        supervising but leave nvidia-imex running and our clique entry as it is."""
        self._detach = True

    @property
    def ready(self) -> bool:
        return bool(self._poller is not None and self._poller.ready)

    # --- lifecycle -----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        ident = self.identity
        if self._label:
            await self._label_pod()
        if ident.non_fabric:
            log.info("no cliqueID: skipping controller and IMEX daemon management")
            self.running.set()
            await stop.wait()
            log.info("Exiting")
            return 0
        if self._check_local:
            await asyncio.to_thread(check_local_address, ident.pod_ip)
        files.write_config(self.paths.imexd_dir, ident.pod_ip)
        if self._dns:
            files.write_nodes_config(
                self.paths.nodes_config, files.dns_nodes_config(ident.cd_uid, ident.max_nodes)
            )
        # Only a stray on our own address: in a shared network namespace (hostNetwork, the
        # simulated cluster) other domains' daemons listen on the same ports elsewhere.
        adopted = self._adopt and await self.imex.adopt()
        await self.imex.launcher.kill_stray(
            Path(self.paths.imex_binary).name,
            ports=[names.IMEX_SERVER_PORT, names.IMEX_CMD_PORT],
            addresses=[ident.pod_ip],
            exclude=[self.imex.pid] if adopted and self.imex.pid is not None else [],
        )
        self.membership = self._make_membership()
        self.index = await self.membership.join(ident.pod_ip)
        log.info(
            "joined clique %s of ComputeDomain %s as index %d",
            ident.clique_id,
            ident.cd_uid,
            self.index,
        )
        if not self._dns and isinstance(self.membership, LegacyMembership):
            # IP mode: the nodes config must list every peer before IMEX starts.
            await self.membership.wait_for_num_nodes()
        poller = self._poller = ReadinessPoller(
            self._query_state,
            self._report_readiness,
            interval=self._poll_interval,
            on_poll=self._after_poll,
            # In the agent a Prepare waits for the first READY: see it within 0.1 s.
            first_interval=0.1 if self._on_readiness is not None else None,
        )
        loop = asyncio.get_running_loop()
        vlog(log, 1, "Wait for updated ComputeDomainDaemonInfo list")
        self._tasks = [
            loop.create_task(self.membership.watch(self._on_peers)),
            loop.create_task(poller.run()),
        ]
        self.running.set()
        try:
            stopped = loop.create_task(stop.wait())
            await asyncio.wait([stopped, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in self._tasks:
                if task.done() and not task.cancelled() and task.exception():
                    raise task.exception()  # type: ignore[misc]
            stopped.cancel()
            return 0
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._detach:
            await self.imex.detach()
            await self.events.close()
            return
        await self.imex.stop()
        await self.events.close()
        if self.membership is not None:
            with contextlib.suppress(Exception):
                await self.membership.leave()
                log.info("left clique %s", self.identity.clique_id)

    def _make_membership(self) -> CliqueMembership | LegacyMembership:
        ident = self.identity
        if self._cliques:
            return CliqueMembership(
                self._api,
                namespace=ident.pod_namespace,
                cd_uid=ident.cd_uid,
                clique_id=ident.clique_id,
                node_name=ident.node_name,
                pod_name=ident.pod_name,
                pod_uid=ident.pod_uid,
                max_nodes=ident.max_nodes,
                cd_name=ident.cd_name,
                cd_namespace=ident.cd_namespace,
            )
        return LegacyMembership(
            self._api,
            cd_namespace=ident.cd_namespace,
            cd_name=ident.cd_name,
            cd_uid=ident.cd_uid,
            clique_id=ident.clique_id,
            node_name=ident.node_name,
            max_nodes=ident.max_nodes,
        )

    async def _label_pod(self) -> None:
        """The controller tells fabric from non-fabric daemon pods by this label."""
        ident = self.identity
        body = {"metadata": {"labels": {names.LABEL_CLIQUE_ID: ident.clique_id}}}
        core = CoreV1(self._api)
        await call_retrying(core.patch_namespaced_pod, ident.pod_name, ident.pod_namespace, body)

    # --- reacting to the clique ------------------------------------------------------

    async def _on_peers(self, daemons: list[dict[str, Any]]) -> None:
        await self._follow_peers(daemons)
        # The reference daemon's words at each wait for the next list (its main.go).
        vlog(log, 1, "Wait for updated ComputeDomainDaemonInfo list")

    async def _follow_peers(self, daemons: list[dict[str, Any]]) -> None:
        ident = self.identity
        mine = _usable([d for d in daemons if d.get("cliqueID") == ident.clique_id])
        own = next(
            (d for d in mine if (d.get("nodeName") or d.get("name")) == ident.node_name), None
        )
        if own is None:
            if self.index is not None and self.membership is not None:
                # We had joined, and someone removed our entry while we run (a controller
                # that pruned from a lagging cache, an admin's edit): peers would drop us
                # for good, so put it back. Never start IMEX without an entry.
                if self._may_rejoin is not None and not await self._may_rejoin():
                    log.info("our entry in clique %s is gone with its domain: not joining "
                             "again", ident.clique_id)
                    return
                log.warning("our entry in clique %s disappeared while running; joining again",
                            ident.clique_id)
                await self.membership.join(ident.pod_ip)
                if self._poller is not None:
                    self._poller.ready = None  # the new entry says NotReady: report again
                    self._poller.poke()
            return
        mappings = {
            int(d.get("index", 0)): d.get("ipAddress", "") for d in mine if d.get("ipAddress")
        }
        own_index = int(own.get("index", 0))
        if not self._dns:
            await self._ip_mode_update(mine)
            return
        text = files.render_hosts(
            _read(self.paths.hosts_file),
            ident.cd_uid,
            {i: ip for i, ip in mappings.items() if 0 <= i < ident.max_nodes},
            ident.max_nodes,
        )
        changed = files.write_hosts(self.paths.hosts_file, text)
        index_changed = self.index is not None and own_index != self.index
        self.index = own_index
        peers_changed = files.peers_changed(self._mappings, mappings)
        self._mappings = mappings
        if index_changed and self.imex.running:
            log.info(
                "own index changed to %d: restarting IMEX (it reads its identity only at start)",
                own_index,
            )
            if self._poller is not None:
                self._poller.mark_down()
            await self.imex.restart()
            return
        adopted_first = self.imex.adopted and not self._followed
        self._followed = True
        fresh = await self.imex.ensure_started()
        # An adopted child read these peers before: only a changed hosts file is news.
        if (changed or (peers_changed and not adopted_first)) and not fresh:
            await self.imex.signal_reload()

    async def _ip_mode_update(self, mine: list[dict[str, Any]]) -> None:
        """IMEXDaemonsWithDNSNames off: the nodes config lists IPs; IMEX restarts."""
        assert isinstance(self.membership, LegacyMembership)
        ips = [d["ipAddress"] for d in mine if d.get("ipAddress")]
        text = files.ip_nodes_config(ips)
        if _read(self.paths.nodes_config) == text and self.imex.running:
            vlog(log, 6, "IP set did not change")
            return
        files.write_nodes_config(self.paths.nodes_config, text)
        log.info("Got update, (re)start IMEX daemon")
        await self.imex.restart()

    async def _report_readiness(self, ready: bool, state: str) -> None:
        assert self.membership is not None
        await self.membership.set_status(ready)
        if self._on_readiness is not None:
            self._on_readiness(ready, state)

    # --- telling the admin why (Events on our pod) -------------------------------------

    async def _query_state(self) -> str:
        return await query_state(
            self.paths.imex_ctl_binary, str(self.paths.config), runner=self._ctl_runner
        )

    def _after_poll(self, ready: bool, state: str) -> None:
        self.state = state
        self._check_not_ready(ready, state, time.monotonic())

    def _check_not_ready(self, ready: bool, state: str, now: float) -> None:
        """IMEXDaemonNotReady once the running child has not been READY for longer than
        the threshold (since it started, or since it was last READY). `ready` is the
        readiness as reported after hysteresis: a poll that failed within the hysteresis
        window (a slow answer on a loaded node) is no reason to warn. A child that is not
        running is the crash Event's business."""
        if is_ready(state):
            self._ready_at = now
            return
        if ready:
            return
        started = self.imex.started_at
        if started is None or self._not_ready_after <= 0:
            return
        was_ready = self._ready_at is not None and self._ready_at > started
        since = self._ready_at if was_ready and self._ready_at is not None else started
        if now - since > self._not_ready_after:
            self.events.warning(
                REASON_NOT_READY, not_ready_message(state, now - since, was_ready=was_ready)
            )

    def _on_crash(self, code: int, ran: float, restart: int, delay: float) -> None:
        if self._poller is not None:
            self._poller.mark_down()
        self.events.warning(REASON_EXITED, exited_message(code, ran, restart, delay))


def _usable(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries with an integer index and, when set, a plain IP address, each with the index
    it holds (api/clique.py `settled_indices`: of two entries that wrote one index, the
    earlier keeps it and the later holds the one its writer will write next). Other daemons
    (or anyone with write access to the clique) write these; one malformed entry is skipped
    with a warning instead of stopping this daemon from following its peers."""
    out = []
    for d, held in zip(entries, settled_indices([d.get("index") for d in entries]),
                       strict=True):
        try:
            index = d.get("index", 0)
            if isinstance(index, bool) or not isinstance(index, int):
                raise ValueError(f"index {index!r} is not an integer")
            if d.get("ipAddress"):
                files.check_peer_ip(d["ipAddress"])
        except ValueError as err:
            log.warning("ignoring clique entry of %s: %s", d.get("nodeName") or d.get("name"), err)
            continue
        if held != index:
            vlog(log, 4, "clique entry of %s: index %d is held by an earlier entry; it holds "
                 "%d", d.get("nodeName") or d.get("name"), index, held)
        out.append({**d, "index": held})
    return out


def _read(path: Path) -> str:
    """A file the daemon owns, as text; "" if it is missing or not a plain file (a link in
    the pod-writable directory is then replaced by the next write, never read through)."""
    try:
        return read_file(path).decode(errors="replace")
    except (FileNotFoundError, NotRegularFileError):
        return ""
