"""Agent placement: the node agent itself supervises `nvidia-imex` for its node's domains.

In pod placement (the reference's model) a workload's channel Prepare waits until the
controller's per-domain DaemonSet has had a daemon pod created, scheduled, its claim
allocated and prepared, its container started and probed, and only then does nvidia-imex
start. Here the Prepare of a workload channel of domain X starts (or reuses) an
`ImexSupervisor` for X in this process (agent/daemon/supervisor.py, the same code the
daemon pod runs): the domain's directory, the clique join with the agent's IMEX address,
the IMEX and nodes configs, the peers' names in the agent's hosts file, the child, the
readiness polls. The Prepare returns the moment that node's nvidia-imex is READY and its
clique entry says so.

A supervisor ends when no prepared claim of its domain is left on the node (Unprepare),
or when its domain is deleted (the agent's node label is taken away by the controller, or
the cleanup finds the domain gone): nvidia-imex is stopped and the entry removed. When the
agent itself stops or restarts, the supervisors only detach: nvidia-imex keeps running
(agent/daemon/detached.py) and the next agent adopts it, so an agent restart never
disturbs a running domain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from agent.checkpoint import Checkpoint, ClaimEntry
from agent.checkpoint.model import ClaimState
from agent.daemon.detached import DetachedLauncher
from agent.daemon.events import PodEvents
from agent.daemon.identity import DaemonIdentity
from agent.daemon.process import AdoptingLauncher
from agent.daemon.readiness import CtlRunner
from agent.daemon.supervisor import ImexSupervisor, SupervisorPaths
from agent.plugin.claim_errors import ClaimError
from agent.plugin.claimconfig import groups_for
from api import names
from api.computedomain import StoredComputeDomain
from api.resourceclaim import AllocationResult
from api.validation_error import ValidationError
from cdi.atomic import make_dirs, write_if_changed
from runtime.events import node_ref

log = logging.getLogger(__name__)

RETRY_MIN_S = 1.0
RETRY_MAX_S = 30.0
STOP_GRACE_S = 10.0


def used_domains(checkpoint: Checkpoint, *, prepared_only: bool = False) -> set[str]:
    """The domains the checkpoint's channel claims refer to: prepared ones, and (unless
    `prepared_only`) those whose Prepare started."""
    return {uid for entry in checkpoint.claims.values()
            if entry.state == ClaimState.PREPARE_COMPLETED
            or (not prepared_only and entry.state == ClaimState.PREPARE_STARTED)
            for uid in _entry_domains(entry)}




def _entry_domains(entry: ClaimEntry) -> set[str]:
    """The domains of a checkpoint entry's channel configs: from what it prepared, or, while
    its Prepare has not completed, from its stored allocation."""
    if entry.prepared:
        return {g.domain_id for g in entry.prepared
                if g.config_type == names.DEVICE_TYPE_CHANNEL and g.domain_id}
    allocation = (entry.status or {}).get("allocation")
    if not allocation:
        return set()
    try:
        groups = groups_for(AllocationResult.from_dict(allocation), strict=False)
    except (ClaimError, ValidationError):
        return set()
    return {g.config.domain_id for g in groups if g.is_channel}


@dataclass(frozen=True)
class ImexHostSettings:
    node_name: str
    namespace: str  # the driver namespace, where the cliques live
    address: str  # what nvidia-imex listens on and its peers reach
    domains_dir: Path  # one private directory per domain: configs, child record, log
    hosts_file: Path
    imex_binary: str
    imex_ctl_binary: str
    max_nodes: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    dns_names: bool = True
    cliques: bool = True
    poll_s: float = 1.0
    reload_s: float = 5.0
    not_ready_event_after: float = 60.0
    check_local: bool = True
    template: bytes = b""  # the IMEX config template (agent/templates)


@dataclass
class ImexHooks:
    """The process boundary: how a domain's child is started and adopted, how
    nvidia-imex-ctl runs, the child's environment (None: the agent's). The simulated
    cluster at scale replaces all three (sim/cluster/inprocess.py)."""

    launcher_for: Callable[[Path], AdoptingLauncher] = DetachedLauncher
    ctl_runner: CtlRunner | None = None
    env: Mapping[str, str] | None = None


@dataclass(eq=False)
class _Hosted:
    cd: StoredComputeDomain
    clique_id: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    supervisor: ImexSupervisor | None = None
    ready: bool = False
    error: str = ""
    detach: bool = False


class ImexHost:
    def __init__(self, api: client.ApiClient, settings: ImexHostSettings, *,
                 notify: Callable[[], None],
                 domain_wanted: Callable[[str], Awaitable[bool]],
                 hooks: ImexHooks | None = None) -> None:
        """`notify()` wakes Prepares waiting for readiness; `domain_wanted(uid)` reads the
        domain again and says whether it still exists and is not being deleted."""
        self._api = api
        self._s = settings
        self._notify = notify
        self._wanted = domain_wanted
        self._hooks = hooks or ImexHooks()
        self._hosted: dict[str, _Hosted] = {}

    # --- what the driver asks ------------------------------------------------------------

    @property
    def domains(self) -> list[str]:
        return list(self._hosted)

    def ensure(self, cd: StoredComputeDomain, clique_id: str) -> None:
        """Supervise IMEX for `cd` on this node (once; a running supervisor is kept)."""
        hosted = self._hosted.get(cd.uid)
        if hosted is not None:
            return
        hosted = self._hosted[cd.uid] = _Hosted(cd, clique_id)
        hosted.task = asyncio.get_running_loop().create_task(
            self._run(hosted), name=f"imex-{cd.uid}")
        log.info("supervising nvidia-imex for ComputeDomain %s/%s (%s) in clique %s",
                 cd.namespace, cd.name, cd.uid, clique_id)

    def ready(self, cd_uid: str) -> bool:
        hosted = self._hosted.get(cd_uid)
        return hosted is not None and hosted.ready

    def describe(self, cd_uid: str) -> str:
        """Where this node's IMEX of the domain stands, for a waiting claim's message."""
        hosted = self._hosted.get(cd_uid)
        if hosted is None:
            return "not started"
        sup = hosted.supervisor
        if hosted.error:
            return f"its last start failed: {hosted.error}"
        if sup is None or sup.index is None:
            return "joining its clique"
        pid = sup.imex.pid
        if pid is None:
            return f"index {sup.index} in clique {hosted.clique_id}, nvidia-imex not running"
        return (f"index {sup.index} in clique {hosted.clique_id}, nvidia-imex pid {pid} is "
                f"{sup.state or 'starting'}")

    def imex_pid(self, cd_uid: str) -> int | None:
        hosted = self._hosted.get(cd_uid)
        sup = hosted.supervisor if hosted is not None else None
        return sup.imex.pid if sup is not None else None

    async def release(self, cd_uid: str) -> None:
        """Stop this node's IMEX of the domain and leave its clique (no claim of it is
        left here, or it is deleted)."""
        hosted = self._hosted.pop(cd_uid, None)
        if hosted is None:
            return
        log.info("ComputeDomain %s no longer needs this node: stopping its nvidia-imex", cd_uid)
        await self._end(hosted)
        self._notify()

    async def release_unused(self, checkpoint: Checkpoint) -> None:
        """Release every domain no claim in the checkpoint (being prepared or prepared)
        refers to any more: its last workload on this node is gone."""
        used = used_domains(checkpoint)
        for uid in self.domains:
            if uid not in used:
                await self.release(uid)

    async def resume(self, checkpoint: Checkpoint, lookup: Callable[
            [str], Awaitable[StoredComputeDomain | None]], clique_id: str) -> None:
        """At start: supervise again every domain whose channel claims are prepared here
        (adopting the nvidia-imex the previous agent left running), and stop the recorded
        nvidia-imex of any other domain (deleted while no agent ran)."""
        wanted: set[str] = set()
        if clique_id:
            for uid in sorted(used_domains(checkpoint, prepared_only=True)):
                cd = await lookup(uid)
                if cd is not None and not cd.deleting:
                    self.ensure(cd, clique_id)
                    wanted.add(uid)
        await self.stop_orphans(keep=wanted)

    async def stop_orphans(self, keep: Iterable[str] = ()) -> list[str]:
        """Stop the recorded children of domains not in `keep` and not supervised."""
        stopped: list[str] = []
        skip = set(keep) | set(self._hosted)
        if not self._s.domains_dir.is_dir():
            return stopped
        for directory in sorted(self._s.domains_dir.iterdir()):
            if directory.name in skip or not directory.is_dir():
                continue
            if await self._stop_recorded(directory):
                stopped.append(directory.name)
        return stopped

    async def _stop_recorded(self, directory: Path) -> bool:
        launcher = self._hooks.launcher_for(directory)
        child = await launcher.adopt(self._command(directory))
        if child is None:
            return False
        log.info("stopping nvidia-imex pid %d of ComputeDomain %s, which this node no "
                 "longer serves", child.pid, directory.name)
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_GRACE_S):
                await child.wait()
        except TimeoutError:
            child.kill_group()
        launcher.forget()
        return True

    def _command(self, directory: Path) -> list[str]:
        """nvidia-imex's command line, as the supervisor runs it (supervisor.py)."""
        return [self._s.imex_binary, "-c", str(directory / names.IMEXD_CONFIG)]

    async def release_unwanted(self, uids: Iterable[str] | None = None) -> list[str]:
        """Release the supervised domains (of `uids`, None: all) that are gone or being
        deleted; the released uids."""
        released = []
        for uid in list(self._hosted if uids is None else uids):
            if uid in self._hosted and not await self._wanted(uid):
                await self.release(uid)
                released.append(uid)
        return released

    async def detach_all(self) -> None:
        """The agent stops: every supervisor ends, every nvidia-imex keeps running."""
        hosted, self._hosted = list(self._hosted.values()), {}
        for h in hosted:
            h.detach = True
            if h.supervisor is not None:
                h.supervisor.detach_on_stop()
        await asyncio.gather(*(self._end(h) for h in hosted))

    # --- one domain ----------------------------------------------------------------------

    async def _end(self, hosted: _Hosted) -> None:
        hosted.stop.set()
        task = hosted.task
        if task is None:
            return
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():  # our caller was cancelled: the supervisor still ends
                raise
        except Exception:  # logged by _run
            pass

    def _set_ready(self, hosted: _Hosted, ready: bool) -> None:
        if hosted.ready != ready:
            hosted.ready = ready
            self._notify()

    async def _run(self, hosted: _Hosted) -> None:
        """The supervisor, started again after a failure (backoff) until stopped."""
        delay = RETRY_MIN_S
        while not hosted.stop.is_set():
            sup = hosted.supervisor = self._supervisor(hosted)
            if hosted.detach:
                sup.detach_on_stop()
            try:
                await sup.run(hosted.stop)
                hosted.error = ""
            except asyncio.CancelledError:
                raise
            except Exception as err:
                hosted.error = str(err) or type(err).__name__
                log.warning("nvidia-imex supervision of ComputeDomain %s failed (retrying "
                            "in %.0fs): %s", hosted.cd.uid, delay, hosted.error)
            self._set_ready(hosted, False)
            if hosted.stop.is_set():
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await hosted.stop.wait()
            delay = min(delay * 2, RETRY_MAX_S)

    def _supervisor(self, hosted: _Hosted) -> ImexSupervisor:
        s, cd = self._s, hosted.cd
        directory = s.domains_dir / cd.uid
        make_dirs(directory, 0o700)
        write_if_changed(directory / names.IMEXD_CONFIG_TEMPLATE, s.template)
        identity = DaemonIdentity(
            clique_id=hosted.clique_id, cd_uid=cd.uid, cd_name=cd.name,
            cd_namespace=cd.namespace, node_name=s.node_name, pod_ip=s.address, pod_uid="",
            pod_name="", pod_namespace=s.namespace, max_nodes=s.max_nodes)
        events = PodEvents(self._api, identity, involved=node_ref(s.node_name))

        def readiness(ready: bool, _state: str) -> None:
            self._set_ready(hosted, ready)

        async def may_rejoin() -> bool:
            return await self._wanted(cd.uid)

        return ImexSupervisor(
            identity, self._api, dns_names=s.dns_names, cliques=s.cliques,
            paths=SupervisorPaths(imexd_dir=directory, hosts_file=s.hosts_file,
                                  imex_binary=s.imex_binary, imex_ctl_binary=s.imex_ctl_binary),
            poll_interval=s.poll_s, check_local=s.check_local,
            launcher=self._hooks.launcher_for(directory), ctl_runner=self._hooks.ctl_runner,
            imex_env=self._hooks.env, events=events, reload_interval=s.reload_s,
            not_ready_event_after=s.not_ready_event_after,
            label_pod=False, adopt=True, on_readiness=readiness, may_rejoin=may_rejoin)
