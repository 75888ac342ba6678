"""The simulated cluster: a control plane, nodes, and the real driver.

`SimCluster` puts the pieces of `sim/` together the way a real cluster is put together:

- a control plane (`sim.controlplane`): the API emulator with the sim's scheduler and
  workload controllers (`emulator`, the default), or upstream etcd, kube-apiserver,
  kube-controller-manager and kube-scheduler (`kubernetes`, built by `make k8s`); either
  way authentication and RBAC are enforced;
- the deploy manifests (`packaging/deploy`, the overlay of the IMEX mode) installed as an
  admin would install them, except the controller Deployment and the agent DaemonSet,
  whose programs run here as real processes on the "hosts" instead (with kubeconfigs
  holding ServiceAccount tokens the API server issued, so the shipped RBAC is what they
  get);
- per node: host directories and fixtures (`NodeHost`), a loopback address, a kubelet
  (`SimKubelet`) that registers the Node and heartbeats its Lease with the node's own
  credentials, runs the daemon pods' `compute-domain-agent daemon run` as processes with
  the fake `nvidia-imex` on PATH (each with a token bound to its pod) and serves the
  kubelet API for `kubectl logs`, and the agent (`compute-domain-agent plugin`);
- in host-managed mode, a fake host `nvidia-imex` per node that the admin would run.

With `ClusterSpec(in_process=True)` (scale: hundreds of nodes) the agents, the daemon
containers and the fake `nvidia-imex` daemons run as tasks of this process instead, on the
same driver code (`sim.cluster.inprocess`); the controller stays a process.

Tests that break the driver on purpose get the knobs an admin or an outage has:
`ClusterSpec.controller_env` / `agent_env` override what the manifests set (as editing the
Deployment or DaemonSet would), `stop_agent` / `start_agent` take a node's agent away and
bring it back, and `slice_wipe_delay` is how long after an agent deregistered its kubelet
deletes the node's ResourceSlices (kubelet's 30 s by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from api import names
from api.kube import call, call_retrying
from sim.apiserver.runner import ServerThread
from sim.cluster import manifests
from sim.cluster.hostimex import HostImex
from sim.cluster.inprocess import InProcessAgent, InProcessHost
from sim.cluster.kubelet import WIPE_SLICES_AFTER, SimKubelet, container_env
from sim.cluster.node import NodeHost, node_ip, random_network
from sim.cluster.nodestatus import NodeSpec
from sim.cluster.processes import ManagedProcess, free_port
from sim.controlplane import CONTROL_PLANES, EMULATOR, KUBERNETES
from sim.controlplane.base import ControlPlane, Credentials
from sim.fakeimex.install import install as install_fake_imex

log = logging.getLogger(__name__)

Obj = dict[str, Any]

MODES: Final = ("driverManaged", "hostManaged")
NODES_PER_CLIQUE: Final = 18  # a GB200 NVL72 rack: 18 compute trays
SIM_IMAGE: Final = "compute-domain-driver:sim"
SMALL_CLUSTER: Final = 16  # nodes up to which the daemons poll and heartbeat fast
# Variables of ours that must come from the manifests, not from whoever started the sim.
_DRIVER_ENV: Final = frozenset(
    {"IMEX_MODE", "FEATURE_GATES", "NAMESPACE", "NODE_NAME", "KUBECONFIG", "POD_NAME"}
)
# Controller and agent programs run here by default (the venv's console scripts).
DEFAULT_BIN_DIR: Final = Path(sys.executable).parent
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

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.control_plane not in CONTROL_PLANES:
            raise ValueError(
                f"control plane {self.control_plane!r} is not one of {', '.join(CONTROL_PLANES)}"
            )
        if self.nodes < 1:
            raise ValueError(f"nodes must be at least 1 (got {self.nodes})")
        if self.nodes + self.non_fabric > 254:
            raise ValueError("at most 254 nodes (one 127.A.B.N address each)")
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
    """One node at run time: its host, address, kubelet and agent process."""

    host: NodeHost
    index: int
    kubelet: SimKubelet
    agent: ManagedProcess | InProcessAgent
    ip: str
    host_imex: HostImex | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.host.name


class SimCluster:
    """Start with `await start()`, stop with `await stop()`; everything in between is real."""

    def __init__(self, spec: ClusterSpec) -> None:
        spec.validate()
        self.spec = spec
        self.root = Path(spec.root)
        self.network = spec.network or random_network()
        self.objects = manifests.render(manifests.overlay_path(spec.mode))
        self.namespace = _single(self.objects, "Namespace")["metadata"]["name"]
        self.accounts = _service_accounts(self.objects)
        self.control_plane: ControlPlane = _control_plane(spec.control_plane, self.root)
        self.admin: client.ApiClient | None = None
        self.kubeconfigs: dict[str, Path] = {}
        self.nodes: dict[str, SimNode] = {}
        self.controller: ManagedProcess | None = None
        self.controller_port = 0
        self._executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="sim")
        self.in_process = InProcessHost(spec.verbosity) if spec.in_process else None

    @property
    def host_managed(self) -> bool:
        return self.spec.mode == "hostManaged"

    @property
    def url(self) -> str:
        return self.control_plane.admin.server

    @property
    def server(self) -> ServerThread | None:
        """The emulator (its fault knobs and store), or None on the upstream control plane."""
        return getattr(self.control_plane, "server", None)

    def server_version(self) -> str:
        return self.control_plane.server_version()

    # --- bring-up --------------------------------------------------------------------

    async def start(self) -> None:
        # Every client call runs in a thread; kubelets and informers need more than the
        # default pool of cores + 4.
        asyncio.get_running_loop().set_default_executor(self._executor)
        self.root.mkdir(parents=True, exist_ok=True)
        await self.control_plane.start(install=self._install)
        admin = self.control_plane.admin
        self.kubeconfigs["admin"] = admin.write_kubeconfig(self.root / "kubeconfig")
        token = await self.service_account_token(self.accounts["controller"])
        self.kubeconfigs["controller"] = admin.with_token(token).write_kubeconfig(
            self.root / "kubeconfigs" / "controller", namespace=self.namespace
        )
        install_fake_imex(self.root / "bin")
        if self.in_process is not None:
            self.in_process.open()
        for index, (name, clique) in enumerate(self.spec.layout(), start=1):
            await self._add_node(name, index, clique)
        self.controller_port = free_port("127.0.0.1")
        controller_env = self._manifest_env(
            "Deployment", "compute-domain-controller-sim", "", "127.0.0.1"
        )
        controller_env.update(self.spec.controller_env)
        self.controller = ManagedProcess(
            "controller", self._controller_argv(), self.root / "controller.log", controller_env
        )
        await self.controller.start()
        await asyncio.gather(*(n.agent.start() for n in self.nodes.values()))
        await self.wait_ready()
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
        await call(manifests.apply, self.admin, self.install_objects())

    def user_kubeconfig(self, name: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig of a plain user `name` (RBAC decides what it may do)."""
        credentials = self.control_plane.user(name, groups)
        return credentials.write_kubeconfig(self.root / "users" / f"{name}.kubeconfig")

    def install_objects(self) -> list[Obj]:
        """The manifests minus the controller Deployment and the agent DaemonSet (their
        programs run as processes here)."""
        return [o for o in self.objects if o.get("kind") not in ("Deployment", "DaemonSet")]

    async def _add_node(self, name: str, index: int, clique: int | None) -> None:
        ip = node_ip(index, self.network)
        host = NodeHost(self.root / "nodes" / name, name, clique)
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        if clique is not None:
            labels["nvidia.com/gpu.present"] = "true"
        plane = self.control_plane
        node_spec = NodeSpec(
            name,
            ip,
            labels,
            kubelet_port=free_port(ip),
            kubelet_version=plane.server_version(),
        )
        kubelet = SimKubelet(
            plane.node_credentials(name).api_client(),
            name,
            registry_dir=host.root / "registry",
            cdi_dirs=[host.cdi_dir],
            pods_dir=host.pods_dir,
            pod_ip=ip,
            env_extra=self._daemon_env(),
            path_extra=[self.root / "bin", Path(self.spec.agent_program).parent],
            probe_period_cap=1.0,
            backoff_base=0.5,
            backoff_cap=5.0,
            executor=self.in_process.executor if self.in_process is not None else None,
            wipe_slices_after=self.spec.slice_wipe_delay,
            node=node_spec,
            tls=plane.kubelet_tls(name, ip),
            server=Credentials(plane.admin.server, plane.admin.ca_file),
        )
        # The kubelet registers its Node before the plugin runs: the plugin's token is
        # bound to that Node, which is what scopes it to this node (policies-kubelet-plugin).
        await kubelet.register()
        kubeconfig = await self._agent_kubeconfig(name)
        env = self._manifest_env(
            "DaemonSet", f"compute-domain-kubelet-plugin-{name}", name, ip
        )
        env[names.ENV_KUBECONFIG] = str(kubeconfig)
        env.update(self.spec.agent_env)
        argv = self._agent_argv(host, ip, kubeconfig)
        agent: ManagedProcess | InProcessAgent
        if self.in_process is not None:
            agent = self.in_process.agent(f"agent-{name}", argv, host.root / "agent.log", env)
        else:
            agent = ManagedProcess(f"agent-{name}", argv, host.root / "agent.log", env)
        node = SimNode(host, index, kubelet, agent, ip, labels=labels)
        if self.host_managed:
            node.host_imex = HostImex(host, ip, self.root / "bin")
        self.nodes[name] = node
        kubelet.start()
        if node.host_imex is not None:
            await node.host_imex.start(peers=self._clique_peers(clique))

    async def _agent_kubeconfig(self, node: str) -> Path:
        """A kubeconfig of the kubelet plugin's ServiceAccount with a token bound to Node
        `node`: the API server puts the node's name into the token's user info, as it does
        for the DaemonSet's pod-bound tokens (what a systemd install gets with `kubectl
        create token --bound-object-kind Node`)."""
        assert self.admin is not None
        found = await call_retrying(client.CoreV1Api(self.admin).read_node, node)
        ref = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": found.metadata.uid}
        token = await self.service_account_token(self.accounts["agent"], bound_to=ref)
        path = self.root / "kubeconfigs" / f"agent-{node}"
        self.kubeconfigs[f"agent-{node}"] = self.control_plane.admin.with_token(
            token
        ).write_kubeconfig(path, namespace=self.namespace)
        return path

    def _clique_peers(self, clique: int | None) -> list[str]:
        """Addresses of the fabric nodes of `clique` (the host IMEX nodes config)."""
        return [
            node_ip(i, self.network)
            for i, (_, c) in enumerate(self.spec.layout(), start=1)
            if c is not None and c == clique
        ]

    def _daemon_env(self) -> dict[str, str]:
        """What the daemon pods' containers get beyond their pod spec (and the kubeconfig
        of the token their kubelet requested for them): the fake IMEX's knobs;
        `{pod_dir}` is each pod's own directory.

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
            "FAKE_IMEX_START_DELAY": str(self.spec.imex_start_delay),
            "IMEX_POLL_INTERVAL": "0.2" if small else "",
        }
        return {k: v for k, v in env.items() if v}

    def _manifest_env(self, kind: str, pod_name: str, node: str, ip: str) -> dict[str, str]:
        """The environment the manifests give the container of the `kind` workload, as
        kubelet would resolve it for a pod `pod_name` on `node`: the mode, feature gates
        and settings an admin chose reach the programs exactly as in a real cluster."""
        workload = _single(self.objects, kind)
        container = workload["spec"]["template"]["spec"]["containers"][0]
        pod = {"metadata": {"name": pod_name, "namespace": self.namespace, "uid": pod_name}}
        env = {k: v for k, v in os.environ.items() if k not in _DRIVER_ENV}
        env.update(container_env(container, pod, node, ip))
        return env

    def _agent_argv(self, host: NodeHost, ip: str, kubeconfig: Path) -> list[str]:
        """The DaemonSet's command with this node's host paths as flags (flags win over
        the manifest env): on a real node they are the hostPath mounts."""
        argv = [
            str(self.spec.agent_program),
            "plugin",
            "-v", str(self.spec.verbosity),
            *host.agent_args(kubeconfig, self.namespace),
            "--gpu-clique-label-enabled", "true",
            "--cleanup-interval", "2s",
            # kubelet hears why a claim waits (an Event on the pod) after 8 s, not 45 s.
            "--prepare-timeout", "8s",
            # Every node shares this machine's ports: health on a free one, metrics on
            # the node's own address.
            "--healthcheck-port", "0",
            "--http-endpoint", f"{ip}:8081",
        ]  # fmt: skip
        if self.host_managed:
            argv += ["--imex-ctl-chroot", "false"]
        return argv

    def _controller_argv(self) -> list[str]:
        return [
            str(self.spec.controller_program),
            "--kubeconfig", str(self.kubeconfigs["controller"]),
            "--image-name", SIM_IMAGE,
            "--log-verbosity-cd-daemon", str(self.spec.verbosity),
            "--resync-interval", "10s",
            "--http-endpoint", f"127.0.0.1:{self.controller_port}",
        ]  # fmt: skip

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the controller leads with synced caches and every agent is registered
        with its kubelet (what Ready driver pods mean on a real cluster)."""
        deadline = time.monotonic() + timeout
        for node in self.nodes.values():
            left = max(0.1, deadline - time.monotonic())
            try:
                await node.kubelet.watcher.wait_registered(names.DRIVER_NAME, timeout=left)
            except (TimeoutError, AssertionError) as err:
                raise RuntimeError(
                    f"the agent on {node.name} did not register with kubelet: {err}\n"
                    + node.agent.log_tail()
                ) from None
        url = f"http://127.0.0.1:{self.controller_port}/readyz"
        while True:
            body = await asyncio.to_thread(_get, url)
            if body == "ok":
                return
            if time.monotonic() > deadline:
                tail = self.controller.log_tail() if self.controller else ""
                raise RuntimeError(f"the controller is not ready ({body!r}):\n{tail}")
            await asyncio.sleep(0.1)

    async def restart_agent(self, node: str, *, kill: bool = True) -> None:
        """SIGKILL (or stop) the node's agent and start it again on the same state."""
        agent = self.nodes[node].agent
        await (agent.kill() if kill else agent.stop())
        await agent.start()

    async def stop_agent(self, node: str, timeout: float = 10.0) -> None:
        """Stop the node's agent gracefully (SIGTERM: it removes its sockets) and keep it
        stopped; returns once the node's kubelet has deregistered it, so the slice wipe
        (`slice_wipe_delay`) is counting."""
        sim_node = self.nodes[node]
        await sim_node.agent.stop()
        await sim_node.kubelet.watcher.wait_deregistered(names.DRIVER_NAME, timeout=timeout)

    async def start_agent(self, node: str, timeout: float = 30.0) -> None:
        """Start a stopped agent again on the same state; returns once its kubelet has
        registered it (which also calls off a pending slice wipe)."""
        sim_node = self.nodes[node]
        await sim_node.agent.start()
        try:
            await sim_node.kubelet.watcher.wait_registered(names.DRIVER_NAME, timeout=timeout)
        except TimeoutError as err:
            raise RuntimeError(f"{err}\n{sim_node.agent.log_tail()}") from None

    async def restart_controller(self, *, kill: bool = True) -> None:
        assert self.controller is not None
        await (self.controller.kill() if kill else self.controller.stop())
        await self.controller.start()

    # --- tear-down -------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop everything this cluster started; safe to call after a failed start."""
        with contextlib.suppress(Exception):
            if self.controller is not None:
                await self.controller.stop()
        await asyncio.gather(
            *(n.kubelet.stop() for n in self.nodes.values()), return_exceptions=True
        )
        await asyncio.gather(*(n.agent.stop() for n in self.nodes.values()), return_exceptions=True)
        if self.in_process is not None:
            with contextlib.suppress(Exception):
                await self.in_process.close()
        await asyncio.gather(
            *(n.host_imex.stop() for n in self.nodes.values() if n.host_imex is not None),
            return_exceptions=True,
        )
        for node in self.nodes.values():
            node.kubelet.api.close()
        if self.admin is not None:
            self.admin.close()
            self.admin = None
        await self.control_plane.stop()

    def processes(self) -> list[ManagedProcess]:
        """The processes this cluster runs: the driver's programs (in-process agents are
        not processes) and the upstream control plane's components."""
        out = [n.agent for n in self.nodes.values() if isinstance(n.agent, ManagedProcess)]
        out += self.control_plane.processes()
        return out + ([self.controller] if self.controller is not None else [])


def _control_plane(kind: str, root: Path) -> ControlPlane:
    if kind == KUBERNETES:
        from sim.controlplane.upstream import KubernetesControlPlane

        return KubernetesControlPlane(root / "control-plane")
    from sim.controlplane.emulator import EmulatorControlPlane

    return EmulatorControlPlane(root / "control-plane")


def _get(url: str) -> str:
    """The body of a GET, or a short reason why there is none."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.read().decode())
    except (OSError, urllib.error.URLError) as err:
        return f"unreachable: {err}"


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
