"""A simulated kubelet: claims prepared, containers run, status reported.

An API server only stores pods; nothing would ever make one Running, prepare its claims
through the driver, or run the driver's own pods. `SimKubelet` does one node's part of
that, against either control plane through the real `kubernetes` client (with the node's
own credentials, so Node authorization applies on kube-apiserver) and against the real
agent through `dra.py` (the same gRPC contract as kubelet):

- the Node is registered and its Lease renewed (`nodestatus`), and the kubelet API that
  the API server calls for `kubectl logs` and `exec` is served (`kubeletapi`), when given
  a NodeSpec and TLS;
- every pod bound to the node is driven by a `podworker.PodWorker`: claims prepared once
  they are allocated and reserved for it, volumes set up (`volumes`), the init containers
  run in order, each to completion (sidecars are not supported), then each container run
  from its pod spec and image (`containerconfig`, `images`) by a `ContainerExecutor`:
  sandboxed processes by default (`sandbox`: a private mount namespace whose /dev holds
  the CDI device nodes), tasks of this process at scale (`sim.cluster.inprocess`);
- each container's CDI view is written to `<pods_dir>/<namespace>_<pod>/<container>.json`
  and its output to `<container>.log` there;
- a DRA driver that deregisters (its registration socket is gone) loses its ResourceSlices
  of this node after `wipe_slices_after` seconds unless it registers again in between, as
  kubelet's DRA handler does (30 s there, so a restarting plugin does not churn them).

Simplifications: sidecar init containers are not run; images are never pulled (see
`images`); one pod IP (a loopback address) stands for the node and its pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import ssl
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from api import names
from runtime.draclient import DraApi
from runtime.informer import Informer
from runtime.kubecall import call, call_retrying, error_text
from sim.cluster.containerconfig import NodeContext
from sim.cluster.containers import ContainerExecutor
from sim.cluster.dra import DraClient, PluginWatcher
from sim.cluster.images import ImageCatalog, host_image
from sim.cluster.kubeletapi import KubeletServer, PodLogs
from sim.cluster.nodestatus import NodeAgent, NodeSpec
from sim.cluster.podwatch import PodInformer
from sim.cluster.podworker import PREPARE_FAILED, PodWorker, pod_key
from sim.cluster.sandbox import SandboxExecutor
from sim.controlplane.base import Credentials, InCluster

log = logging.getLogger(__name__)

Obj = dict[str, Any]

__all__ = ["PREPARE_FAILED", "WIPE_SLICES_AFTER", "SimKubelet"]

# kubelet's wipingDelay: how long a deregistered DRA driver's ResourceSlices outlive it.
WIPE_SLICES_AFTER = 30.0
# What a pod's kube-api-access token asks for when the volume names no expiration.
POD_TOKEN_SECONDS = 3607


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------
# The kubelet


class SimKubelet:
    """One node's kubelet: pod lifecycle plus DRA, against the API server and the real agent.

    `await register()` registers the Node and serves the kubelet API (given `node` and
    `tls`); `start()` begins watching (pods bound to `node_name`) and the plugin
    registration directory; every pod gets its own worker task. `stop()` stops
    watching and kills the processes it started, without unpreparing anything (as if the
    kubelet and its containers died together), so tests leave nothing running.

    `images` says which image references are the project's image (the rest are host
    images). `env_extra` reaches every container of the project's image (the fake
    fabric's knobs); `{pod_dir}` in a value becomes the pod's own directory (where its
    hosts file, logs and views live). `path_extra` directories come first on every
    container's PATH. `executor` runs the containers (default: `SandboxExecutor`).
    `in_cluster` is where containers reach the API server. `host_root` is the node's `/`
    for hostPath volumes (None: this machine's). `wipe_slices_after` (None: never) is the
    delay after which a deregistered driver's ResourceSlices of this node are deleted.
    `async_pod_watch` lists and watches the node's pods on the event loop (`podwatch`)
    instead of in a thread of their own: one thread fewer per node, for many nodes in one
    process.
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
        images: ImageCatalog | None = None,
        in_cluster: InCluster | None = None,
        host_root: Path | None = None,
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
        resource_version: str = "v1",
        async_pod_watch: bool = False,
    ) -> None:
        self.api = api_client
        self.async_pod_watch = async_pod_watch
        self.executor: ContainerExecutor = executor or SandboxExecutor()
        self.core = client.CoreV1Api(api_client)
        self.resource_api = DraApi(api_client, resource_version)
        self.node_name = node_name
        self.cdi_dirs = [Path(d) for d in cdi_dirs]
        self.pods_dir = Path(pods_dir)
        self.pod_ip = pod_ip
        self.env_extra = dict(env_extra or {})
        self.path_extra = list(path_extra or ())
        self.images = images or ImageCatalog(host_image(""), frozenset())
        self.in_cluster = in_cluster
        self.host_root = host_root
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
            host_root=host_root,
        )
        self.dra = DraClient()
        self.pods: Informer | None = None
        self.workers: dict[str, tuple[PodWorker, asyncio.Task[None]]] = {}
        self.pulled_images: set[str] = set()  # images the node has (its image manager's)
        self._events: set[asyncio.Task[None]] = set()  # Events on their way (post_event)
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

    def node_context(self) -> NodeContext:
        allocatable = dict(self.node.spec.capacity) if self.node is not None else {}
        api = self.in_cluster
        return NodeContext(
            self.node_name,
            self.pod_ip,
            api.host if api is not None else "",
            api.port if api is not None else 0,
            allocatable,
        )

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
        selector = f"spec.nodeName={self.node_name}"
        name = f"kubelet-{self.node_name}-pods"
        self.pods = (
            PodInformer(loop, self.api, pod_key, name, selector, on_change=self._on_pod)
            if self.async_pod_watch
            else Informer(
                loop,
                self.core.list_pod_for_all_namespaces,
                pod_key,
                name,
                list_kwargs={"field_selector": selector},
                to_dict=to_dict,
                on_change=self._on_pod,
            )
        )
        self._watcher_task = loop.create_task(self.watcher.start(), name="kubelet-plugin-watcher")
        self.pods.start()

    async def stop(self) -> None:
        if self.pods is not None:
            self.pods.stop()
            if isinstance(self.pods, PodInformer):
                await self.pods.wait_stopped()
        workers, self.workers = list(self.workers.values()), {}
        for _, task in workers:
            task.cancel()
        for worker, task in workers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await asyncio.gather(*(c.stop(1.0) for c in worker.all_containers()))
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
        for task in list(self._events):
            task.cancel()
        await asyncio.gather(*self._events, return_exceptions=True)

    async def read_claim(self, namespace: str, name: str) -> Obj | None:
        """The ResourceClaim, read now (None if it does not exist or cannot be read yet)."""
        try:
            return await call(self.resource_api.read, "resourceclaims", name, namespace)
        except client.ApiException as err:
            if err.status not in (403, 404, 429) and err.status < 500:
                raise
            return None

    async def read_object(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A ConfigMap or Secret (`kind` "configmaps" or "secrets") a pod uses, or None."""
        read = (
            self.core.read_namespaced_config_map
            if kind == "configmaps"
            else self.core.read_namespaced_secret
        )
        try:
            found = await call(read, name, namespace)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        result: Obj = self.api.sanitize_for_serialization(found)
        return result

    async def service_account_token(
        self, pod: Obj, audience: str = "", seconds: int = POD_TOKEN_SECONDS
    ) -> str:
        """A token of the pod's ServiceAccount bound to the pod, as kubelet requests one
        for a projected serviceAccountToken source (kube-api-access)."""
        spec = pod.get("spec") or {}
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        md = pod["metadata"]
        token_spec: Obj = {"expirationSeconds": seconds}
        if audience:
            token_spec["audiences"] = [audience]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                **token_spec,
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
        for worker, _ in self.workers.values():
            if worker.namespace == namespace and worker.name == name:
                pod = worker.pod() or {}
                spec = pod.get("spec") or {}
                containers = [
                    c["name"]
                    for key in ("initContainers", "containers")
                    for c in spec.get(key) or ()
                ]
                return PodLogs(containers, worker.dir, worker.alive, worker.exec_in)
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
        listing = await call(self.resource_api.list, "resourceslices", field_selector=selector)
        for item in listing["items"]:
            name = item["metadata"]["name"]
            try:
                await call(self.resource_api.delete, "resourceslices", name)
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
        current = self.pods.items.get(pod_key(pod))
        if uid in self.workers or current is None or current["metadata"].get("uid") != uid:
            return
        worker = PodWorker(self, current)
        task = asyncio.get_running_loop().create_task(worker.run(), name=f"pod-{worker.key}")
        self.workers[uid] = (worker, task)
        task.add_done_callback(lambda t, uid=uid: self._done(uid, t))

    def _done(self, uid: str, task: asyncio.Task[None]) -> None:
        entry = self.workers.get(uid)
        if entry is not None and entry[1] is task:
            del self.workers[uid]
        if not task.cancelled() and task.exception() is not None:
            log.error("pod worker %s failed: %s", uid, task.exception())

    async def record_event(self, pod: Obj | None, reason: str, message: str, *,
                           kind: str = "Warning") -> None:
        """An Event (Warning unless `kind` says Normal) on the pod, as kubelet's recorder
        writes it."""
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
            "type": kind,
            "source": {"component": "kubelet", "host": self.node_name},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": self.node_name,
        }
        try:
            await call(self.core.create_namespaced_event, md["namespace"], body)
        except Exception as err:  # an Event lost never stops the pod (kubelet drops them too)
            log.warning("event %s on %s not recorded: %s", reason, pod_key(pod), error_text(err))

    def post_event(self, pod: Obj | None, reason: str, message: str, *,
                   kind: str = "Warning") -> None:
        """`record_event` without waiting for it, as kubelet's event broadcaster sends
        them: an API server that is slow or down never holds up a container's start."""
        task = asyncio.get_running_loop().create_task(
            self.record_event(pod, reason, message, kind=kind), name=f"event-{reason}")
        self._events.add(task)
        task.add_done_callback(self._events.discard)
