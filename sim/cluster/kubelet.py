"""A simulated kubelet: claims prepared, containers "run", status reported.

An API server only stores pods; nothing would ever make one Running, prepare its claims
through the driver, or start the driver's own daemon pods. `SimKubelet` does one node's
part of that, against either control plane through the real `kubernetes` client (with the
node's own credentials, so Node authorization applies on kube-apiserver) and against the
real agent through `dra.py` (the same gRPC contract as kubelet):

- the Node is registered and its Lease renewed (`nodestatus`), and the kubelet API that
  kube-apiserver calls for `kubectl logs` is served (`kubeletapi`), when given a NodeSpec
  and TLS;
- every pod bound to the node gets its ResourceClaims (read by name, as kubelet does)
  prepared once they are allocated and reserved for it, with kubelet's retry and
  `FailedPrepareDynamicResources` Events;
- an executed container gets a kubeconfig with a token of its pod's ServiceAccount bound
  to the pod (TokenRequest), as kubelet projects one into `kube-api-access`;
- each container's CDI view is written to `<pods_dir>/<namespace>_<pod>/<container>.json`,
  which is what tests and users inspect instead of a real container;
- containers whose command starts with one of `run_commands_starting_with` (the driver's
  daemon) run with probes and restarts, through a `ContainerExecutor`: real processes by
  default (`ProcessExecutor`), tasks of this process at scale (`sim.cluster.inprocess`);
  any other container is a workload that counts as running once its claims are prepared;
- deletion is graceful: SIGTERM, grace period, SIGKILL, unprepare, then the final
  grace-0 delete that lets the emulator drop the pod;
- a DRA driver that deregisters (its registration socket is gone) loses its ResourceSlices
  of this node after `wipe_slices_after` seconds unless it registers again in between, as
  kubelet's DRA handler does (30 s there, so a restarting plugin does not churn them).

Simplifications: init containers, images and volumes are ignored; restartPolicy is
always treated as Always; one pod IP (a loopback address) stands for the node and its pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import os
import shutil
import signal
import ssl
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from kubernetes import client

from api import names
from api.kube import Informer, call, call_retrying, error_text, status_of
from cdi import CDIError
from sim.cluster.containerview import ContainerView, container_view
from sim.cluster.dra import ClaimRef, DraClient, DraError, PluginWatcher, PreparedClaim
from sim.cluster.kubeletapi import KubeletServer, PodLogs
from sim.cluster.nodestatus import NodeAgent, NodeSpec
from sim.controlplane.base import Credentials

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# CDI mounts the agent cannot get as a bind mount (it runs on the host): container path ->
# the env variable through which the agent is told the host path instead.
MOUNT_ENV: Mapping[str, str] = MappingProxyType({names.IMEXD_DIR: "IMEXD_DIR"})
PREPARE_FAILED = "FailedPrepareDynamicResources"
# How often waits on caches re-check state that no informer reports (e.g. plugin sockets).
_POLL = 0.1
# kubelet's wipingDelay: how long a deregistered DRA driver's ResourceSlices outlive it.
WIPE_SLICES_AFTER = 30.0
# What kubelet asks for a projected ServiceAccount token; kube-apiserver extends such a
# token's life (--service-account-extend-token-expiration) and kubelet renews it.
POD_TOKEN_SECONDS = 3607


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace') or ''}/{md.get('name')}"


def backoff(attempt: int, base: float, cap: float) -> float:
    """kubelet-style doubling delay: base, 2*base, 4*base, ... capped at `cap`."""
    return min(base * (2 ** min(attempt, 30)), cap)


def pod_claim_names(pod: Mapping[str, Any]) -> dict[str, str | None]:
    """Pod-level claim name -> ResourceClaim name (None while the template's claim has not
    been created and recorded in `status.resourceClaimStatuses` yet)."""
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    }
    out: dict[str, str | None] = {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        name = entry.get("name")
        out[name] = entry.get("resourceClaimName") or statuses.get(name)
    return out


def claim_ready_for(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """Allocated and reserved for the pod: kubelet prepares nothing before both hold."""
    status = claim.get("status") or {}
    return bool(status.get("allocation")) and any(
        r.get("uid") == pod_uid for r in status.get("reservedFor") or ()
    )


def _field_value(path: str, pod: Mapping[str, Any], node: str, pod_ip: str) -> str:
    md = pod.get("metadata") or {}
    values = {
        "spec.nodeName": node,
        "status.podIP": pod_ip,
        "status.hostIP": pod_ip,
        "metadata.uid": md.get("uid") or "",
        "metadata.name": md.get("name") or "",
        "metadata.namespace": md.get("namespace") or "",
    }
    return values.get(path, "")


def container_env(
    container: Mapping[str, Any], pod: Mapping[str, Any], node: str, pod_ip: str
) -> dict[str, str]:
    """The container's own `env`: plain values and the downward-API fieldRefs we know."""
    env: dict[str, str] = {}
    for item in container.get("env") or ():
        name = item.get("name")
        if not name:
            continue
        if "value" in item and item["value"] is not None:
            env[name] = str(item["value"])
            continue
        ref = (item.get("valueFrom") or {}).get("fieldRef")
        if ref:
            env[name] = _field_value(ref.get("fieldPath", ""), pod, node, pod_ip)
    return env


