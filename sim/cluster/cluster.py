"""The simulated cluster: a control plane, nodes, and the real driver run from its manifests.

`SimCluster` puts the pieces of `sim/` together the way a real cluster is put together:

- a control plane (`sim.controlplane`): the API emulator with the sim's scheduler and
  workload controllers (`emulator`, the default), or upstream etcd, kube-apiserver,
  kube-controller-manager and kube-scheduler (`kubernetes`, built by `make k8s`); either
  way authentication and RBAC are enforced;
- the deploy manifests (`packaging/deploy`, the overlay of the IMEX mode) installed as an
  admin would install them, the controller Deployment and the kubelet-plugin DaemonSet
  included: their pods are scheduled and run by the nodes' kubelets like any other, from
  the pod spec and the image the Dockerfile builds (`images`), with ServiceAccount tokens
  the API server issued for the pod;
- per node: its own file system (`NodeHost.fs`: kubelet's directories, the CDI root, the
  driver root with the fake `nvidia-imex`, the simulated kernel and GPU files), a loopback
  address, and a kubelet (`SimKubelet`) that registers the Node with the node's own
  credentials, runs every pod bound to it in a sandbox (`sandbox`) and serves the kubelet
  API for `kubectl logs` and `kubectl exec`;
- in host-managed mode, a fake host `nvidia-imex` per node that the admin would run.

What the sim changes in the manifests, as an admin editing them for one machine would
(`sim/cluster/simedits.py`): the agent reads the node's simulated kernel and GPU files through its
driver-root mount, binds its health and metrics ports to its pod IP (every node shares
this machine's network), cleans up and times out faster; the controller binds to its pod
IP and resyncs faster. `ClusterSpec.controller_env` / `agent_env` are merged over that.

With `ClusterSpec(in_process=True)` (scale: hundreds of nodes) the agents, the daemon
containers and the fake `nvidia-imex` daemons run as tasks of this process instead, from
the same pod specs (`sim.cluster.inprocess`); the controller and workloads stay processes.
With `sim_workers=N` as well (N > 1) the node side of the cluster (each node's kubelet and
what it runs) is shared out over N worker processes (`sim.cluster.nodeworker`), so the
rack's nodes are not all on one GIL; this process keeps the control plane and sees the
nodes through their files and what the workers report (`SimNode.kubelet` and `.agent`,
and the agent faults below, then need `sim_workers=1`).

Tests that break the driver on purpose get the knobs an admin or an outage has:
`stop_agent` / `start_agent` stop a node's agent container and keep it stopped, then let
it run again; `restart_agent` and `restart_controller` kill the program (the kubelet
restarts it); `slice_wipe_delay` is how long after an agent deregistered its kubelet
deletes the node's ResourceSlices (kubelet's 30 s by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

from kubernetes import client

from api import draconvert, names
from runtime.kubecall import call, call_retrying
from sim.apiserver.process import ServerProcess
from sim.apiserver.runner import ServerThread
from sim.cluster import manifests
from sim.cluster.cpumeter import CpuMeter
from sim.cluster.hostimex import HostImex
from sim.cluster.images import ImageCatalog
from sim.cluster.inprocess import InProcessHost
from sim.cluster.kubelet import WIPE_SLICES_AFTER, SimKubelet
from sim.cluster.node import MAX_NODES, NETWORK_BLOCK, NodeHost, node_ip, random_network
from sim.cluster.nodeplan import (  # noqa: F401  (named here since before)
    DOCKERFILE,
    SIM_IMAGE,
    KubeletSetup,
    NodePlan,
    ProgramRef,
    add_all,
    blocks,
    image_catalog,
    kubelet_tls_files,
    new_kubelet,
)
from sim.cluster.nodeworker import WorkerPlan
from sim.cluster.nodeworkers import InWorker, NodeWorkers, WorkerProgram, in_worker_error
from sim.cluster.podprogram import PodProgram
from sim.cluster.processes import free_port
from sim.cluster.simedits import for_one_machine
from sim.controlplane import CONTROL_PLANES, EMULATOR, KUBERNETES
from sim.controlplane.base import ControlPlane, Credentials
from sim.fakeimex.install import install as install_fake_imex

log = logging.getLogger(__name__)

Obj = dict[str, Any]

MODES: Final = ("driverManaged", "hostManaged")
NODES_PER_CLIQUE: Final = 18  # a GB200 NVL72 rack: 18 compute trays
SMALL_CLUSTER: Final = 16  # nodes up to which the daemons poll and heartbeat fast
# Controller and agent programs run here by default (the venv's console scripts).
DEFAULT_BIN_DIR: Final = Path(sys.executable).parent
SIM_KUBELET: Final = "sim"
UPSTREAM_KUBELET: Final = "upstream"
KUBELETS: Final = (SIM_KUBELET, UPSTREAM_KUBELET)
MAX_UPSTREAM_NODES: Final = 8  # a real kubelet each: ~100 MB and a core-second to start
# How long the tokens of the controller and the agents (processes, not pods) live.
PROGRAM_TOKEN_SECONDS: Final = 7 * 24 * 3600


@dataclass(frozen=True)
class ClusterSpec:
    """The shape of a simulated cluster."""

    root: Path
    nodes: int = 4
    cliques: int | None = None  # default: 18 nodes per clique
    non_fabric: int = 0  # extra nodes without NVLink fabric (e.g. H100 nodes)
    mode: str = "driverManaged"
    imex_placement: str = "pod"  # or "agent": the node agents supervise nvidia-imex
    agent_program: Path = DEFAULT_BIN_DIR / "compute-domain-agent"
    controller_program: Path = DEFAULT_BIN_DIR / "compute-domain-controller"
    imex_start_delay: float = 0.5  # seconds the fake nvidia-imex takes to become READY
    verbosity: int = 4
    in_process: bool = False  # agents, daemons and fake IMEX as tasks (scale; see inprocess)
    network: str | None = None  # the nodes' 127.A.B.N addresses; default: a random 127.A.B
    # Seconds after an agent deregistered until its kubelet deletes the node's slices.
    slice_wipe_delay: float = WIPE_SLICES_AFTER
    # Merged over the env the manifests give the controller / each agent (last word).
    controller_env: Mapping[str, str] = field(default_factory=dict)
    agent_env: Mapping[str, str] = field(default_factory=dict)
    control_plane: str = EMULATOR  # or KUBERNETES: upstream components (make k8s)
    # False: nodes and control plane only; an admin installs the driver (`helm install`).
    driver: bool = True
    # resource.k8s.io versions served. The emulator: any, e.g. ("v1beta1",) as Kubernetes
    # 1.32 serves it, ("v1beta1", "v1beta2") as 1.33. Upstream kube-apiserver: v1 (its
    # scheduler and controllers need it) plus the betas named, enabled by --runtime-config.
    resource_versions: tuple[str, ...] = ("v1",)
    # "sim": the simulated kubelet (the default; it scales to hundreds of nodes), or
    # "upstream": the real kubelet of the pinned release on the sim's CRI runtime, the
    # driver installed by its Helm chart (sim/cluster/upstreamkubelet.py).
    kubelet: str = SIM_KUBELET
    # In-process mode: worker processes the nodes are shared out over (1: every node in
    # this process, as objects tests can reach; more: see sim.cluster.nodeworker). At most
    # one per node is used.
    sim_workers: int = 1
    # In-process mode: tell the driver's CPU time from the sim's in the processes that run
    # both (sim/cluster/cpumeter.py; `cpu_split`). For benches: it costs a little per task.
    cpu_meter: bool = False

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.imex_placement not in ("pod", "agent"):
            raise ValueError(f"imex_placement {self.imex_placement!r} is not pod or agent")
        if self.imex_placement == "agent" and self.mode != "driverManaged":
            raise ValueError("imex_placement agent applies to driverManaged only")
        if self.control_plane not in CONTROL_PLANES:
            raise ValueError(
                f"control plane {self.control_plane!r} is not one of {', '.join(CONTROL_PLANES)}"
            )
        for version in self.resource_versions:
            draconvert.check_version(version)
        if not self.resource_versions:
            raise ValueError("resource_versions must name at least one version")
        if self.control_plane != EMULATOR and "v1" not in self.resource_versions:
            raise ValueError("the kubernetes control plane serves resource.k8s.io/v1 (its "
                             "scheduler needs it): name v1 among resource_versions")
        if self.nodes < 1:
            raise ValueError(f"nodes must be at least 1 (got {self.nodes})")
        self._validate_kubelet()
        self._validate_workers()
        if self.nodes + self.non_fabric > MAX_NODES:
            raise ValueError(f"at most {MAX_NODES} nodes (one 127.A.B.N address each, "
                             f"{NETWORK_BLOCK} /24s per cluster)")
        if self.non_fabric < 0:
            raise ValueError(f"non_fabric must not be negative (got {self.non_fabric})")
        if self.slice_wipe_delay < 0:
            raise ValueError(f"slice_wipe_delay must not be negative (got {self.slice_wipe_delay})")
        cliques = self.clique_count
        if not 1 <= cliques <= self.nodes:
            raise ValueError(f"cliques must be between 1 and the node count {self.nodes}")
        for program in (self.agent_program, self.controller_program):
            if not Path(program).is_file():
                raise ValueError(f"program {program} not found (run `make` to build the venv)")

    def _validate_kubelet(self) -> None:
        if self.kubelet not in KUBELETS:
            raise ValueError(f"kubelet {self.kubelet!r} is not one of {', '.join(KUBELETS)}")
        if self.kubelet != UPSTREAM_KUBELET:
            return
        if self.control_plane != KUBERNETES:
            raise ValueError("the upstream kubelet needs the upstream control plane "
                             "(--control-plane kubernetes)")
        if self.in_process:
            raise ValueError("the upstream kubelet runs the agents as its pods; it cannot be "
                             "combined with in-process agents")
        total = self.nodes + self.non_fabric
        if total > MAX_UPSTREAM_NODES:
            raise ValueError(f"at most {MAX_UPSTREAM_NODES} nodes with the upstream kubelet "
                             f"(got {total}); the simulated kubelet scales further")

    def _validate_workers(self) -> None:
        if isinstance(self.sim_workers, bool) or not isinstance(self.sim_workers, int):
            raise ValueError(f"sim_workers must be a whole number (got {self.sim_workers!r})")
        if self.sim_workers < 1:
            raise ValueError(f"sim_workers must be at least 1 (got {self.sim_workers})")
        if self.sim_workers > 1 and not self.in_process:
            raise ValueError("sim_workers above 1 shares in-process nodes out over processes: "
                             "it needs in_process=True (--in-process)")

    @property
    def worker_count(self) -> int:
        """The worker processes the nodes run in (0: in this process)."""
        workers = min(self.sim_workers, self.nodes + self.non_fabric)
        return workers if workers > 1 else 0

    @property
    def clique_count(self) -> int:
        return (
            self.cliques if self.cliques is not None else math.ceil(self.nodes / NODES_PER_CLIQUE)
        )

    def layout(self) -> list[tuple[str, int | None]]:
        """(node name, clique number or None) for every node: fabric nodes split evenly
        and contiguously over cliques 1..K, then the non-fabric nodes."""
        total = self.nodes + self.non_fabric
        width = max(2, len(str(total)))
        out: list[tuple[str, int | None]] = []
        k = self.clique_count
        for i in range(self.nodes):
            out.append((f"node-{i + 1:0{width}d}", i * k // self.nodes + 1))
        for i in range(self.nodes, total):
            out.append((f"node-{i + 1:0{width}d}", None))
        return out


@dataclass
class SimNode:
    """One node at run time: its host, address, kubelet and agent (the node's
    kubelet-plugin pod). A node run by a worker process (`sim_workers` > 1) has its
    host, address and labels here; its kubelet and agent say they are out of reach."""

    host: NodeHost
    index: int
    kubelet: SimKubelet
    agent: PodProgram
    ip: str
    host_imex: HostImex | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.host.name


class SimCluster:
    """Start with `await start()`, stop with `await stop()`; everything in between is real."""

    # Told how far the start's wait got (the CLI passes sim/progress.py's throttle).
    on_progress: Callable[[str], object] | None = None

    def __init__(self, spec: ClusterSpec) -> None:
        spec.validate()
        self.spec = spec
        self.root = Path(spec.root)
        self.network = spec.network or random_network()
        self.objects = for_one_machine(
            manifests.load(spec.mode, placement=spec.imex_placement),
            spec.verbosity,
            agent_env=spec.agent_env,
            controller_env=spec.controller_env,
            in_process=spec.in_process,
        )
        self.namespace = _single(self.objects, "Namespace")["metadata"]["name"]
        self.accounts = _service_accounts(self.objects)
        self.control_plane: ControlPlane = _control_plane(
            spec.control_plane, self.root, tuple(spec.resource_versions),
            own_process=spec.in_process,
        )  # fmt: skip
        self.admin: client.ApiClient | None = None
        self.kubeconfigs: dict[str, Path] = {}
        self.nodes: dict[str, SimNode] = {}
        self._executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="sim")
        # The node worker processes (None: every node runs in this process).
        self.workers = NodeWorkers() if spec.worker_count else None
        in_here = spec.in_process and self.workers is None
        self.in_process = InProcessHost(spec.verbosity) if in_here else None
        self.cpu_meter = CpuMeter() if in_here and spec.cpu_meter else None
        self.images = self._image_catalog()
        # Short paths to the nodes' file systems: a unix socket's path must stay under 108
        # bytes, and the kubelets reach the agents' sockets through these (see _add_node).
        self._aliases: Path | None = None
        self.controller: PodProgram | WorkerProgram = (
            WorkerProgram(self.workers, "the controller", "controller")
            if self.workers is not None
            else self._program(
                "Deployment",
                lambda: [n.kubelet for n in self.nodes.values()],
                "the controller",
                "controller",
            )
        )

    @property
    def host_managed(self) -> bool:
        return self.spec.mode == "hostManaged"

    @property
    def url(self) -> str:
        return self.control_plane.admin.server

    @property
    def server(self) -> ServerThread | ServerProcess | None:
        """The emulator (`op`: its counters and fault knobs), or None on the upstream
        control plane."""
        return getattr(self.control_plane, "server", None)

    def server_version(self) -> str:
        return self.control_plane.server_version()

    # --- the manifests, edited for one machine ----------------------------------------

    def _program(
        self, kind: str, kubelets: Callable[[], Iterable[SimKubelet]], what: str, name: str
    ) -> PodProgram:
        workload = _single(self.objects, kind)
        template = workload["spec"]["template"]
        labels = template["metadata"].get("labels") or {}
        container = template["spec"]["containers"][0]["name"]
        return PodProgram(kubelets, self.namespace, labels, container, what, name)

    # --- bring-up --------------------------------------------------------------------

    async def start(self) -> None:
        # Every client call runs in a thread; kubelets and informers need more than the
        # default pool of cores + 4.
        asyncio.get_running_loop().set_default_executor(self._executor)
        self.root.mkdir(parents=True, exist_ok=True)
        await self.control_plane.start(install=self._install)
        admin = self.control_plane.admin
        self.kubeconfigs["admin"] = admin.write_kubeconfig(self.root / "kubeconfig")
        if self.spec.driver:
            token = await self.service_account_token(self.accounts["controller"])
            self.kubeconfigs["controller"] = admin.with_token(token).write_kubeconfig(
                self.root / "kubeconfigs" / "controller", namespace=self.namespace
            )
        if self.in_process is not None:
            self.in_process.open()
        if self.cpu_meter is not None:
            self.cpu_meter.install()
        if self.workers is not None:
            await self._start_workers(self.workers)
        else:
            layout = [(name, index, clique)
                      for index, (name, clique) in enumerate(self.spec.layout(), start=1)]
            await add_all(layout, lambda node: self._add_node(*node))
            # In layout order, whichever finished first (what tests and reports walk).
            ordered = {name: self.nodes[name] for name, _, _ in layout}
            self.nodes.clear()
            self.nodes.update(ordered)
        if self.spec.driver:
            # Every node's plugin pod starts at once on this machine's cores.
            await self.wait_ready(60.0 + 2.0 * len(self.nodes))
        await self.control_plane.wait_settled()

    async def service_account_token(
        self,
        account: str,
        namespace: str | None = None,
        seconds: int = PROGRAM_TOKEN_SECONDS,
        bound_to: Obj | None = None,
    ) -> str:
        """A token of ServiceAccount `account` from the API server's TokenRequest API, as
        an admin gets one (`kubectl create token`, `--bound-object-kind` when `bound_to`
        is a boundObjectRef)."""
        assert self.admin is not None
        spec: Obj = {"expirationSeconds": seconds}
        if bound_to is not None:
            spec["boundObjectRef"] = bound_to
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        core = client.CoreV1Api(self.admin)
        answer = await call_retrying(
            core.create_namespaced_service_account_token,
            account,
            namespace or self.namespace,
            body,
        )
        return str(answer.status.token)

    async def _install(self, admin: Credentials) -> None:
        """The admin installs the driver's manifests (before the controllers start)."""
        self.admin = admin.api_client()
        if self.spec.driver:
            await call(manifests.apply, self.admin, self.install_objects())

    def user_kubeconfig(self, name: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig of a plain user `name` (RBAC decides what it may do)."""
        credentials = self.control_plane.user(name, groups)
        return credentials.write_kubeconfig(self.root / "users" / f"{name}.kubeconfig")

    def install_objects(self) -> list[Obj]:
        """Everything the manifests hold, the controller and the agent included; the
        DeviceClasses in the resource.k8s.io version the cluster serves, as the chart renders
        them there (its `cd.resourceApiVersion`)."""
        version = self.control_plane.resource_version
        return [draconvert.from_v1(o, o["kind"], version)
                if o.get("apiVersion") == draconvert.api_version("v1") else o
                for o in self.objects]

    async def _add_node(self, name: str, index: int, clique: int | None) -> None:
        plan = self._node_plan(name, index, clique)
        kubelet = new_kubelet(
            plan,
            self._kubelet_setup(),
            self.images,
            tls=self.control_plane.kubelet_tls(name, plan.ip),
            executor=self.in_process.executor if self.in_process is not None else None,
        )
        await kubelet.register()
        if self.spec.driver:
            await self._agent_kubeconfig(name)
        agent = self._program(
            "DaemonSet", lambda: [kubelet], f"the agent on {name}", f"agent-{name}"
        )
        node = SimNode(plan.host, index, kubelet, agent, plan.ip, labels=plan.labels)
        if self.host_managed:
            node.host_imex = HostImex(plan.host, plan.ip)
        self.nodes[name] = node
        kubelet.start()
        if node.host_imex is not None:
            await node.host_imex.start(peers=self._clique_peers(clique))

    def _node_plan(self, name: str, index: int, clique: int | None, *,
                   tls_files: bool = False) -> NodePlan:
        """The node's host files (created here), address, labels and credentials; with
        `tls_files`, its kubelet serving certificate as files (for a worker process)."""
        ip = node_ip(index, self.network)
        host = NodeHost(self.root / "nodes" / name, name, clique)
        # The driver's programs of the node: nvidia-imex and nvidia-imex-ctl.
        install_fake_imex(host.path("/usr/bin"))
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        # What the GPU Operator and GPU Feature Discovery put on a GPU node (every node
        # here has GPUs; a non-fabric one is an H100 without NVLink), and on one of an
        # NVLink clique its clique (the agent, as the sim installs it, also keeps that
        # label in step: simedits.py). The plugin DaemonSet selects GPU nodes by the first.
        labels["nvidia.com/gpu.present"] = "true"
        if clique is not None:
            labels[names.LABEL_GPU_CLIQUE] = host.clique_id
        plane = self.control_plane
        return NodePlan(
            host,
            index,
            ip,
            self._alias(host),
            labels,
            kubelet_port=free_port(ip),
            credentials=plane.node_credentials(name),
            tls=kubelet_tls_files(plane, name, ip) if tls_files else None,
            host_imex_peers=tuple(self._clique_peers(clique)) if self.host_managed else None,
        )

    def _kubelet_setup(self) -> KubeletSetup:
        plane = self.control_plane
        return KubeletSetup(
            server=Credentials(plane.admin.server, plane.admin.ca_file),
            in_cluster=plane.in_cluster(),
            resource_version=plane.resource_version,
            kubelet_version=plane.server_version(),
            env_extra=self._daemon_env(),
            wipe_slices_after=self.spec.slice_wipe_delay,
        )

    async def _start_workers(self, workers: NodeWorkers) -> None:
        """The nodes' files and plans here, their kubelets in the worker processes: each
        worker gets a contiguous block of the layout (whole cliques where they fit)."""
        layout = self.spec.layout()
        plans = [self._node_plan(name, index, clique, tls_files=True)
                 for index, (name, clique) in enumerate(layout, start=1)]  # fmt: skip
        setup = self._kubelet_setup()
        deployment = self._program("Deployment", list, "the controller", "controller")
        daemonset = self._program("DaemonSet", list, "the agent", "agent")
        shares = [
            WorkerPlan(
                number, [plans[i] for i in share], setup, self.spec.verbosity,
                str(self.spec.agent_program), str(self.spec.controller_program),
                self.objects,
                ProgramRef(self.namespace, deployment.labels, deployment.container_name),
                ProgramRef(self.namespace, daemonset.labels, daemonset.container_name),
                cpu_meter=self.spec.cpu_meter,
            )
            for number, share in enumerate(blocks(len(plans), self.spec.worker_count), 1)
        ]  # fmt: skip
        for plan in plans:
            self.nodes[plan.name] = SimNode(
                plan.host, plan.index,
                cast(SimKubelet, InWorker(f"the kubelet of {plan.name}")),
                cast(PodProgram, InWorker(f"the agent on {plan.name}")),
                plan.ip, labels=dict(plan.labels),
            )  # fmt: skip
        await workers.start(shares)
        if self.spec.driver:
            await asyncio.gather(*(self._agent_kubeconfig(p.name) for p in plans))

    def _alias(self, host: NodeHost) -> Path:
        """A short path (a link under /tmp) to the node's file system."""
        if self._aliases is None:
            self._aliases = Path(tempfile.mkdtemp(prefix="cds-", dir="/tmp"))
        link = self._aliases / str(len(list(self._aliases.iterdir())) + 1)
        link.symlink_to(host.fs.resolve())
        return link

    async def _agent_kubeconfig(self, node: str) -> Path:
        """A kubeconfig of the kubelet plugin's ServiceAccount with a token bound to Node
        `node`, what a systemd install of the agent gets (`kubectl create token
        --bound-object-kind Node`); tests use it to act as that node's agent."""
        assert self.admin is not None
        found = await call_retrying(client.CoreV1Api(self.admin).read_node, node)
        ref = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": found.metadata.uid}
        token = await self.service_account_token(self.accounts["agent"], bound_to=ref)
        path = self.root / "kubeconfigs" / f"agent-{node}"
        self.kubeconfigs[f"agent-{node}"] = self.control_plane.admin.with_token(
            token
        ).write_kubeconfig(path, namespace=self.namespace)
        return path

    def _image_catalog(self) -> ImageCatalog:
        """The project's image as its Dockerfile builds it, under every reference the
        manifests and the controller use, with this checkout's programs inside."""
        return image_catalog(self.spec.agent_program, self.spec.controller_program,
                             self.objects)  # fmt: skip

    def _clique_peers(self, clique: int | None) -> list[str]:
        """Addresses of the fabric nodes of `clique` (the host IMEX nodes config)."""
        return [
            node_ip(i, self.network)
            for i, (_, c) in enumerate(self.spec.layout(), start=1)
            if c is not None and c == clique
        ]

    def _daemon_env(self) -> dict[str, str]:
        """What the project image's containers get beyond their pod spec: the fake IMEX's
        knobs; `{pod_dir}` is each pod's own directory.

        Small clusters poll and heartbeat fast so a demo is snappy. Large ones keep the
        daemon's production poll interval (1 s), and a slower fake heartbeat: on one
        machine every peer heartbeat of every clique costs this machine's CPU, which on a
        real rack is spread over the nodes (18 peers x 72 nodes at 0.2 s is 6,000
        messages a second)."""
        small = self.spec.nodes + self.spec.non_fabric <= SMALL_CLUSTER
        env = {
            "FAKE_IMEX_HOSTS_FILE": "{pod_dir}/hosts",
            "FAKE_IMEX_STATE_FILE": "{pod_dir}/imex-state.json",
            "FAKE_IMEX_HEARTBEAT": "0.2" if small else "2",
            "FAKE_IMEX_RELOAD_INTERVAL": "0.2",
            "IMEX_RELOAD_INTERVAL": "0.2",
            "FAKE_IMEX_START_DELAY": str(self.spec.imex_start_delay),
            "IMEX_POLL_INTERVAL": "0.2" if small else "",
        }
        return {k: v for k, v in env.items() if v}

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every agent is registered with its kubelet and the controller's pod is
        Ready (it leads, with synced caches): what Ready driver pods mean on a cluster."""
        deadline = time.monotonic() + timeout
        if self.workers is not None:
            await self._wait_workers_ready(self.workers, deadline, timeout)
            await self.controller.wait_ready(max(0.1, deadline - time.monotonic()))
            return
        for done, node in enumerate(self.nodes.values()):
            self._progress(done)
            left = max(0.1, deadline - time.monotonic())
            try:
                await node.kubelet.watcher.wait_registered(names.DRIVER_NAME, timeout=left)
            except (TimeoutError, AssertionError) as err:
                raise RuntimeError(
                    f"the agent on {node.name} did not register with kubelet: {err}\n"
                    + node.agent.log_tail()
                ) from None
        await self.controller.wait_ready(max(0.1, deadline - time.monotonic()))

    async def _wait_workers_ready(
        self, workers: NodeWorkers, deadline: float, timeout: float
    ) -> None:
        """Until every node's agent registered with its kubelet, as the workers report."""
        while True:
            missing = [n for n in self.nodes if n not in workers.registered()]
            if not missing:
                return
            self._progress(len(self.nodes) - len(missing))
            gone = workers.gone()
            if gone or time.monotonic() > deadline:
                why = (f"a sim worker exited: {gone[0]}" if gone
                       else f"did not register with kubelet within {timeout:.0f}s")
                log_path = workers.waiting_logs().get(missing[0], "")
                raise RuntimeError(
                    f"the agent on {missing[0]} (and {len(missing) - 1} more) {why}\n"
                    + _tail(log_path)
                )
            await workers.changed(min(0.5, max(0.01, deadline - time.monotonic())))

    def _progress(self, registered: int) -> None:
        if self.on_progress is not None:
            self.on_progress(f"{registered}/{len(self.nodes)} agents registered with kubelet")

    def _in_process_only(self, what: str) -> None:
        if self.workers is not None:
            raise in_worker_error(what)

    def agent_log(self, node: str) -> str:
        """Everything the node's agent logged, across its restarts."""
        self._in_process_only("agent_log")
        return self.nodes[node].agent.log_text()

    async def restart_agent(self, node: str, *, kill: bool = True) -> None:
        """SIGKILL (or SIGTERM) the node's agent; returns once its kubelet runs it again."""
        self._in_process_only("restart_agent")
        await self.nodes[node].agent.restart(kill=kill)

    async def stop_agent(self, node: str, timeout: float = 10.0) -> None:
        """Stop the node's agent gracefully (SIGTERM: it removes its sockets) and keep it
        stopped; returns once the node's kubelet has deregistered it, so the slice wipe
        (`slice_wipe_delay`) is counting."""
        self._in_process_only("stop_agent")
        sim_node = self.nodes[node]
        await sim_node.agent.stop()
        await sim_node.kubelet.watcher.wait_deregistered(names.DRIVER_NAME, timeout=timeout)

    async def start_agent(self, node: str, timeout: float = 30.0) -> None:
        """Start a stopped agent again on the same state; returns once its kubelet has
        registered it (which also calls off a pending slice wipe)."""
        self._in_process_only("start_agent")
        sim_node = self.nodes[node]
        await sim_node.agent.start(timeout)
        try:
            await sim_node.kubelet.watcher.wait_registered(names.DRIVER_NAME, timeout=timeout)
        except TimeoutError as err:
            raise RuntimeError(f"{err}\n{sim_node.agent.log_tail()}") from None

    async def restart_controller(self, *, kill: bool = True) -> None:
        await self.controller.restart(kill=kill)

    # --- tear-down -------------------------------------------------------------------

    async def cpu_split(self) -> dict[str, dict[str, float]]:
        """Per process that runs in-process nodes ("sim" here, "sim worker N"): the
        driver's and the sim's CPU-seconds so far (`ClusterSpec(cpu_meter=True)`; {}
        without it)."""
        if not self.spec.cpu_meter:
            return {}
        if self.cpu_meter is not None:
            return {"sim": self.cpu_meter.seconds()}
        if self.workers is None:
            return {}
        answers = await self.workers.ask("cpu")
        return {f"sim worker {n}": a for n, a in enumerate(answers, 1)}

    async def stop(self) -> None:
        """Stop everything this cluster started; safe to call after a failed start."""
        if self.cpu_meter is not None:
            self.cpu_meter.uninstall()
        await self._stop_nodes()
        if self.admin is not None:
            self.admin.close()
            self.admin = None
        await self.control_plane.stop()
        if self._aliases is not None:
            shutil.rmtree(self._aliases, ignore_errors=True)
            self._aliases = None

    async def _stop_nodes(self) -> None:
        """The kubelets (and what runs on the nodes), then the hosts' own IMEX daemons;
        or the worker processes that run them."""
        if self.workers is not None:
            await self.workers.stop()
            return
        await asyncio.gather(
            *(n.kubelet.stop() for n in self.nodes.values()), return_exceptions=True
        )
        if self.in_process is not None:
            with contextlib.suppress(Exception):
                await self.in_process.close()
        await asyncio.gather(
            *(n.host_imex.stop() for n in self.nodes.values() if n.host_imex is not None),
            return_exceptions=True,
        )
        for node in self.nodes.values():
            node.kubelet.api.close()

    def processes(self) -> list[Any]:
        """The processes this cluster runs: the driver's programs (in-process agents are
        not processes) and the upstream control plane's components; each has `name` and
        `pid`."""
        out: list[Any] = []
        if self.workers is not None:  # the agents are tasks; the host IMEX daemons are not
            out += [_Pid(f"host-imex-{n}", p) for n, p in self.workers.host_imex_pids().items()]
        else:
            out += [n.agent for n in self.nodes.values() if n.agent.pid is not None]
        out += self.control_plane.processes()
        return out + ([self.controller] if self.controller.pid is not None else [])


@dataclass(frozen=True)
class _Pid:
    """A process a worker runs, as `processes()` names it."""

    name: str
    pid: int


def _tail(path: str, chars: int = 3000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-chars:] if path else ""
    except OSError:
        return ""


def new_cluster(spec: ClusterSpec) -> SimCluster:
    """The cluster of `spec`: its nodes on the simulated or the upstream kubelet."""
    if spec.kubelet == UPSTREAM_KUBELET:
        from sim.cluster.upstreamkubelet import UpstreamKubeletCluster

        return UpstreamKubeletCluster(spec)
    return SimCluster(spec)


def _control_plane(
    kind: str, root: Path, resource_versions: tuple[str, ...], *, own_process: bool = False
) -> ControlPlane:
    """`own_process`: the emulator serves from a child process (the scale mode's)."""
    if kind == KUBERNETES:
        from sim.controlplane.upstream import KubernetesControlPlane

        betas = [f"{draconvert.api_version(v)}=true" for v in resource_versions if v != "v1"]
        flags = [f"--runtime-config={','.join(betas)}"] if betas else []
        return KubernetesControlPlane(root / "control-plane", apiserver_flags=flags)
    from sim.controlplane.emulator import EmulatorControlPlane

    return EmulatorControlPlane(
        root / "control-plane", own_process=own_process, resource_versions=resource_versions
    )


def _single(objects: Sequence[Obj], kind: str) -> Obj:
    found = [o for o in objects if o.get("kind") == kind]
    if len(found) != 1:
        raise ValueError(f"the deploy manifests hold {len(found)} {kind} objects; expected one")
    return found[0]


def _service_accounts(objects: Sequence[Obj]) -> dict[str, str]:
    """role ("controller", "agent", "daemon") -> ServiceAccount name, from the manifests:
    the controller Deployment's and the agent DaemonSet's pod specs name theirs, and the
    daemon's is the one the controller renders into daemon pods."""
    accounts = {
        "controller": _pod_account(_single(objects, "Deployment")),
        "agent": _pod_account(_single(objects, "DaemonSet")),
    }
    declared = {o["metadata"]["name"] for o in objects if o.get("kind") == "ServiceAccount"}
    if names.DAEMON_SERVICE_ACCOUNT in declared:
        accounts["daemon"] = names.DAEMON_SERVICE_ACCOUNT
    missing = {a for a in accounts.values() if a not in declared}
    if missing:
        raise ValueError(f"the deploy manifests use undeclared ServiceAccounts {sorted(missing)}")
    return accounts


def _pod_account(workload: Obj) -> str:
    spec = workload["spec"]["template"]["spec"]
    account = spec.get("serviceAccountName")
    if not account:
        kind, name = workload["kind"], workload["metadata"]["name"]
        raise ValueError(f"{kind} {name} in the deploy manifests names no serviceAccountName")
    return str(account)
