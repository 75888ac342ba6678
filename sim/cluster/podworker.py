"""One pod on the simulated kubelet, from bound to removed.

In kubelet's order: wait until every ResourceClaim of the pod is allocated and reserved
for it; NodePrepareResources through the driver (retried with FailedPrepareDynamicResources
Events); resolve each container's CDI devices; set up the volumes (retried with FailedMount
Events); write the pod's /etc/hosts; run the init containers; start the containers
(`containers.Container`). The pod's status is written whenever it changes. A pod whose
containers all ended for good (restartPolicy Never or OnFailure) is Succeeded or Failed and
its claims are unprepared; deletion stops the containers gracefully (SIGTERM, grace period,
SIGKILL), unprepares, and confirms with the grace-0 delete that lets the API server drop
the pod.

Init containers run as kubelet runs them: each of `spec.initContainers` in order, each to
completion, before any container starts. One that fails is run again after the crash-loop
back-off (restartPolicy Always or OnFailure); under restartPolicy Never the pod fails. Until
all completed the pod is Pending and `Initialized` is False (ContainersNotInitialized); they
run once per pod (a container's restart does not run them again; a new pod does). Sidecars
(an init container with `restartPolicy: Always`) are not supported: such an init container
waits with CreateContainerConfigError, saying so, and the pod never starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client

from cdi import CDIError
from runtime.kubecall import call, error_text, status_of
from sim.cluster import containerconfig, volumes
from sim.cluster.containers import Container, backoff, now
from sim.cluster.containerview import ContainerView, container_view
from sim.cluster.dra import ClaimRef, DraError, PreparedClaim
from sim.cluster.sandbox import Launch

if TYPE_CHECKING:
    from sim.cluster.kubelet import SimKubelet

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PREPARE_FAILED = "FailedPrepareDynamicResources"
# How often waits on caches re-check state that no informer reports.
_POLL = 0.1
_OWNED_CONDITIONS = frozenset(
    {"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"}
)


def pod_key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace') or ''}/{md.get('name')}"


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


class PodWorker:
    """Drives one pod (by UID); see the module doc."""

    def __init__(self, kubelet: SimKubelet, pod: Obj) -> None:
        self.kubelet = kubelet
        md = pod["metadata"]
        self.key = pod_key(pod)
        self.namespace: str = md["namespace"]
        self.name: str = md["name"]
        self.uid: str = md["uid"]
        self.dir = kubelet.pods_dir / f"{self.namespace}_{self.name}"
        self.prepared: dict[str, PreparedClaim] = {}  # pod claim name -> prepared claim
        self.refs: list[ClaimRef] = []
        self.containers: dict[str, Container] = {}
        self.init_containers: dict[str, Container] = {}
        self.sandbox_ready = False  # volumes, hosts file: containers may start
        self.initialized = False  # every init container completed
        self.init_failed = False  # one failed for good (restartPolicy Never)
        # An init container the sim does not run (a sidecar): (its name, why).
        self._init_blocked: tuple[str, str] | None = None
        self.kubeconfig: Path | None = None
        self.objects = volumes.PodObjects(kubelet.read_object, self.namespace)
        self._token = ""
        self._dirty = asyncio.Event()
        self._finished = False

    # --- cache views --------------------------------------------------------------------

    def pod(self) -> Obj | None:
        pod = self.kubelet.pods.items.get(self.key) if self.kubelet.pods else None
        if pod is None or pod["metadata"].get("uid") != self.uid:
            return None
        return pod

    def ending(self) -> bool:
        pod = self.pod()
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

    def alive(self) -> bool:
        """Some container still runs or will run again (a log follow waits for it). A pod
        being deleted is alive while a container still runs its graceful shutdown: the
        kubelet's follow streams those last lines too (the reference's tests read a daemon's
        `Successfully removed daemon ...` that way)."""
        if self._finished:
            return False
        if not self.ending():
            return True
        return any(c.proc is not None and c.proc.returncode is None
                   for c in self.all_containers())

    async def exec_in(
        self, container: str, argv: Sequence[str], stdin: bool
    ) -> asyncio.subprocess.Process:
        """Start `argv` inside the running `container` (`kubectl exec`), with pipes."""
        worker = self.containers.get(container) or self.init_containers.get(container)
        if worker is None or worker.proc is None or worker.launch is None or (
            worker.proc.returncode is not None
        ):
            raise RuntimeError(f'container not found ("{container}")')
        run = getattr(self.kubelet.executor, "exec", None)
        if run is None:
            raise RuntimeError("this node's executor cannot exec into containers")
        pipe = asyncio.subprocess.PIPE
        proc: asyncio.subprocess.Process = await run(
            worker.proc, worker.launch, list(argv),
            stdin=pipe if stdin else asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe,
        )  # fmt: skip
        return proc

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

    async def _retry(self, attempt: int) -> bool:
        """Back off before another try; False if the pod ended meanwhile."""
        delay = backoff(attempt, self.kubelet.backoff_base, self.kubelet.backoff_cap)
        return not await self._sleep_unless_ending(delay)

    async def _setup(self) -> bool:
        """Prepare claims, set up volumes, start containers; False if the pod ended first."""
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
                # The kubelet's words around the DRA manager's error (pkg/kubelet/cm/dra).
                await self.kubelet.record_event(
                    self.pod(), PREPARE_FAILED, "Failed to prepare dynamic resources: "
                    f"prepare dynamic resources: {err}")
            if not await self._retry(attempt):
                return False
            attempt += 1
        self.dir.mkdir(parents=True, exist_ok=True)
        for name, view in views.items():
            (self.dir / f"{name}.json").write_text(json.dumps(view.to_dict(), indent=2) + "\n")
        mounted = await self._volumes()
        if mounted is None:
            return False
        pod = self.pod()
        if pod is None:
            return False
        # The pod's /etc/hosts, as kubelet writes it (the daemon adds its peers' names).
        hosts = self.dir / "hosts"
        if not hosts.exists():
            hosts.write_text(f"127.0.0.1\tlocalhost\n{self.kubelet.pod_ip}\t{self.name}\n")
        if self.kubelet.server is not None and self._token:
            self.kubeconfig = self.kubelet.server.with_token(self._token).write_kubeconfig(
                self.dir / "serviceaccount" / "kubeconfig", namespace=self.namespace
            )
        self.sandbox_ready = True
        self._dirty.set()
        spec = pod.get("spec") or {}
        grace = float(spec.get("terminationGracePeriodSeconds", 30))
        policy = str(spec.get("restartPolicy") or "Always")

        def container_of(container: Obj, restart_policy: str) -> Container:
            return Container(
                self.kubelet,
                container,
                self._launcher(container, views[container["name"]], mounted),
                self.dir,
                self._on_change,
                grace=grace,
                restart_policy=restart_policy,
                host=self.kubelet.pod_ip,
                pod_name=self.name,
                announce=self._announce,
            )

        # A failed init container runs again unless the pod's policy is Never.
        init_policy = "Never" if policy == "Never" else "OnFailure"
        for container in spec.get("initContainers") or ():
            if container.get("restartPolicy") == "Always":
                return await self._refuse_sidecar(container)
            worker = container_of(container, init_policy)
            self.init_containers[container["name"]] = worker
            worker.start()
            if not await self._until_done(worker):
                return False
            if (worker.state.get("terminated") or {}).get("exitCode") != 0:
                self.init_failed = True  # restartPolicy Never: the pod failed
                self._on_change()
                return True
        self.initialized = True
        for container in spec.get("containers") or ():
            worker = container_of(container, policy)
            self.containers[container["name"]] = worker
            worker.start()
        self._dirty.set()
        return True

    async def _until_done(self, worker: Container) -> bool:
        """Wait until the init container completed or failed for good; False if the pod
        started ending first."""
        assert worker.task is not None and self.kubelet.pods is not None
        ending = asyncio.ensure_future(self.kubelet.pods.wait_for(self.ending, timeout=1e9))
        try:
            await asyncio.wait({worker.task, ending}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ending
        return worker.done and not self.ending()

    async def _refuse_sidecar(self, container: Obj) -> bool:
        """A sidecar init container: the sim does not run one, and says so (its status and
        a Warning Event); the pod stays Pending until it is deleted."""
        message = (
            f'init container "{container["name"]}" has restartPolicy Always (a sidecar): '
            "sidecar containers are not supported by the simulated kubelet"
        )
        self._init_blocked = (container["name"], message)
        await self.kubelet.record_event(self.pod(), "Failed", message)
        self._dirty.set()
        return True

    def _launcher(self, container: Obj, view: ContainerView, mounted: Mapping[str, str]) -> Any:
        kubelet = self.kubelet

        async def make() -> Launch:
            pod = self.pod() or {}
            image = kubelet.images.lookup(str(container.get("image") or ""))
            inputs = containerconfig.ContainerInputs(
                pod=pod,
                container=container,
                image=image,
                view=view,
                volumes=mounted,
                node=kubelet.node_context(),
                pod_dir=self.dir,
                hosts_file=self.dir / "hosts",
                extra_env=kubelet.env_extra if image.known else {},
                extra_path=[str(p) for p in kubelet.path_extra],
                kubeconfig=str(self.kubeconfig or ""),
                host_root=kubelet.host_root,
            )
            return await containerconfig.launch(inputs, self.objects)

        return make

    def _on_change(self) -> None:
        self._dirty.set()
        ended = self.init_failed or (
            bool(self.containers) and all(c.done for c in self.containers.values())
        )
        if ended and not self._finished:
            self._finished = True
            asyncio.get_running_loop().create_task(self._unprepare(), name=f"unprepare-{self.key}")

    async def _volumes(self) -> dict[str, str] | None:
        """The pod's volumes; until they can be set up, a FailedMount Event and a retry
        after kubelet's back-off. None if the pod ended first."""
        attempt = 0
        while True:
            pod = self.pod()
            if pod is None:
                return None
            ctx = volumes.VolumeContext(
                pod_dir=self.dir,
                objects=self.objects,
                token=self._pod_token,
                node=self.kubelet.node_name,
                pod_ip=self.kubelet.pod_ip,
                host_root=self.kubelet.host_root,
            )
            try:
                return await volumes.set_up(pod, ctx)
            except volumes.VolumeError as err:
                message = str(err)
            except Exception as err:  # a token or object read that failed
                message = f"MountVolume.SetUp failed: {error_text(err)}"
            self.objects.cache.clear()
            await self.kubelet.record_event(pod, "FailedMount", message)
            if not await self._retry(attempt):
                return None
            attempt += 1

    async def _pod_token(self, audience: str, seconds: int) -> str:
        pod = self.pod()
        if pod is None:
            raise volumes.VolumeError("the pod is gone")
        try:
            token = await self.kubelet.service_account_token(pod, audience, seconds)
        except Exception as err:
            raise volumes.VolumeError(
                'MountVolume.SetUp failed for volume "kube-api-access": failed to fetch '
                f"token: {error_text(err)}"
            ) from None
        if not audience:
            self._token = token
        return token

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

    async def _announce(self, container: Obj, phase: str) -> None:
        """The Normal Events the kubelet records as a container starts, in its words
        (pkg/kubelet/images/image_manager.go, kuberuntime/kuberuntime_container.go of the
        pinned release): the first use of an image on the node (or every use with
        imagePullPolicy Always) pulls it, later ones find it present. Posted, not awaited:
        a container never waits for its Events."""
        pod, image = self.pod(), str(container.get("image") or "")
        post = self.kubelet.post_event
        if phase == "pull":
            policy = container.get("imagePullPolicy") or "IfNotPresent"  # API-defaulted
            if image in self.kubelet.pulled_images and policy != "Always":
                post(pod, "Pulled", f'Container image "{image}" already present on machine '
                     "and can be accessed by the pod", kind="Normal")
                return
            post(pod, "Pulling", f'Pulling image "{image}"', kind="Normal")
            self.kubelet.pulled_images.add(image)
            post(pod, "Pulled", f'Successfully pulled image "{image}" in 0s (0s including '
                 "waiting). Image size: 1 bytes.", kind="Normal")
        elif phase == "created":
            post(pod, "Created", "Container created", kind="Normal")
        elif phase == "started":
            post(pod, "Started", "Container started", kind="Normal")

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
        pod_spec = pod.get("spec") or {}
        for spec in (*(pod_spec.get("initContainers") or ()), *(pod_spec.get("containers") or ())):
            ids: list[str] = []
            for use in (spec.get("resources") or {}).get("claims") or ():
                prepared = self.prepared.get(use.get("name"))
                if prepared is not None:
                    ids.extend(prepared.cdi_ids(use.get("request") or None))
            views[spec["name"]] = container_view(ids, self.kubelet.cdi_dirs)
        return views

    async def _unprepare(self) -> None:
        """NodeUnprepareResources for the pod's claims, retried until the driver answers."""
        attempt = 0
        kubelet = self.kubelet
        while self.refs:
            try:
                plugin = kubelet.watcher.plugins.get(kubelet.driver_name)
                if plugin is None:
                    raise DraError(f"DRA driver {kubelet.driver_name} is not registered")
                await kubelet.dra.unprepare(plugin, self.refs)
                self.refs = []
                break
            except DraError as err:
                log.warning("pod %s: unprepare failed: %s", self.key, err)
            await asyncio.sleep(backoff(attempt, kubelet.backoff_base, kubelet.backoff_cap))
            attempt += 1

    async def _terminate(self) -> None:
        """Graceful stop, unprepare (retried), then the confirming grace-0 delete."""
        pod = self.pod()
        grace = float(((pod or {}).get("metadata") or {}).get("deletionGracePeriodSeconds") or 0)
        await asyncio.gather(*(c.stop(grace) for c in self.all_containers()))
        await self._unprepare()
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

    def all_containers(self) -> list[Container]:
        """The init containers started so far and the containers."""
        return [*self.init_containers.values(), *self.containers.values()]

    # --- status -------------------------------------------------------------------------

    def phase(self, pod: Obj) -> str:
        """kubelet's pod phase: Pending until a container ran (init containers run while
        it is Pending); Failed once an init container failed for good; Succeeded or Failed
        once all containers ended for good; Running otherwise (a crash-looping pod too)."""
        if self.init_failed:
            return "Failed"
        if not self.initialized or not self.containers:
            return "Pending"
        workers = list(self.containers.values())
        if all(c.done for c in workers):
            codes = [((c.state.get("terminated") or {}).get("exitCode")) for c in workers]
            return "Succeeded" if all(code == 0 for code in codes) else "Failed"
        if any("running" in c.state or c.restart_count or c.done for c in workers):
            return "Running"
        return "Pending"

    def _init_statuses(self, specs: Sequence[Obj]) -> list[Obj]:
        """`initContainerStatuses`: an init container is ready once it completed."""
        out = []
        for spec in specs:
            worker = self.init_containers.get(spec["name"])
            if worker is None:
                out.append(_waiting(spec, "PodInitializing"))
                if self._init_blocked and self._init_blocked[0] == spec["name"]:
                    reason, message = "CreateContainerConfigError", self._init_blocked[1]
                    out[-1]["state"] = {"waiting": {"reason": reason, "message": message}}
                continue
            entry = worker.status(spec.get("image") or "")
            terminated = entry["state"].get("terminated") or {}
            entry["ready"] = "exitCode" in terminated and terminated["exitCode"] == 0
            out.append(entry)
        return out

    def status(self, pod: Obj) -> Obj:
        """The pod status kubelet would report now."""
        inits = (pod.get("spec") or {}).get("initContainers") or ()
        statuses = []
        for spec in (pod.get("spec") or {}).get("containers") or ():
            worker = self.containers.get(spec["name"])
            if worker is not None:
                statuses.append(worker.status(spec.get("image") or ""))
                continue
            # kubelet's default waiting reason, PodInitializing in a pod with init containers.
            statuses.append(_waiting(spec, "PodInitializing" if inits else "ContainerCreating"))
        phase = self.phase(pod)
        completed = phase in ("Succeeded", "Failed")
        ready = self.initialized and not completed and all(s["ready"] for s in statuses)
        old = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or ()}

        def condition(kind: str, value: bool, reason: str = "", message: str = "") -> Obj:
            text = "True" if value else "False"
            previous = old.get(kind) or {}
            since = previous.get("lastTransitionTime") if previous.get("status") == text else None
            out: Obj = {"type": kind, "status": text, "lastTransitionTime": since or now()}
            if reason:
                out["reason"] = reason
            if message:
                out["message"] = message
            return out

        done_reason = "PodCompleted" if completed else ""
        not_ready = done_reason or ("" if ready else "ContainersNotReady")
        init_statuses = self._init_statuses(inits)
        initialized = condition("Initialized", self.initialized, done_reason)
        if inits and not self.initialized:
            incomplete = " ".join(s["name"] for s in init_statuses if not s["ready"])
            initialized = condition(
                "Initialized", False, "ContainersNotInitialized",
                f"containers with incomplete status: [{incomplete}]",
            )  # fmt: skip
        status = dict(pod.get("status") or {})
        # kubelet owns these conditions; the scheduler's (PodScheduled) and others stay.
        kept = [c for c in old.values() if c.get("type") not in _OWNED_CONDITIONS]
        if "PodScheduled" not in old:
            kept.append(condition("PodScheduled", True))
        ip = self.kubelet.pod_ip
        status.update(
            {
                "phase": phase,
                "hostIP": ip,
                "hostIPs": [{"ip": ip}],
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "conditions": [
                    condition("PodReadyToStartContainers", self.sandbox_ready and not completed),
                    initialized,
                    condition("Ready", ready, not_ready),
                    condition("ContainersReady", ready, not_ready),
                    *kept,
                ],
                "containerStatuses": statuses,
            }
        )
        if inits:
            status["initContainerStatuses"] = init_statuses
        status.setdefault("startTime", now())
        return status

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


def _waiting(spec: Obj, reason: str) -> Obj:
    """The status of a container that has not been started yet."""
    return {
        "name": spec["name"], "image": spec.get("image") or "", "imageID": "",
        "restartCount": 0, "ready": False, "started": False,
        "state": {"waiting": {"reason": reason}},
    }  # fmt: skip
