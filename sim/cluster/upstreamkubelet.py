"""The simulated cluster with the upstream kubelet on every node (`--kubelet upstream`).

The control plane is the upstream one (`make k8s`); every node is a real kubelet of the
same release on the sim's CRI runtime (sim/cri/node.py), and the driver is installed with
its Helm chart by the real helm (`make helm`), as the reference's own end-to-end suite
installs its chart: its pods are the kubelets' pods, their claims prepared by the
kubelets' DRA manager through the agents' gRPC sockets. Helm installs before the
controllers start (`SimCluster._install`'s reason: the garbage collector knows the
CRDs' resources from its first discovery).

Nodes are few (cluster.MAX_UPSTREAM_NODES): 2-4, as the reference's demo needs; the
simulated kubelet keeps scaling.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from api import names
from runtime.kubecall import call
from sim.cluster import manifests
from sim.cluster.cluster import SimCluster
from sim.cluster.hostimex import HostImex
from sim.cluster.node import NodeHost, node_ip
from sim.cri.node import UpstreamNode, log_tails
from sim.cri.runtime import Container
from sim.fakeimex.install import install as install_fake_imex

PLUGIN_COMPONENT: Final = "kubelet-plugin"
CONTROLLER_COMPONENT: Final = "controller"
COMPONENT_LABEL: Final = f"{manifests.RELEASE}-component"
HELM: Final = Path(__file__).resolve().parents[2] / ".cache" / "bin" / "helm"
# A CRI log record: time, stream, P(artial) or F(ull), the text.
_CRI_RECORD = re.compile(rb"^\S+ (?:stdout|stderr) ([PF]) ?(.*)$")


@dataclass
class UpstreamSimNode:
    """One node at run time: its host, pod address, real kubelet and runtime."""

    host: NodeHost
    index: int
    ip: str
    node: UpstreamNode
    host_imex: HostImex | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.host.name


def cri_log_text(paths: list[Path]) -> str:
    """The text of CRI-format log files (kubelet's `kubectl logs` reading), oldest first."""
    out: list[bytes] = []
    for path in paths:
        with contextlib.suppress(OSError):
            for line in path.read_bytes().splitlines():
                match = _CRI_RECORD.match(line)
                if match is None:
                    continue
                out.append(match.group(2) + (b"\n" if match.group(1) == b"F" else b""))
    return b"".join(out).decode(errors="replace")


class UpstreamKubeletCluster(SimCluster):
    """`SimCluster` whose nodes run the upstream kubelet (module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.nodes: dict[str, UpstreamSimNode] = {}  # type: ignore[assignment]
        self.helm = HELM

    # --- bring-up --------------------------------------------------------------------

    async def _install(self, admin: Any) -> None:
        """helm install of the chart, in the IMEX mode and placement of the spec."""
        self.admin = admin.api_client()
        await self._bind_apiserver_to_kubelets()
        if not self.spec.driver:
            return
        kubeconfig = admin.write_kubeconfig(self.root / "kubeconfig")
        args = ["upgrade", "--install", manifests.RELEASE, str(manifests.CHART_DIR),
                "--namespace", self.namespace, "--create-namespace",
                "--kubeconfig", str(kubeconfig)]
        args += ["--set", f"logVerbosity={self.spec.verbosity}"]
        for key, value in manifests.chart_values(self.spec.mode,
                                                 self.spec.imex_placement).items():
            args += ["--set", f"{key}={value}"]
        await asyncio.to_thread(manifests.run_helm, self.helm, args)

    async def _bind_apiserver_to_kubelets(self) -> None:
        """kube-apiserver's kubelet client may use the kubelet API (logs, exec), as
        kubeadm binds it: the kubelets authorize through SubjectAccessReviews."""
        assert self.admin is not None
        rbac = client.RbacAuthorizationV1Api(self.admin)
        body = {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "kube-apiserver-kubelet-api-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:kubelet-api-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": "kube-apiserver-kubelet-client"}],
        }
        await call(rbac.create_cluster_role_binding, body)

    async def _add_node(self, name: str, index: int, clique: int | None) -> None:
        ip = node_ip(index, self.network)
        host = NodeHost(self.root / "nodes" / name, name, clique)
        install_fake_imex(host.path("/usr/bin"))
        labels = {"nvidia.com/gpu.present": "true"}
        if clique is not None:
            labels[names.LABEL_GPU_CLIQUE] = host.clique_id
        fs = self._alias(host)
        node = UpstreamNode(host, fs, pod_ip=ip, plane=self.control_plane, labels=labels,
                            images=self.images, env_extra=self._daemon_env(),
                            verbosity=max(2, min(self.spec.verbosity, 4)))
        sim_node = UpstreamSimNode(host, index, ip, node, labels=labels)
        if self.host_managed:
            sim_node.host_imex = HostImex(host, ip)
        self.nodes[name] = sim_node
        await node.start()
        assert self.admin is not None
        await node.wait_ready(self.admin, 60.0)
        if self.spec.driver:
            await self._agent_kubeconfig(name)
        if sim_node.host_imex is not None:
            await sim_node.host_imex.start(peers=self._clique_peers(clique))

    def _daemon_env(self) -> dict[str, str]:
        """The fake IMEX resolves its peers' DNS names in the container's /etc/hosts: here
        the kubelet's own etc-hosts file of the pod, which the daemon edits."""
        return {**super()._daemon_env(), "FAKE_IMEX_HOSTS_FILE": "/etc/hosts"}

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every node's plugin pod and the controller's pod are Ready (the kubelets'
        readiness, the API's word)."""
        assert self.admin is not None
        core = client.CoreV1Api(self.admin)
        deadline = time.monotonic() + timeout
        want = {f"{PLUGIN_COMPONENT}/{n}" for n in self.nodes} | {CONTROLLER_COMPONENT}
        ready: set[str] = set()
        while True:
            pods = await asyncio.to_thread(
                core.list_namespaced_pod, self.namespace, label_selector=COMPONENT_LABEL)
            ready = set()
            for pod in pods.items:
                component = (pod.metadata.labels or {}).get(COMPONENT_LABEL, "")
                conditions = {c.type: c.status for c in pod.status.conditions or ()}
                if conditions.get("Ready") != "True" or pod.metadata.deletion_timestamp:
                    continue
                ready.add(component if component == CONTROLLER_COMPONENT
                          else f"{component}/{pod.spec.node_name}")
            if want <= ready:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"not Ready after {timeout:.0f}s: {', '.join(sorted(want - ready))}\n"
                    + log_tails([n.node for n in self.nodes.values()]))
            await asyncio.sleep(0.2)

    # --- the driver's containers, as the runtime runs them -----------------------------

    def _agent_containers(self, node: str) -> list[Container]:
        return self.nodes[node].node.containers(
            self.namespace, f"{manifests.RELEASE}-{PLUGIN_COMPONENT}-", "compute-domains")

    def agent_log(self, node: str) -> str:
        containers = self._agent_containers(node)
        return cri_log_text([c.log_path for c in containers if c.log_path is not None])

    def agent_pid(self, node: str) -> int | None:
        running = [c for c in self._agent_containers(node)
                   if c.process is not None and c.process.returncode is None]
        return running[-1].process.pid if running and running[-1].process else None

    async def restart_agent(self, node: str, *, kill: bool = True,
                            timeout: float = 60.0) -> None:
        """SIGKILL (or SIGTERM) the node's agent; returns once the kubelet runs a new one."""
        old = self.agent_pid(node)
        if old is None:
            raise RuntimeError(f"no agent runs on {node}")
        running = self._agent_containers(node)[-1]
        assert running.process is not None
        running.process.signal(signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.agent_pid(node) in (None, old):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the kubelet of {node} did not restart its agent in "
                                   f"{timeout:.0f}s:\n"
                                   f"{self.nodes[node].node.kubelet.log_tail()}")
            await asyncio.sleep(0.1)

    async def stop_agent(self, node: str, timeout: float = 10.0) -> None:
        raise NotImplementedError("a real kubelet restarts a stopped container; "
                                  "use restart_agent")

    async def start_agent(self, node: str, timeout: float = 30.0) -> None:
        raise NotImplementedError("a real kubelet restarts a stopped container; "
                                  "use restart_agent")

    # --- tear-down -------------------------------------------------------------------

    async def _stop_nodes(self) -> None:
        await asyncio.gather(*(n.node.stop() for n in self.nodes.values()),
                             return_exceptions=True)
        await asyncio.gather(
            *(n.host_imex.stop() for n in self.nodes.values() if n.host_imex is not None),
            return_exceptions=True)

    def processes(self) -> list[Any]:
        """The control plane's processes, the kubelets and every container they run."""
        out: list[Any] = list(self.control_plane.processes())
        for sim_node in self.nodes.values():
            out += [_Pid(f"{sim_node.name}/{i}", pid)
                    for i, pid in enumerate(sim_node.node.pids())]
        return out


@dataclass(frozen=True)
class _Pid:
    name: str
    pid: int
