"""One simulated node run by the upstream kubelet: its CRI runtime, served on a unix socket,
and its kubelet (sim/cri/kubelet.py), with the node's own credentials.

The kubelet refuses a loopback node IP ("nodeIP can't be loopback address"), so the
Node's InternalIP, where kube-apiserver reaches the kubelet for logs and exec, is this
machine's own address (`machine_address`), each node's kubelet on a port of its own.
Pods keep the node's loopback address (`NodeHost`'s 127.A.B.N) as their IP: that is what
the CRI runtime reports for a sandbox, so the IMEX daemons of a domain still have one
address per node.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import psutil
from kubernetes import client

from sim.cluster.images import ImageCatalog
from sim.cluster.node import NodeHost
from sim.cluster.processes import free_port
from sim.cri import protos
from sim.cri.kubelet import KubeletFiles, UpstreamKubelet
from sim.cri.paths import NodePaths
from sim.cri.runtime import Container, NodeRuntime
from sim.cri.server import serve
from sim.cri.streaming import StreamingServer

# The labels the kubelet puts on every container it creates (kubelet's
# pkg/kubelet/types/labels.go): which pod and container of the API a CRI container is.
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_NAME = "io.kubernetes.pod.name"
CONTAINER_NAME = "io.kubernetes.container.name"


def machine_address() -> str:
    """A non-loopback IPv4 address of an interface of this machine that is up."""
    stats = psutil.net_if_stats()
    for name, addresses in sorted(psutil.net_if_addrs().items()):
        if name in stats and not stats[name].isup:
            continue
        for address in addresses:
            if address.family.name != "AF_INET":
                continue
            ip = ipaddress.ip_address(address.address)
            if not ip.is_loopback and not ip.is_link_local:
                return str(ip)
    raise RuntimeError(
        "the upstream kubelet needs a non-loopback IPv4 address on this machine (it refuses "
        "a loopback node IP) and none is up; add one, e.g. `ip link add cdsim0 type dummy && "
        "ip addr add 10.254.0.1/32 dev cdsim0 && ip link set cdsim0 up`")


class UpstreamNode:
    """The node `host` (pods at `pod_ip`) with its runtime and kubelet; `start()` returns
    once the kubelet runs (its Node turns Ready later: `wait_ready`)."""

    def __init__(self, host: NodeHost, fs: Path, *, pod_ip: str, plane: Any,
                 labels: Mapping[str, str], images: ImageCatalog,
                 env_extra: Mapping[str, str], verbosity: int = 2,
                 address: str | None = None, socket_dir: Path | None = None) -> None:
        self.host = host
        self.name = host.name
        self.pod_ip = pod_ip
        self.address = address or machine_address()
        self.port = free_port(self.address)
        self.plane = plane
        self.labels = dict(labels)
        self.paths = NodePaths(fs)
        self.state_dir = host.root / "kubelet"
        # A unix socket path must stay under 108 bytes: the socket lives by the short path.
        self.socket = (socket_dir or fs) / "cri.sock"
        pb, self._grpc = protos.load()
        # `kubectl exec` and the like: the kubelet dials the URLs its runtime hands out.
        self.streaming = StreamingServer("127.0.0.1")
        self.runtime = NodeRuntime(
            pb, node_name=self.name, paths=self.paths, state_dir=host.root / "cri",
            pod_ip=pod_ip, cdi_dirs=[host.cdi_dir], in_cluster=plane.in_cluster(),
            images=images, env_extra=env_extra, namespace=lambda: self.kubelet.namespace,
            pods_dir=host.pods_dir, streaming=self.streaming)
        self.server: grpc.aio.Server | None = None
        credentials = plane.node_credentials(self.name)
        kubeconfig = credentials.write_kubeconfig(self.state_dir / "kubeconfig")
        serving = plane.kubelet_serving(self.name, self.address)
        files = KubeletFiles(kubeconfig, serving.cert, serving.key, plane.ca_file)
        node_labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        self.kubelet = UpstreamKubelet(
            plane.components.path("kubelet"), node_name=self.name, node_ip=self.address,
            port=self.port, paths=self.paths, state_dir=self.state_dir, files=files,
            runtime_socket=self.socket, verbosity=verbosity,
            extra_args=[f"--node-labels={node_labels}"] if node_labels else ())

    async def start(self) -> None:
        await self.streaming.start()
        self.server = await serve(self.runtime, self._grpc, self.socket)
        await self.kubelet.start()

    async def wait_ready(self, api: client.ApiClient, timeout: float = 60.0) -> None:
        """Until the kubelet registered the Node and reports it Ready."""
        core = client.CoreV1Api(api)
        deadline = time.monotonic() + timeout
        while True:
            if self.kubelet.process is not None and self.kubelet.process.returncode is not None:
                raise RuntimeError(f"the kubelet of {self.name} exited "
                                   f"({self.kubelet.process.returncode}):\n"
                                   f"{self.kubelet.log_tail()}")
            try:
                node = await asyncio.to_thread(core.read_node, self.name)
                conditions = {c.type: c.status for c in node.status.conditions or ()}
                if conditions.get("Ready") == "True":
                    return
            except client.ApiException as err:
                if err.status != 404:
                    raise
            if time.monotonic() > deadline:
                raise RuntimeError(f"the kubelet of {self.name} did not make its Node Ready in "
                                   f"{timeout:.0f}s:\n{self.kubelet.log_tail()}")
            await asyncio.sleep(0.2)

    def containers(self, namespace: str, pod_prefix: str = "",
                   container: str = "") -> list[Container]:
        """The runtime's containers of pods in `namespace` (named `pod_prefix`...), oldest
        first; `container`: only those of that name."""
        out = []
        for c in self.runtime.containers.values():
            labels = c.config.labels
            if labels.get(POD_NAMESPACE) != namespace:
                continue
            if not labels.get(POD_NAME, "").startswith(pod_prefix):
                continue
            if container and labels.get(CONTAINER_NAME) != container:
                continue
            out.append(c)
        return sorted(out, key=lambda c: c.created_at)

    def pids(self) -> list[int]:
        """The kubelet's process and every running container's."""
        out = [c.process.pid for c in self.runtime.containers.values()
               if c.process is not None and c.process.returncode is None]
        if self.kubelet.process is not None and self.kubelet.process.returncode is None:
            out.append(self.kubelet.process.pid)
        return out

    async def stop(self) -> None:
        """Stop the kubelet, then every container, then the runtime's sockets."""
        await self.kubelet.stop()
        await self.streaming.stop()
        await self.runtime.close()
        if self.server is not None:
            await self.server.stop(0)
            self.server = None


def log_tails(nodes: Sequence[UpstreamNode], lines: int = 20) -> str:
    return "\n".join(f"--- kubelet {n.name}:\n{n.kubelet.log_tail(lines)}" for n in nodes)
