"""What it takes to build one simulated node's kubelet, as plain picklable values.

The main process decides everything about a node (its host files, address, labels,
credentials, kubelet port and serving certificate); whoever runs the node, the main
process itself (`sim_workers=1`) or a node worker process (`sim.cluster.nodeworker`),
builds its kubelet from the same `NodePlan` with `new_kubelet`, so the two ways cannot
drift apart. Everything here crosses a process boundary by pickling: no SSL contexts,
clients or event-loop objects, only paths, strings and small dataclasses.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from api import names
from sim.cluster.containers import ContainerExecutor
from sim.cluster.images import ImageCatalog, from_dockerfile, repository
from sim.cluster.kubelet import SimKubelet
from sim.cluster.node import NodeHost
from sim.cluster.nodestatus import NodeSpec
from sim.controlplane.base import ControlPlane, Credentials, InCluster, server_context

Obj = dict[str, Any]
T = TypeVar("T")
SIM_IMAGE = "compute-domain-driver:sim"
DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


@dataclass(frozen=True)
class TlsFiles:
    """A kubelet's serving certificate and key, and the CA its clients must be signed by."""

    cert: Path
    key: Path
    client_ca: Path

    def context(self) -> ssl.SSLContext:
        return server_context(self.cert, self.key, self.client_ca)


@dataclass(frozen=True)
class KubeletSetup:
    """What every kubelet of one cluster shares."""

    server: Credentials  # where executed containers' kubeconfigs point
    in_cluster: InCluster
    resource_version: str
    kubelet_version: str
    env_extra: Mapping[str, str]
    wipe_slices_after: float | None


@dataclass(frozen=True)
class NodePlan:
    """One node: its host files (created by the main process), its short alias of the
    node's `/` (unix socket paths must stay short), address, labels and credentials."""

    host: NodeHost
    index: int
    ip: str
    fs: Path
    labels: dict[str, str]  # the node's own (NodeSpec and SimNode share it, as before)
    kubelet_port: int
    credentials: Credentials
    tls: TlsFiles | None
    # Host-managed mode: the addresses of the host IMEX daemon's peers (its clique's).
    host_imex_peers: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.host.name


@dataclass(frozen=True)
class ProgramRef:
    """Which pod's container a `PodProgram` follows (labels in a namespace)."""

    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    container: str = ""


def new_kubelet(
    plan: NodePlan,
    setup: KubeletSetup,
    images: ImageCatalog,
    *,
    tls: ssl.SSLContext | None,
    executor: ContainerExecutor | None,
    async_pod_watch: bool = False,
) -> SimKubelet:
    """The node's kubelet, not yet registered or started (`async_pod_watch`: see
    SimKubelet)."""
    node_spec = NodeSpec(
        plan.name,
        plan.ip,
        plan.labels,
        kubelet_port=plan.kubelet_port,
        kubelet_version=setup.kubelet_version,
    )
    return SimKubelet(
        plan.credentials.api_client(),
        plan.name,
        registry_dir=plan.fs / names.KUBELET_REGISTRY_DIR.lstrip("/"),
        cdi_dirs=[plan.host.cdi_dir],
        pods_dir=plan.host.pods_dir,
        pod_ip=plan.ip,
        env_extra=dict(setup.env_extra),
        probe_period_cap=1.0,
        backoff_base=0.5,
        backoff_cap=5.0,
        executor=executor,
        wipe_slices_after=setup.wipe_slices_after,
        node=node_spec,
        tls=tls,
        server=setup.server,
        images=images,
        in_cluster=setup.in_cluster,
        resource_version=setup.resource_version,
        host_root=plan.fs,
        async_pod_watch=async_pod_watch,
    )


def kubelet_tls_files(plane: ControlPlane, node: str, address: str) -> TlsFiles | None:
    """The files behind `plane.kubelet_tls(node, address)`, for a kubelet built in another
    process (an SSL context does not pickle): the upstream plane issues them with
    `kubelet_serving` and trusts `ca_file`; the emulator's PKI is `plane.pki`."""
    serving = getattr(plane, "kubelet_serving", None)
    if serving is not None:
        pair = serving(node, address)
        return TlsFiles(Path(pair.cert), Path(pair.key), Path(plane.ca_file))  # type: ignore[attr-defined]
    pki = getattr(plane, "pki", None)
    if pki is not None:
        pair = pki.kubelet_serving(node, address)
        return TlsFiles(Path(pair.cert), Path(pair.key), Path(pki.ca.cert))
    return None


def image_catalog(
    agent_program: Path, controller_program: Path, objects: Sequence[Obj]
) -> ImageCatalog:
    """The project's image as its Dockerfile builds it, under every reference the
    manifests and the controller use, with this checkout's programs inside. Built where
    it is used (it holds read-only mappings, which do not pickle)."""
    programs = {
        "compute-domain-agent": Path(agent_program),
        "compute-domain-controller": Path(controller_program),
    }
    # A venv's console scripts need the venv, its base interpreter and the sources.
    runtime = {str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, sys.executable)}
    runtime.add(str(DOCKERFILE.parent))
    image = from_dockerfile(DOCKERFILE, SIM_IMAGE, programs, sorted(runtime))
    refs = {SIM_IMAGE} | {
        str(c["image"])
        for o in objects
        if o.get("kind") in ("Deployment", "DaemonSet")
        for c in o["spec"]["template"]["spec"].get("containers") or ()
    }
    return ImageCatalog(image, frozenset(repository(r) for r in refs))


def blocks(count: int, parts: int) -> list[range]:
    """`count` node positions dealt into `parts` contiguous blocks of (nearly) equal size:
    the layout puts a clique's nodes next to each other, so a block keeps most cliques in
    one worker, and each worker gets the same share of the work."""
    parts = max(1, min(parts, count))
    return [range(i * count // parts, (i + 1) * count // parts) for i in range(parts)]


# Nodes brought up at once: a node's start is mostly round trips (its Node, lease and
# credentials) and small file writes, so overlapping them is what makes a rack's start
# quick; a bound keeps the API server's queue and the thread pool from flooding.
NODES_AT_ONCE = 16


async def add_all(plans: Sequence[T], add: Callable[[T], Awaitable[None]],
                  at_once: int = NODES_AT_ONCE) -> None:
    """`add(plan)` for every plan, at most `at_once` running; the first error is raised
    once the others started have finished."""
    gate = asyncio.Semaphore(at_once)

    async def one(plan: T) -> None:
        async with gate:
            await add(plan)

    results = await asyncio.gather(*(one(p) for p in plans), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