# --------------------------------------------------------------------------------------
# How executed containers run


class RunningContainer(Protocol):
    """A started container's main program."""

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def signal(self, sig: int) -> None:
        """Deliver `sig` to the container (all its processes); no-op once it is gone."""


class ContainerExecutor(Protocol):
    """Runs executed containers' commands and exec probes with a given environment."""

    async def start(self, argv: list[str], env: dict[str, str], log_path: Path) -> RunningContainer:
        """Start `argv` (stdout and stderr appended to `log_path`); OSError if it cannot."""
        ...

    async def probe(self, argv: list[str], env: dict[str, str], timeout: float) -> bool:
        """Run an exec probe: True if it exited 0 within `timeout` seconds."""
        ...


def _resolve(argv: list[str], env: Mapping[str, str]) -> list[str]:
    found = shutil.which(argv[0], path=env.get("PATH"))
    return [found or argv[0], *argv[1:]]


class _ProcessContainer:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def wait(self) -> int:
        return await self.proc.wait()

    def signal(self, sig: int) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)


class ProcessExecutor:
    """The default: each container and each probe is a real process in its own session."""

    async def start(self, argv: list[str], env: dict[str, str], log_path: Path) -> RunningContainer:
        with log_path.open("ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *_resolve(argv, env),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        return _ProcessContainer(proc)

    async def probe(self, argv: list[str], env: dict[str, str], timeout: float) -> bool:
        try:
            proc = await asyncio.create_subprocess_exec(
                *_resolve(argv, env),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            return False
        try:
            return await asyncio.wait_for(proc.wait(), timeout) == 0
        except TimeoutError:
            return False
        finally:
            # Timed out, or the pod stopped (cancelled) with the probe still running: a
            # probe never outlives its container.
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(proc.wait())


# --------------------------------------------------------------------------------------
# One executed container


class _Process:
    """One executed container: its process across restarts, its probes, its status."""

    def __init__(
        self,
        kubelet: SimKubelet,
        spec: Obj,
        env: dict[str, str],
        log_path: Path,
        on_change: Any,
        grace: float,
    ) -> None:
        self.kubelet = kubelet
        self.grace = grace  # for probe-triggered restarts, like terminationGracePeriod
        self.spec = spec
        self.name: str = spec["name"]
        self.env = env
        self.log_path = log_path
        self.on_change = on_change
        self.proc: RunningContainer | None = None
        self.restart_count = 0
        self.started = False
        self.ready = False
        self.state: Obj = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: Obj = {}
        self.stopping = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._supervise(), name=f"container-{self.name}")

    def _argv(self) -> list[str]:
        return [*(self.spec.get("command") or ()), *(self.spec.get("args") or ())]

    async def _supervise(self) -> None:
        """Run, wait, restart with backoff (restartPolicy Always) until stopped."""
        failures = 0
        while not self.stopping:
            probes: asyncio.Task[None] | None = None
            try:
                self.proc = await self.kubelet.executor.start(
                    self._argv(), self.env, self.log_path
                )
            except OSError as err:
                self.proc = None
                self._set_terminated(128, "StartError", str(err))
            else:
                self.state = {"running": {"startedAt": _now()}}
                self.started = not self.spec.get("startupProbe")
                self.ready = self.started and not self.spec.get("readinessProbe")
                self.on_change()
                probes = asyncio.create_task(self._probe_all(), name=f"probes-{self.name}")
                try:
                    code = await self.proc.wait()
                finally:
                    probes.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await probes
                self._set_terminated(code, "Completed" if code == 0 else "Error", "")
            if self.stopping:
                return
            delay = backoff(failures, self.kubelet.backoff_base, self.kubelet.backoff_cap)
            failures += 1
            await asyncio.sleep(delay)
            self.restart_count += 1

    def _set_terminated(self, code: int, reason: str, message: str) -> None:
        terminated: Obj = {"exitCode": code, "reason": reason, "finishedAt": _now()}
        if message:
            terminated["message"] = message
        self.last_state = {"terminated": terminated}
        self.state = {"terminated": terminated}
        self.started = False
        self.ready = False
        self.on_change()

    # --- probes -------------------------------------------------------------------------

    def _period(self, probe: Mapping[str, Any], key: str, default: float) -> float:
        value = float(probe.get(key, default))
        cap = self.kubelet.probe_period_cap
        return min(value, cap) if cap is not None else value

    async def _probe_once(self, probe: Mapping[str, Any]) -> bool:
        command = list((probe.get("exec") or {}).get("command") or ())
        if not command:
            return True  # only exec probes are simulated; others count as passing
        timeout = float(probe.get("timeoutSeconds", 1))
        return await self.kubelet.executor.probe(command, self.env, timeout)

    async def _probe_all(self) -> None:
        """Startup first; then readiness (drives Ready) and liveness (restarts) together."""
        startup = self.spec.get("startupProbe")
        if startup and not await self._run_probe(startup, "startup"):
            return
        tasks = [
            asyncio.create_task(self._run_probe(p, kind))
            for kind in ("readiness", "liveness")
            if (p := self.spec.get(f"{kind}Probe"))
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    async def _run_probe(self, probe: Mapping[str, Any], kind: str) -> bool:
        """Loop one probe; returns True once a startup probe passed, False after a kill."""
        await asyncio.sleep(self._period(probe, "initialDelaySeconds", 0))
        period = self._period(probe, "periodSeconds", 10)
        failure_threshold = int(probe.get("failureThreshold", 3))
        success_threshold = int(probe.get("successThreshold", 1))
        successes = failures = 0
        while True:
            if await self._probe_once(probe):
                successes, failures = successes + 1, 0
            else:
                successes, failures = 0, failures + 1
            if kind == "startup" and successes >= 1:
                self.started = True
                self.ready = not self.spec.get("readinessProbe")
                self.on_change()
                return True
            if kind == "readiness":
                if successes >= success_threshold and not self.ready:
                    self.ready = True
                    self.on_change()
                elif failures >= failure_threshold and self.ready:
                    self.ready = False
                    self.on_change()
            elif failures >= failure_threshold:  # startup or liveness: restart the container
                log.info("container %s failed its %s probe; restarting", self.name, kind)
                await self.signal(signal.SIGTERM)
                await asyncio.sleep(self.grace)
                await self.signal(signal.SIGKILL)
                return False
            await asyncio.sleep(period)

    # --- stopping -----------------------------------------------------------------------

    async def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.signal(sig)

    async def stop(self, grace: float) -> None:
        """SIGTERM, wait up to `grace` seconds, SIGKILL; no restart afterwards."""
        self.stopping = True
        await self.signal(signal.SIGTERM)
        if self.proc is not None:
            try:
                await asyncio.wait_for(self.proc.wait(), grace)
            except TimeoutError:
                await self.signal(signal.SIGKILL)
                await self.proc.wait()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        # A process spawned while the task was being cancelled must not outlive the pod.
        await self.signal(signal.SIGKILL)


# --------------------------------------------------------------------------------------
# One pod


class _PodWorker:
    """Drives one pod (by UID) from bound to removed."""

    def __init__(self, kubelet: SimKubelet, pod: Obj) -> None:
        self.kubelet = kubelet
        md = pod["metadata"]
        self.key = _key(pod)
        self.namespace: str = md["namespace"]
        self.name: str = md["name"]
        self.uid: str = md["uid"]
        self.dir = kubelet.pods_dir / f"{self.namespace}_{self.name}"
        self.prepared: dict[str, PreparedClaim] = {}  # pod claim name -> prepared claim
        self.refs: list[ClaimRef] = []
        self.processes: dict[str, _Process] = {}
        self.initialized = False
        self.kubeconfig: Path | None = None
        self._dirty = asyncio.Event()
        self._workload_started = ""

    # --- cache views --------------------------------------------------------------------

    def pod(self) -> Obj | None:
        pod = self.kubelet.pods.items.get(self.key) if self.kubelet.pods else None
        if pod is None or pod["metadata"].get("uid") != self.uid:
            return None
        return pod

    def ending(self) -> bool:
        pod = self.pod()
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

    # --- lifecycle ----------------------------------------------------------------------

    async def run(self) -> None:
        writer = asyncio.create_task(self._write_status_loop(), name=f"status-{self.key}")
        try:
            if await self._setup():
                while not await self._sleep_unless_ending(3600):
                    pass
            await self._terminate()
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    async def _sleep_unless_ending(self, delay: float) -> bool:
        """Sleep `delay` seconds; True if the pod started ending meanwhile."""
        assert self.kubelet.pods is not None
        return await self.kubelet.pods.wait_for(self.ending, timeout=delay)

    async def _setup(self) -> bool:
        """Prepare claims, publish views, start containers; False if the pod ended first."""
        claims = await self._wait_claims()
        if claims is None:
            return False
        attempt = 0
        while True:
            try:
                await self._prepare(claims)
                views = self._views()
                break
            except (DraError, CDIError) as err:
                await self.kubelet.record_event(self.pod(), PREPARE_FAILED, str(err))
            delay = backoff(attempt, self.kubelet.backoff_base, self.kubelet.backoff_cap)
            attempt += 1
            if await self._sleep_unless_ending(delay):
                return False
        self.dir.mkdir(parents=True, exist_ok=True)
        # The pod's /etc/hosts, as kubelet writes it (the daemon adds its peers' names).
        hosts = self.dir / "hosts"
        if not hosts.exists():
            hosts.write_text(f"127.0.0.1\tlocalhost\n{self.kubelet.pod_ip}\t{self.name}\n")
        for name, view in views.items():
            (self.dir / f"{name}.json").write_text(json.dumps(view.to_dict(), indent=2) + "\n")
        pod = self.pod()
        if pod is None:
            return False
        containers = (pod.get("spec") or {}).get("containers") or ()
        if self.kubelet.server is not None and any(map(self.kubelet.executes, containers)):
            token = await self._token(pod)
            if self.ending():
                return False
            if token is not None:
                self.kubeconfig = self.kubelet.server.with_token(token).write_kubeconfig(
                    self.dir / "serviceaccount" / "kubeconfig", namespace=self.namespace
                )
        self.initialized = True
        for spec in containers:
            if self.kubelet.executes(spec):
                process = _Process(
                    self.kubelet,
                    spec,
                    self._env(pod, spec, views[spec["name"]]),
                    self.dir / f"{spec['name']}.log",
                    self._dirty.set,
                    float(pod["spec"].get("terminationGracePeriodSeconds", 30)),
                )
                self.processes[spec["name"]] = process
                process.start()
        self._dirty.set()
        return True

    async def _token(self, pod: Obj) -> str | None:
        """The pod's ServiceAccount token; until it can be had, a FailedMount Event and a
        retry after kubelet's backoff, as for a projected volume that cannot be set up."""
        attempt = 0
        while True:
            try:
                return await self.kubelet.service_account_token(pod)
            except Exception as err:
                await self.kubelet.record_event(
                    pod,
                    "FailedMount",
                    'MountVolume.SetUp failed for volume "kube-api-access": failed to fetch '
                    f"token: {error_text(err)}",
                )
            delay = backoff(attempt, self.kubelet.backoff_base, self.kubelet.backoff_cap)
            attempt += 1
            if await self._sleep_unless_ending(delay):
                return None

    async def _wait_claims(self) -> dict[str, Obj] | None:
        """Pod claim name -> its ResourceClaim, once every one is allocated and reserved.

        As kubelet's DRA manager: each claim is read by name when the pod arrives (Node
        authorization lets a node read exactly the claims of its pods); a claim not yet
        reserved for the pod is read again after a short, growing delay."""
        kubelet = self.kubelet
        attempt = 0
        while True:
            pod = self.pod()
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return None
            found: dict[str, Obj] = {}
            for pod_name, claim_name in pod_claim_names(pod).items():
                claim = await kubelet.read_claim(self.namespace, claim_name) if claim_name else None
                if claim is None or not claim_ready_for(claim, self.uid):
                    break
                found[pod_name] = claim
            else:
                return found
            # A pod's claim status or the claim's reservation may still be on its way.
            if await self._sleep_unless_ending(min(_POLL * 2**attempt, 1.0)):
                return None
            attempt += 1

    async def _prepare(self, claims: Mapping[str, Obj]) -> None:
        """NodePrepareResources for this driver's claims (all at once, as kubelet does)."""
        kubelet = self.kubelet
        ours = {
            pod_name: claim
            for pod_name, claim in claims.items()
            if any(
                r.get("driver") == kubelet.driver_name
                for r in claim["status"]["allocation"].get("devices", {}).get("results") or ()
            )
        }
        self.refs = [ClaimRef.of(c) for c in ours.values()]
        if not ours:
            return
        plugin = kubelet.watcher.plugins.get(kubelet.driver_name)
        if plugin is None:
            raise DraError(f"DRA driver {kubelet.driver_name} is not registered")
        by_uid = await kubelet.dra.prepare(plugin, self.refs)
        self.prepared = {name: by_uid[c["metadata"]["uid"]] for name, c in ours.items()}

    def _views(self) -> dict[str, ContainerView]:
        pod = self.pod() or {}
        views: dict[str, ContainerView] = {}
        for spec in (pod.get("spec") or {}).get("containers") or ():
            ids: list[str] = []
            for use in (spec.get("resources") or {}).get("claims") or ():
                prepared = self.prepared.get(use.get("name"))
                if prepared is not None:
                    ids.extend(prepared.cdi_ids(use.get("request") or None))
            views[spec["name"]] = container_view(ids, self.kubelet.cdi_dirs)
        return views

    def _env(self, pod: Obj, spec: Obj, view: ContainerView) -> dict[str, str]:
        kubelet = self.kubelet
        env = dict(os.environ)
        env.update(container_env(spec, pod, kubelet.node_name, kubelet.pod_ip))
        env.update(view.env)
        for mount in view.mounts:
            if mount.container_path in MOUNT_ENV:
                env[MOUNT_ENV[mount.container_path]] = mount.host_path
        env["HOSTS_FILE"] = str(self.dir / "hosts")
        if self.kubeconfig is not None:  # the in-cluster credentials, as a kubeconfig
            env[names.ENV_KUBECONFIG] = str(self.kubeconfig)
        pod_dir = str(self.dir)
        env.update({k: v.replace("{pod_dir}", pod_dir) for k, v in kubelet.env_extra.items()})
        if kubelet.path_extra:
            env["PATH"] = os.pathsep.join([*map(str, kubelet.path_extra), env.get("PATH", "")])
        return env

    async def _terminate(self) -> None:
        """Graceful stop, unprepare (retried), then the confirming grace-0 delete."""
        pod = self.pod()
        grace = float(((pod or {}).get("metadata") or {}).get("deletionGracePeriodSeconds") or 0)
        await asyncio.gather(*(p.stop(grace) for p in self.processes.values()))
        attempt = 0
        while self.refs:
            kubelet = self.kubelet
            try:
                plugin = kubelet.watcher.plugins.get(kubelet.driver_name)
                if plugin is None:
                    raise DraError(f"DRA driver {kubelet.driver_name} is not registered")
                await kubelet.dra.unprepare(plugin, self.refs)
                break
            except DraError as err:
                log.warning("pod %s: unprepare failed: %s", self.key, err)
            await asyncio.sleep(backoff(attempt, kubelet.backoff_base, kubelet.backoff_cap))
            attempt += 1
        shutil.rmtree(self.dir, ignore_errors=True)
        if pod is not None:
            try:
                await call(
                    self.kubelet.core.delete_namespaced_pod,
                    self.name,
                    self.namespace,
                    grace_period_seconds=0,
                    body=client.V1DeleteOptions(
                        grace_period_seconds=0, preconditions={"uid": self.uid}
                    ),
                )
            except client.ApiException as err:
                if err.status not in (404, 409):
                    raise

    # --- status -------------------------------------------------------------------------

    def status(self, pod: Obj) -> Obj:
        """The pod status kubelet would report now."""
        specs = (pod.get("spec") or {}).get("containers") or ()
        statuses = []
        for spec in specs:
            process = self.processes.get(spec["name"])
            entry: Obj = {
                "name": spec["name"],
                "image": spec.get("image") or "",
                "imageID": "",
                "restartCount": 0,
            }
            if process is not None:
                entry |= {
                    "ready": process.ready,
                    "started": process.started,
                    "restartCount": process.restart_count,
                    "state": process.state,
                }
                if process.last_state:
                    entry["lastState"] = process.last_state
            elif self.initialized:
                entry |= {"ready": True, "started": True, "state": self._workload_running}
            else:
                entry |= {
                    "ready": False,
                    "started": False,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            statuses.append(entry)
        ready = self.initialized and all(s["ready"] for s in statuses)
        running = self.initialized
        old = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or ()}

        def condition(kind: str, value: bool) -> Obj:
            text = "True" if value else "False"
            previous = old.get(kind) or {}
            since = previous.get("lastTransitionTime") if previous.get("status") == text else None
            return {"type": kind, "status": text, "lastTransitionTime": since or _now()}

        status = dict(pod.get("status") or {})
        # kubelet owns these conditions; the scheduler's (PodScheduled) and others stay.
        owned = {"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"}
        kept = [c for c in old.values() if c.get("type") not in owned]
        if "PodScheduled" not in old:
            kept.append(condition("PodScheduled", True))
        status.update(
            {
                "phase": "Running" if running else "Pending",
                "hostIP": self.kubelet.pod_ip,
                "hostIPs": [{"ip": self.kubelet.pod_ip}],
                "podIP": self.kubelet.pod_ip,
                "podIPs": [{"ip": self.kubelet.pod_ip}],
                "conditions": [
                    condition("PodReadyToStartContainers", self.initialized),
                    condition("Initialized", self.initialized),
                    condition("Ready", ready),
                    condition("ContainersReady", ready),
                    *kept,
                ],
                "containerStatuses": statuses,
            }
        )
        status.setdefault("startTime", _now())
        return status

    @property
    def _workload_running(self) -> Obj:
        self._workload_started = self._workload_started or _now()
        return {"running": {"startedAt": self._workload_started}}

    async def _write_status_loop(self) -> None:
        """Write the status whenever it changes; retried until it lands."""
        self._dirty.set()
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self._write_status()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                if status_of(err) == 404:
                    return
                log.debug("pod %s: status write failed: %s", self.key, err)
                await asyncio.sleep(_POLL)
                self._dirty.set()

    async def _write_status(self) -> None:
        core = self.kubelet.core
        current = self.kubelet.api.sanitize_for_serialization(
            await call(core.read_namespaced_pod, self.name, self.namespace)
        )
        if current["metadata"].get("uid") != self.uid:
            return
        status = self.status(current)
        if status == current.get("status"):
            return
        current["status"] = status
        await call(core.replace_namespaced_pod_status, self.name, self.namespace, current)


# --------------------------------------------------------------------------------------
# The kubelet


class SimKubelet:
    """One node's kubelet: pod lifecycle plus DRA, against the API server and the real agent.

    `await register()` registers the Node and serves the kubelet API (given `node` and
    `tls`); `start()` begins watching (pods bound to `node_name`) and the plugin
    registration directory; every pod gets its own worker task. `stop()` stops
    watching and kills the processes it started, without unpreparing anything (as if the
    kubelet and its containers died together), so tests leave nothing running.

    `env_extra` reaches every executed container; `{pod_dir}` in a value becomes the pod's
    own directory (where its hosts file, logs and views live). `executor` runs them
    (default: real processes). `wipe_slices_after` (None: never) is the delay after which
    a deregistered driver's ResourceSlices of this node are deleted.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        *,
        registry_dir: Path,
        cdi_dirs: Sequence[Path],
        pods_dir: Path,
        pod_ip: str = "127.0.1.1",
        env_extra: Mapping[str, str] | None = None,
        path_extra: Sequence[Path | str] | None = None,
        run_commands_starting_with: Sequence[str] = ("compute-domain-agent",),
        probe_period_cap: float | None = None,
        backoff_base: float = 1.0,
        backoff_cap: float = 10.0,
        driver_name: str = names.DRIVER_NAME,
        plugin_poll: float = 0.2,
        executor: ContainerExecutor | None = None,
        wipe_slices_after: float | None = WIPE_SLICES_AFTER,
        node: NodeSpec | None = None,
        tls: ssl.SSLContext | None = None,
        server: Credentials | None = None,
    ) -> None:
        self.api = api_client
        self.executor: ContainerExecutor = executor or ProcessExecutor()
        self.core = client.CoreV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.node_name = node_name
        self.cdi_dirs = [Path(d) for d in cdi_dirs]
        self.pods_dir = Path(pods_dir)
        self.pod_ip = pod_ip
        self.env_extra = dict(env_extra or {})
        self.path_extra = list(path_extra or ())
        self.run_commands = tuple(run_commands_starting_with)
        self.probe_period_cap = probe_period_cap
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.driver_name = driver_name
        self.wipe_slices_after = wipe_slices_after
        self.watcher = PluginWatcher(
            Path(registry_dir),
            poll=plugin_poll,
            on_registered=self._cancel_wipe,
            on_deregistered=self._schedule_wipe,
        )
        self.dra = DraClient()
        self.pods: Informer | None = None
        self.workers: dict[str, tuple[_PodWorker, asyncio.Task[None]]] = {}
        self._watcher_task: asyncio.Task[None] | None = None
        # Driver name -> its pending ResourceSlice wipe.
        self._wipes: dict[str, asyncio.Task[None]] = {}
        # Names of the ResourceSlices this kubelet wiped, oldest first (for tests).
        self.wiped_slices: list[str] = []
        self.node = NodeAgent(api_client, node) if node is not None else None
        self.server_api = (
            KubeletServer(node.address, node.kubelet_port, tls, self._pod_logs)
            if node is not None and tls is not None
            else None
        )
        # Where executed containers' ServiceAccount kubeconfigs point (None: no tokens).
        self.server = server

    def executes(self, container: Mapping[str, Any]) -> bool:
        """Whether a container is executed (the driver's daemon) or only simulated."""
        command = list(container.get("command") or ())
        return bool(command) and Path(command[0]).name.startswith(self.run_commands)

    async def register(self) -> None:
        """Register the Node and serve the kubelet API (when given a NodeSpec and TLS):
        what a kubelet does before any pod can be scheduled to it."""
        if self.server_api is not None:
            await self.server_api.start()
        if self.node is not None:
            await self.node.register()
            self.node.start()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        to_dict = self.api.sanitize_for_serialization
        self.pods = Informer(
            loop,
            self.core.list_pod_for_all_namespaces,
            _key,
            f"kubelet-{self.node_name}-pods",
            list_kwargs={"field_selector": f"spec.nodeName={self.node_name}"},
            to_dict=to_dict,
            on_change=self._on_pod,
        )
        self._watcher_task = loop.create_task(self.watcher.start(), name="kubelet-plugin-watcher")
        self.pods.start()

    async def stop(self) -> None:
        if self.pods is not None:
            self.pods.stop()
        workers, self.workers = list(self.workers.values()), {}
        for _, task in workers:
            task.cancel()
        for worker, task in workers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await asyncio.gather(*(p.stop(1.0) for p in worker.processes.values()))
        if self._watcher_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watcher_task
        await self.watcher.stop()
        for driver in list(self._wipes):
            self._cancel_wipe(driver)
        if self.node is not None:
            await self.node.stop()
        if self.server_api is not None:
            await self.server_api.stop()

    async def read_claim(self, namespace: str, name: str) -> Obj | None:
        """The ResourceClaim, read now (None if it does not exist or cannot be read yet)."""
        try:
            claim = await call(self.resource.read_namespaced_resource_claim, name, namespace)
        except client.ApiException as err:
            if err.status not in (403, 404, 429) and err.status < 500:
                raise
            return None
        result: Obj = self.api.sanitize_for_serialization(claim)
        return result

    async def service_account_token(self, pod: Obj) -> str | None:
        """A token of the pod's ServiceAccount bound to the pod, as kubelet requests one
        for the projected `kube-api-access` volume (None: the pod asks for none)."""
        spec = pod.get("spec") or {}
        account = spec.get("serviceAccountName") or spec.get("serviceAccount")
        if not account or spec.get("automountServiceAccountToken") is False:
            return None
        md = pod["metadata"]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": POD_TOKEN_SECONDS,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": md["name"],
                    "uid": md["uid"],
                },
            },
        }
        answer = await call_retrying(
            self.core.create_namespaced_service_account_token, account, md["namespace"], body
        )
        return str(answer.status.token)

    def _pod_logs(self, namespace: str, name: str) -> PodLogs | None:
        """The kubelet API's view of a pod on this node."""
        for worker, task in self.workers.values():
            if worker.namespace == namespace and worker.name == name:
                pod = worker.pod() or {}
                containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or ()]
                return PodLogs(containers, worker.dir, lambda t=task: not t.done())
        return None

    # --- ResourceSlices of deregistered drivers ----------------------------------------

    def _schedule_wipe(self, driver: str) -> None:
        """The driver deregistered: its slices go after the delay unless it comes back."""
        if self.wipe_slices_after is None:
            return
        self._cancel_wipe(driver)
        task = asyncio.get_running_loop().create_task(
            self._wipe_later(driver, self.wipe_slices_after),
            name=f"kubelet-{self.node_name}-wipe-{driver}",
        )
        self._wipes[driver] = task
        task.add_done_callback(lambda t, d=driver: self._wipe_done(d, t))

    def _cancel_wipe(self, driver: str) -> None:
        """The driver registered (again): the slices it publishes are current."""
        task = self._wipes.pop(driver, None)
        if task is not None:
            task.cancel()

    def _wipe_done(self, driver: str, task: asyncio.Task[None]) -> None:
        if self._wipes.get(driver) is task:
            del self._wipes[driver]
        if not task.cancelled() and task.exception() is not None:
            log.error("wiping the ResourceSlices of %s failed: %s", driver, task.exception())

    async def _wipe_later(self, driver: str, delay: float) -> None:
        await asyncio.sleep(delay)
        selector = f"spec.nodeName={self.node_name},spec.driver={driver}"
        listing = await call(self.resource.list_resource_slice, field_selector=selector)
        for item in listing.items:
            name = item.metadata.name
            try:
                await call(self.resource.delete_resource_slice, name)
            except client.ApiException as err:
                if err.status != 404:
                    raise
                continue
            self.wiped_slices.append(name)
            log.info("wiped ResourceSlice %s of deregistered driver %s", name, driver)

    def _on_pod(self, pod: Obj) -> None:
        assert self.pods is not None
        md = pod.get("metadata") or {}
        uid = md.get("uid") or ""
        current = self.pods.items.get(_key(pod))
        if uid in self.workers or current is None or current["metadata"].get("uid") != uid:
            return
        worker = _PodWorker(self, current)
        task = asyncio.get_running_loop().create_task(worker.run(), name=f"pod-{worker.key}")
        self.workers[uid] = (worker, task)
        task.add_done_callback(lambda t, uid=uid: self._done(uid, t))

    def _done(self, uid: str, task: asyncio.Task[None]) -> None:
        entry = self.workers.get(uid)
        if entry is not None and entry[1] is task:
            del self.workers[uid]
        if not task.cancelled() and task.exception() is not None:
            log.error("pod worker %s failed: %s", uid, task.exception())

    async def record_event(self, pod: Obj | None, reason: str, message: str) -> None:
        """A Warning Event on the pod, as kubelet's recorder writes it."""
        if pod is None:
            return
        md = pod["metadata"]
        now = _now()
        body = {
            "metadata": {"name": f"{md['name']}.{uuid.uuid4().hex[:16]}"},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": md["namespace"],
                "name": md["name"],
                "uid": md["uid"],
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": "kubelet", "host": self.node_name},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": self.node_name,
        }
        try:
            await call(self.core.create_namespaced_event, md["namespace"], body)
        except client.ApiException as err:
            log.warning("event %s on %s not recorded: %s", reason, _key(pod), err.status)
