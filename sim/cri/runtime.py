"""The CRI v1 RuntimeService and ImageService of one simulated node.

The upstream kubelet drives pods through these calls (https://github.com/kubernetes/
cri-api/blob/master/pkg/apis/runtime/v1/api.proto); containers are the sim's sandboxed
processes (sim/cluster/sandbox.py), made in the kubelet's mount namespace so the volumes
it mounted are there. What the runtime decides, as containerd does:
- the process: the kubelet's command and args, else the image's entrypoint and cmd; the
  image's environment under the kubelet's; the image's `USER` unless the kubelet names one;
- CDI devices by name, resolved from the node's CDI spec directories (the specs the agent
  writes), their device nodes, mounts and environment applied to the container;
- the log: stdout and stderr in the CRI log format at the path the kubelet gives.
There is no pod network: a sandbox's IP is the node's address, and
KUBERNETES_SERVICE_HOST/PORT point at the API server (what kube-proxy would route the
`kubernetes` Service's IP to).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import hashlib
import json
import logging
import os
import shutil
import signal
import stat
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from cdi import CDIError
from sim.cluster.containerconfig import cdi_edits
from sim.cluster.containerview import container_view
from sim.cluster.images import ImageCatalog, host_image
from sim.cluster.onemachine import runtime_env
from sim.cluster.privileges import privileges
from sim.cluster.sandbox import Device, Launch, Mount, SandboxContainer, SandboxExecutor, StartError
from sim.controlplane.base import InCluster
from sim.cri.paths import NodePaths
from sim.cri.streaming import (
    AttachSession,
    ExecSession,
    PortForwardSession,
    StreamingServer,
    follow_log,
)

log = logging.getLogger(__name__)

RUNTIME_NAME = "compute-domain-sim"
RUNTIME_VERSION = "0.1.0"


def nanos() -> int:
    return time.time_ns()


def log_time() -> str:
    """RFC 3339 with nanoseconds, as the CRI log format has it."""
    now = time.time_ns()
    stamp = datetime.datetime.fromtimestamp(now // 1_000_000_000, datetime.UTC)
    return f"{stamp:%Y-%m-%dT%H:%M:%S}.{now % 1_000_000_000:09d}Z"


def _text(value: str | bytes) -> str:
    """An env value: `KeyValue.value` is bytes in this CRI release (any byte string is a
    valid environment value), str in older ones."""
    return value.decode(errors="surrogateescape") if isinstance(value, bytes) else value


def _selected(wanted: Any, item_id: str, state: Any, labels: Mapping[str, str],
              sandbox_id: str = "") -> bool:
    """Whether a PodSandboxFilter or ContainerFilter (None: no filter) lets an item through."""
    if wanted is None:
        return True
    if wanted.id and wanted.id != item_id:
        return False
    if getattr(wanted, "pod_sandbox_id", "") and wanted.pod_sandbox_id != sandbox_id:
        return False
    if wanted.HasField("state") and wanted.state.state != state:
        return False
    return all(labels.get(k) == v for k, v in wanted.label_selector.items())


@dataclass
class PodSandbox:
    id: str
    config: Any  # PodSandboxConfig
    created_at: int
    ready: bool = True


@dataclass
class Container:
    id: str
    sandbox_id: str
    config: Any  # ContainerConfig
    launch: Launch
    image_ref: str
    log_path: Path | None
    created_at: int
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    process: SandboxContainer | None = None
    copier: asyncio.Task[None] | None = None
    log_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def state(self) -> str:
        if self.finished_at:
            return "CONTAINER_EXITED"
        if self.started_at:
            return "CONTAINER_RUNNING"
        return "CONTAINER_CREATED"


class NodeRuntime:
    """RuntimeService and ImageService of one node (module doc). `namespace` gives the
    mount namespace containers are made in (the kubelet's /proc/PID/ns/mnt) at the time
    a container starts; `images`, `env_extra` and `path_extra` are what the simulated
    kubelet gives the project's image (sim/cluster/kubelet.py)."""

    def __init__(
        self,
        pb: ModuleType,
        *,
        node_name: str,
        paths: NodePaths,
        state_dir: Path,
        pod_ip: str,
        cdi_dirs: Sequence[Path],
        in_cluster: InCluster | None = None,
        images: ImageCatalog | None = None,
        env_extra: Mapping[str, str] | None = None,
        path_extra: Sequence[str] = (),
        namespace: Any = None,
        executor: SandboxExecutor | None = None,
        pods_dir: Path | None = None,
        streaming: StreamingServer | None = None,
    ) -> None:
        self.pb = pb
        self.node_name = node_name
        self.paths = paths
        self.state_dir = state_dir
        self.pod_ip = pod_ip
        self.cdi_dirs = list(cdi_dirs)
        self.in_cluster = in_cluster
        self.images = images or ImageCatalog(host_image(""), frozenset())
        self.env_extra = dict(env_extra or {})
        self.path_extra = list(path_extra)
        self.namespace = namespace or (lambda: "")
        self.executor = executor or SandboxExecutor()
        # Where each pod's directory is (`{pod_dir}` of env_extra) and each container's view
        # is published, as the simulated kubelet does (sim/cluster/podworker.py).
        self.pods_dir = pods_dir or state_dir / "pods"
        self.sandboxes: dict[str, PodSandbox] = {}
        self.containers: dict[str, Container] = {}
        self.pulled: dict[str, str] = {}  # image reference -> image ID
        # Every call the kubelet made, by method name (tests compare kubelets by it).
        self.calls: dict[str, int] = {}
        # Where Exec, Attach and PortForward send the kubelet (sim/cri/streaming.py); None:
        # those calls answer UNIMPLEMENTED.
        self.streaming = streaming

    # --- bookkeeping -----------------------------------------------------------------

    def _count(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1

    def _sandbox(self, sandbox_id: str) -> PodSandbox:
        found = self.sandboxes.get(sandbox_id)
        if found is None:
            raise CriError(grpc.StatusCode.NOT_FOUND, f"pod sandbox {sandbox_id!r} not found")
        return found

    def _container(self, container_id: str) -> Container:
        found = self.containers.get(container_id)
        if found is None:
            raise CriError(grpc.StatusCode.NOT_FOUND, f"container {container_id!r} not found")
        return found

    async def close(self) -> None:
        """Kill every container (the node's runtime stops with the sim)."""
        for container in list(self.containers.values()):
            await self._kill(container, 0)

    # --- RuntimeService: runtime -------------------------------------------------------

    async def Version(self, request: Any, context: Any) -> Any:
        self._count("Version")
        return self.pb.VersionResponse(
            version="0.1.0", runtime_name=RUNTIME_NAME, runtime_version=RUNTIME_VERSION,
            runtime_api_version="v1")

    async def Status(self, request: Any, context: Any) -> Any:
        self._count("Status")
        pb = self.pb
        conditions = [pb.RuntimeCondition(type="RuntimeReady", status=True),
                      pb.RuntimeCondition(type="NetworkReady", status=True)]
        return pb.StatusResponse(status=pb.RuntimeStatus(conditions=conditions))

    async def RuntimeConfig(self, request: Any, context: Any) -> Any:
        self._count("RuntimeConfig")
        pb = self.pb
        return pb.RuntimeConfigResponse(
            linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.CGROUPFS))

    async def UpdateRuntimeConfig(self, request: Any, context: Any) -> Any:
        self._count("UpdateRuntimeConfig")
        return self.pb.UpdateRuntimeConfigResponse()

    # --- RuntimeService: sandboxes -----------------------------------------------------

    async def RunPodSandbox(self, request: Any, context: Any) -> Any:
        self._count("RunPodSandbox")
        config = request.config
        sandbox_id = uuid.uuid4().hex
        self.sandboxes[sandbox_id] = PodSandbox(sandbox_id, config, nanos())
        if config.log_directory:
            self.paths.on_machine(config.log_directory).mkdir(parents=True, exist_ok=True)
        log.info("RunPodSandbox %s/%s -> %s", config.metadata.namespace, config.metadata.name,
                 sandbox_id)
        return self.pb.RunPodSandboxResponse(pod_sandbox_id=sandbox_id)

    async def StopPodSandbox(self, request: Any, context: Any) -> Any:
        self._count("StopPodSandbox")
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is not None:
            for container in self._of(sandbox.id):
                await self._kill(container, 0)
            sandbox.ready = False
        return self.pb.StopPodSandboxResponse()

    async def RemovePodSandbox(self, request: Any, context: Any) -> Any:
        self._count("RemovePodSandbox")
        sandbox = self.sandboxes.pop(request.pod_sandbox_id, None)
        if sandbox is not None:
            for container in self._of(sandbox.id):
                await self._kill(container, 0)
                self._forget(container)
        return self.pb.RemovePodSandboxResponse()

    def _of(self, sandbox_id: str) -> list[Container]:
        return [c for c in self.containers.values() if c.sandbox_id == sandbox_id]

    def _sandbox_state(self, sandbox: PodSandbox) -> Any:
        return self.pb.SANDBOX_READY if sandbox.ready else self.pb.SANDBOX_NOTREADY

    async def PodSandboxStatus(self, request: Any, context: Any) -> Any:
        self._count("PodSandboxStatus")
        pb = self.pb
        sandbox = self._sandbox(request.pod_sandbox_id)
        config = sandbox.config
        status = pb.PodSandboxStatus(
            id=sandbox.id, metadata=config.metadata, state=self._sandbox_state(sandbox),
            created_at=sandbox.created_at, network=pb.PodSandboxNetworkStatus(ip=self.pod_ip),
            linux=pb.LinuxPodSandboxStatus(namespaces=pb.Namespace(
                options=config.linux.security_context.namespace_options)),
            labels=config.labels, annotations=config.annotations)
        return pb.PodSandboxStatusResponse(status=status)

    async def ListPodSandbox(self, request: Any, context: Any) -> Any:
        self._count("ListPodSandbox")
        pb = self.pb
        wanted = request.filter if request.HasField("filter") else None
        items = []
        for sandbox in self.sandboxes.values():
            state = self._sandbox_state(sandbox)
            if not _selected(wanted, sandbox.id, state, sandbox.config.labels):
                continue
            items.append(pb.PodSandbox(
                id=sandbox.id, metadata=sandbox.config.metadata, state=state,
                created_at=sandbox.created_at, labels=sandbox.config.labels,
                annotations=sandbox.config.annotations))
        return pb.ListPodSandboxResponse(items=items)

    async def UpdatePodSandboxResources(self, request: Any, context: Any) -> Any:
        self._count("UpdatePodSandboxResources")
        return self.pb.UpdatePodSandboxResourcesResponse()

    # --- RuntimeService: containers ----------------------------------------------------

    async def CreateContainer(self, request: Any, context: Any) -> Any:
        self._count("CreateContainer")
        sandbox = self._sandbox(request.pod_sandbox_id)
        config = request.config
        container_id = uuid.uuid4().hex
        try:
            launch = self._launch(container_id, config, request.sandbox_config or sandbox.config)
        except (CDIError, StartError, OSError, ValueError) as err:
            raise CriError(grpc.StatusCode.UNKNOWN,
                           f"failed to create containerd container: {err}") from None
        log_path = None
        if config.log_path and sandbox.config.log_directory:
            log_path = self.paths.on_machine(
                f"{sandbox.config.log_directory.rstrip('/')}/{config.log_path}")
            log_path.parent.mkdir(parents=True, exist_ok=True)  # <container>/N.log
        self.containers[container_id] = Container(
            container_id, sandbox.id, config, launch, self._image_id(self._image_ref(config.image)),
            log_path, nanos())
        return self.pb.CreateContainerResponse(container_id=container_id)

    def _launch(self, container_id: str, config: Any, sandbox_config: Any) -> Launch:
        pb = self.pb
        image = self.images.lookup(self._image_ref(config.image))
        meta = sandbox_config.metadata
        pod_dir = self.pods_dir / f"{meta.namespace}_{meta.name}"
        pod_dir.mkdir(parents=True, exist_ok=True)
        env = image.base_env()
        env.update({kv.key: _text(kv.value) for kv in config.envs})
        if self.in_cluster is not None and "KUBERNETES_SERVICE_HOST" in env:
            host, port = self.in_cluster.host, str(self.in_cluster.port)
            env.update({"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
                        "KUBERNETES_SERVICE_PORT_HTTPS": port})
        view = container_view([d.name for d in config.CDI_devices], self.cdi_dirs)
        (pod_dir / f"{config.metadata.name}.json").write_text(
            json.dumps(view.to_dict(), indent=2) + "\n")
        env.update(view.env)
        if image.known:
            env.update({k: v.replace("{pod_dir}", str(pod_dir))
                        for k, v in self.env_extra.items()})
            env = runtime_env(env, self.pod_ip)
        if self.path_extra:
            env["PATH"] = ":".join([*self.path_extra, env.get("PATH", "")])
        linux = config.linux.security_context
        uid_default, gid_default = image.ids()
        uid = linux.run_as_user.value if linux.HasField("run_as_user") else (uid_default or 0)
        gid = linux.run_as_group.value if linux.HasField("run_as_group") else (
            gid_default if gid_default is not None else 0)
        mounts = [Mount(host, path, readonly=True) for path, host in image.files.items()]
        mounts.append(Mount(str(pod_dir), str(pod_dir)))
        mounts += [Mount(p, p, readonly=True) for p in self.path_extra]
        for m in config.mounts:
            mounts.append(Mount(self.paths.in_namespace(m.host_path), m.container_path,
                                readonly=m.readonly))
        cdi_mounts, devices = cdi_edits(view, self.paths.fs)
        mounts += cdi_mounts
        devices += [self._device(d) for d in config.devices]
        mounts += [Mount(p, p, readonly=True) for p in image.runtime if Path(p).is_dir()]
        mounts.sort(key=lambda m: len(Path(m.target).parts))
        caps = linux.capabilities
        sc: dict[str, Any] = {"privileged": linux.privileged, "capabilities": {
            "add": list(caps.add_capabilities), "drop": list(caps.drop_capabilities)}}
        if linux.no_new_privs:
            sc["allowPrivilegeEscalation"] = False
        argv = image.argv(list(config.command), list(config.args))
        host_network = sandbox_config.linux.security_context.namespace_options.network == pb.NODE
        return Launch(
            argv=tuple(argv),
            env=env,
            uid=int(uid),
            gid=int(gid),
            groups=tuple(int(g) for g in linux.supplemental_groups),
            cwd=config.working_dir or image.workdir or "/",
            hostname=self.node_name if host_network else sandbox_config.hostname[:63],
            mounts=tuple(mounts),
            devices=tuple(devices),
            readonly_root=linux.readonly_rootfs,
            privileges=privileges({"securityContext": sc}),
            state_dir=str(self.state_dir / "containers" / container_id),
            image_known=image.known,
            traverse=(*image.runtime, *image.files.values()),
        )

    def _device(self, device: Any) -> Device:
        """A device the kubelet names (a device plugin's) by its node path."""
        info = self.paths.on_machine(device.host_path).stat()
        kind = "b" if stat.S_ISBLK(info.st_mode) else "c"
        return Device(device.container_path, kind, os.major(info.st_rdev),
                      os.minor(info.st_rdev))

    async def StartContainer(self, request: Any, context: Any) -> Any:
        self._count("StartContainer")
        container = self._container(request.container_id)
        if container.state != "CONTAINER_CREATED":
            raise CriError(grpc.StatusCode.FAILED_PRECONDITION,
                         f"container {container.id} is {container.state}, not created")
        launch = dataclasses.replace(container.launch, host_namespace=self.namespace())
        try:
            process = await self.executor.start_piped(launch)
        except StartError as err:
            container.finished_at = container.started_at = nanos()
            container.exit_code, container.reason = 128, "StartError"
            container.message = str(err)
            message = f"failed to start containerd task: {err}"
            raise CriError(grpc.StatusCode.UNKNOWN, message) from None
        container.process = process
        container.started_at = nanos()
        container.copier = asyncio.get_running_loop().create_task(
            self._follow(container), name=f"cri-{container.id[:12]}")
        return self.pb.StartContainerResponse()

    async def _follow(self, container: Container) -> None:
        """Copy the container's output into its log until it exits, then record how."""
        process = container.process
        assert process is not None
        await asyncio.gather(self._copy(container, process.proc.stdout, "stdout"),
                             self._copy(container, process.proc.stderr, "stderr"))
        code = await process.wait()
        container.exit_code = code if code >= 0 else 128 - code
        container.reason = "Completed" if code == 0 else "Error"
        container.finished_at = nanos()

    async def _copy(self, container: Container, stream: Any, name: str) -> None:
        if stream is None:
            return
        while line := await stream.readline():
            if container.log_path is None:
                continue
            full = line.endswith(b"\n")
            text = line.rstrip(b"\n")
            record = f"{log_time()} {name} {'F' if full else 'P'} ".encode() + text + b"\n"
            async with container.log_lock:
                with contextlib.suppress(OSError), container.log_path.open("ab") as out:
                    out.write(record)

    async def StopContainer(self, request: Any, context: Any) -> Any:
        self._count("StopContainer")
        container = self.containers.get(request.container_id)
        if container is not None:
            await self._kill(container, request.timeout)
        return self.pb.StopContainerResponse()

    async def _kill(self, container: Container, grace: float) -> None:
        process = container.process
        if process is None or process.returncode is not None:
            await self._drained(container)
            if not container.finished_at:
                container.finished_at = nanos()
            return
        process.signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(grace, 0.0) or 0.01):
                await process.wait()
        process.signal(signal.SIGKILL)
        await process.wait()
        await self._drained(container)

    @staticmethod
    async def _drained(container: Container) -> None:
        """Until the container's output is in its log (bounded: a grandchild holding the
        pipe open does not hold up the kubelet)."""
        if container.copier is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await asyncio.shield(container.copier)

    async def RemoveContainer(self, request: Any, context: Any) -> Any:
        self._count("RemoveContainer")
        container = self.containers.get(request.container_id)
        if container is not None:
            await self._kill(container, 0)
            self._forget(container)
        return self.pb.RemoveContainerResponse()

    def _forget(self, container: Container) -> None:
        self.containers.pop(container.id, None)
        shutil.rmtree(container.launch.state_dir, ignore_errors=True)

    def _container_state(self, container: Container) -> Any:
        return getattr(self.pb, container.state)

    async def ListContainers(self, request: Any, context: Any) -> Any:
        self._count("ListContainers")
        pb = self.pb
        wanted = request.filter if request.HasField("filter") else None
        out = []
        for c in self.containers.values():
            state = self._container_state(c)
            if not _selected(wanted, c.id, state, c.config.labels, c.sandbox_id):
                continue
            out.append(pb.Container(
                id=c.id, pod_sandbox_id=c.sandbox_id, metadata=c.config.metadata,
                image=c.config.image, image_ref=c.image_ref, image_id=c.image_ref, state=state,
                created_at=c.created_at, labels=c.config.labels,
                annotations=c.config.annotations))
        return pb.ListContainersResponse(containers=out)

    async def ContainerStatus(self, request: Any, context: Any) -> Any:
        self._count("ContainerStatus")
        pb = self.pb
        c = self._container(request.container_id)
        status = pb.ContainerStatus(
            id=c.id, metadata=c.config.metadata, state=self._container_state(c),
            created_at=c.created_at, started_at=c.started_at, finished_at=c.finished_at,
            exit_code=c.exit_code, image=c.config.image, image_ref=c.image_ref,
            image_id=c.image_ref, reason=c.reason, message=c.message, labels=c.config.labels,
            annotations=c.config.annotations, mounts=c.config.mounts,
            log_path=str(c.log_path or ""))
        return pb.ContainerStatusResponse(status=status)

    async def UpdateContainerResources(self, request: Any, context: Any) -> Any:
        self._count("UpdateContainerResources")
        return self.pb.UpdateContainerResourcesResponse()

    async def ReopenContainerLog(self, request: Any, context: Any) -> Any:
        self._count("ReopenContainerLog")
        self._container(request.container_id)  # each record opens the file anew
        return self.pb.ReopenContainerLogResponse()

    async def ExecSync(self, request: Any, context: Any) -> Any:
        self._count("ExecSync")
        c = self._container(request.container_id)
        if c.process is None or c.process.returncode is not None:
            raise CriError(grpc.StatusCode.UNKNOWN, f"container {c.id} is not running")
        try:
            proc = await self.executor.exec(c.process, c.launch, list(request.cmd),
                                            stdout=asyncio.subprocess.PIPE,
                                            stderr=asyncio.subprocess.PIPE)
        except StartError as err:
            raise CriError(grpc.StatusCode.UNKNOWN, f"failed to exec in container: {err}") from None
        try:
            async with asyncio.timeout(request.timeout or None):
                out, errors = await proc.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            await proc.wait()
            raise CriError(grpc.StatusCode.DEADLINE_EXCEEDED,
                         f"command timed out after {request.timeout}s") from None
        return self.pb.ExecSyncResponse(stdout=out, stderr=errors, exit_code=proc.returncode or 0)

    # Streaming (`kubectl exec`, `attach`, `port-forward`): a one-time URL of the node's
    # streaming server, which the kubelet connects to and proxies (sim/cri/streaming.py).

    def _streaming(self, what: str) -> StreamingServer:
        if self.streaming is None:
            raise CriError(grpc.StatusCode.UNIMPLEMENTED, f"{what}: no streaming server")
        return self.streaming

    def _running(self, container_id: str) -> Container:
        c = self._container(container_id)
        if c.process is None or c.process.returncode is not None:
            raise CriError(grpc.StatusCode.FAILED_PRECONDITION, f"container {c.id} is not running")
        return c

    async def Exec(self, request: Any, context: Any) -> Any:
        self._count("Exec")
        server = self._streaming("exec")
        c = self._running(request.container_id)
        if not request.cmd:
            raise CriError(grpc.StatusCode.INVALID_ARGUMENT, "cmd must not be empty")
        if request.tty and request.stderr:
            raise CriError(grpc.StatusCode.INVALID_ARGUMENT, "tty and stderr cannot both be true")
        spawn = functools.partial(self.executor.exec, c.process, c.launch, list(request.cmd))
        session = ExecSession(spawn, stdin=request.stdin, stdout=request.stdout,
                              stderr=request.stderr, tty=request.tty)
        return self.pb.ExecResponse(url=server.url(session))

    async def Attach(self, request: Any, context: Any) -> Any:
        self._count("Attach")
        server = self._streaming("attach")
        c = self._running(request.container_id)
        if request.stdin:
            raise CriError(grpc.StatusCode.UNIMPLEMENTED, "attach with stdin is not supported "
                           "by the compute-domain-sim runtime: a container's stdin is not kept "
                           "open (attach without -i shows its output)")
        if c.log_path is None:
            raise CriError(grpc.StatusCode.FAILED_PRECONDITION, f"container {c.id} has no log")
        output = functools.partial(follow_log, c.log_path, lambda: bool(c.finished_at))
        session = AttachSession(output, stdout=request.stdout, stderr=request.stderr,
                                tty=request.tty)
        return self.pb.AttachResponse(url=server.url(session))

    async def PortForward(self, request: Any, context: Any) -> Any:
        self._count("PortForward")
        server = self._streaming("port forward")
        self._sandbox(request.pod_sandbox_id)
        return self.pb.PortForwardResponse(url=server.url(PortForwardSession(self.pod_ip)))

    # Stats: the kubelet's cAdvisor reads this machine; the runtime reports none.

    async def ContainerStats(self, request: Any, context: Any) -> Any:
        self._count("ContainerStats")
        raise CriError(grpc.StatusCode.UNIMPLEMENTED, "container stats come from cAdvisor")

    async def ListContainerStats(self, request: Any, context: Any) -> Any:
        self._count("ListContainerStats")
        return self.pb.ListContainerStatsResponse()

    async def ListPodSandboxStats(self, request: Any, context: Any) -> Any:
        self._count("ListPodSandboxStats")
        return self.pb.ListPodSandboxStatsResponse()

    # --- ImageService ------------------------------------------------------------------

    def _image_ref(self, spec: Any) -> str:
        """The reference an ImageSpec names: the kubelet creates containers by the image ID
        PullImage answered, with the pod's reference as `user_specified_image`."""
        if spec.user_specified_image:
            return str(spec.user_specified_image)
        return next((r for r, i in self.pulled.items() if i == spec.image), str(spec.image))

    def _image_id(self, ref: str) -> str:
        return "sha256:" + hashlib.sha256(ref.encode()).hexdigest()

    def _image(self, ref: str) -> Any:
        image = self.images.lookup(ref)
        uid, _ = image.ids()
        out = self.pb.Image(id=self._image_id(ref), repo_tags=[ref], size=1,
                            spec=self.pb.ImageSpec(image=ref))
        if uid is not None:
            out.uid.value = uid
        return out

    async def PullImage(self, request: Any, context: Any) -> Any:
        self._count("PullImage")
        ref = request.image.image
        self.pulled[ref] = self._image_id(ref)
        return self.pb.PullImageResponse(image_ref=self.pulled[ref])

    async def ImageStatus(self, request: Any, context: Any) -> Any:
        self._count("ImageStatus")
        ref = request.image.image
        known = ref in self.pulled or ref in self.pulled.values()
        if not known:
            return self.pb.ImageStatusResponse()
        name = next((r for r, i in self.pulled.items() if ref in (r, i)), ref)
        return self.pb.ImageStatusResponse(image=self._image(name))

    async def ListImages(self, request: Any, context: Any) -> Any:
        self._count("ListImages")
        return self.pb.ListImagesResponse(images=[self._image(r) for r in self.pulled])

    async def RemoveImage(self, request: Any, context: Any) -> Any:
        self._count("RemoveImage")
        ref = request.image.image
        for name, image_id in list(self.pulled.items()):
            if ref in (name, image_id):
                del self.pulled[name]
        return self.pb.RemoveImageResponse()

    async def ImageFsInfo(self, request: Any, context: Any) -> Any:
        self._count("ImageFsInfo")
        pb = self.pb
        usage = pb.FilesystemUsage(timestamp=nanos(),
                                   fs_id=pb.FilesystemIdentifier(mountpoint=str(self.state_dir)))
        usage.used_bytes.value = 0
        usage.inodes_used.value = 0
        return pb.ImageFsInfoResponse(image_filesystems=[usage], container_filesystems=[usage])


class CriError(Exception):
    """A gRPC error status for the kubelet (sim/cri/server.py turns it into one)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
