"""Helpers of the simulated-cluster scenarios: one real cluster per test, observed through the
API (as an admin) and the nodes' published container views."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from eventually import eventually_async
from kubernetes import client

from api import names
from runtime.kubecall import call
from sim.cluster.cluster import ClusterSpec, SimCluster
from sim.cluster.demo import create_objects, delete_objects, wait_clean, wait_ready
from sim.cluster.evidence import EvidenceChain, Snapshot
from sim.cluster.example import NAMESPACE
from sim.cluster.leftovers import process_leftovers

Obj = dict[str, Any]


def run_scenario(root: Path, body: Callable[[SimCluster], Awaitable[None]], **spec: Any) -> None:
    """Start a cluster under `root`, run `body`, stop it; no process may outlive it."""

    async def main() -> None:
        cluster = SimCluster(ClusterSpec(root=root, **spec))
        try:
            await cluster.start()
            await body(cluster)
        finally:
            await cluster.stop()

    asyncio.run(main())
    left = process_leftovers(root)
    assert left == [], left


def chain(cluster: SimCluster, name: str, namespace: str = NAMESPACE) -> EvidenceChain:
    return EvidenceChain(
        namespace,
        name,
        driver_namespace=cluster.namespace,
        host_managed=cluster.host_managed,
        node_roots={n: node.host.root for n, node in cluster.nodes.items()},
        agent_placement=cluster.spec.imex_placement == "agent",
    )


async def apply_until_ready(
    cluster: SimCluster, objects: Sequence[Obj], timeout: float = 90
) -> EvidenceChain:
    """Create the objects (one ComputeDomain) and wait for its whole evidence chain."""
    await create_objects(cluster.admin, objects)
    [cd] = [o for o in objects if o["kind"] == names.KIND_COMPUTE_DOMAIN]
    return await ready(
        cluster, cd["metadata"]["name"], cd["metadata"].get("namespace", NAMESPACE), timeout
    )


async def ready(
    cluster: SimCluster, name: str, namespace: str = NAMESPACE, timeout: float = 90
) -> EvidenceChain:
    """Wait until every workload of ComputeDomain `name` sees its channel."""
    observed = chain(cluster, name, namespace)
    await wait_ready(cluster, [observed], timeout)
    return observed


async def delete_until_clean(
    cluster: SimCluster, objects: Sequence[Obj], uids: Sequence[str], timeout: float = 120
) -> None:
    """Delete `objects`, then wait until nothing of the domains `uids` is left; fails
    naming what is. The ceiling is for a loaded machine (CI: a restarted agent coming back
    while another cluster runs beside); a clean delete returns as soon as it is clean."""
    await delete_objects(cluster.admin, objects)
    left = await wait_clean(cluster, uids, [NAMESPACE], timeout)
    assert left == [], f"left {timeout:.0f} s after the delete: {left}"


async def eventually(
    check: Callable[[], Awaitable[Any]], what: str, timeout: float = 60, every: float = 0.2
) -> Any:
    """The first truthy result of `check`; fails naming `what` (and the last result)."""
    return await eventually_async(check, what, timeout=timeout, interval=every)


def pod_syncs(controller: Any) -> list[tuple[str, int]]:
    """(pod key, resourceVersion) of the pod each finished pod sync of a `ClaimController`
    worked from: proof that it acted on (or ignored) a given write."""
    synced: list[tuple[str, int]] = []
    real = controller._sync_pod

    async def sync_pod(key: str) -> None:
        pod = controller.pods.items.get(key) if controller.pods is not None else None
        await real(key)
        if pod is not None:
            synced.append((key, int(pod["metadata"]["resourceVersion"])))

    controller._sync_pod = sync_pod
    return synced


def synced_since(synced: list[tuple[str, int]], versions: dict[str, int]) -> bool:
    """Every pod key in `versions` had a sync from at least that resourceVersion."""
    return all(any(k == key and rv >= version for k, rv in synced)
               for key, version in versions.items())


async def snapshot(cluster: SimCluster) -> Snapshot:
    assert cluster.admin is not None
    return await Snapshot.take(cluster.admin, cluster.namespace)


def pods_of(snap: Snapshot, namespace: str, cd_uid: str | None = None) -> list[Obj]:
    """Pods of `namespace` (only those labeled with `cd_uid` when given)."""
    return [
        p
        for p in snap.pods
        if p["metadata"]["namespace"] == namespace and (cd_uid is None or _cd_label(p) == cd_uid)
    ]


def _cd_label(obj: Obj) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(names.LABEL_COMPUTE_DOMAIN)


def labeled_nodes(snap: Snapshot, cd_uid: str) -> set[str]:
    return {n["metadata"]["name"] for n in snap.nodes if _cd_label(n) == cd_uid}


def clique_entries(snap: Snapshot, cd_uid: str) -> dict[str, dict[str, Obj]]:
    """Clique object name -> node name -> daemon entry."""
    return {
        c["metadata"]["name"]: {d["nodeName"]: d for d in c.get("daemons") or ()}
        for c in snap.cliques
        if c["metadata"]["name"].startswith(f"{cd_uid}.")
    }


def ready_entries(snap: Snapshot, cd_uid: str) -> set[str]:
    return {
        node
        for entries in clique_entries(snap, cd_uid).values()
        for node, d in entries.items()
        if d.get("status") == names.STATUS_READY
    }


async def delete_pod(cluster: SimCluster, namespace: str, name: str, *, force: bool) -> None:
    core = client.CoreV1Api(cluster.admin)
    kwargs: Obj = {"grace_period_seconds": 0} if force else {}
    await call(core.delete_namespaced_pod, name, namespace, **kwargs)


def channel_devices(view: Obj) -> list[str]:
    return [
        d["path"]
        for d in view.get("deviceNodes") or ()
        if d["path"].startswith("/dev/nvidia-caps-imex-channels/")
    ]


async def node_slices(cluster: SimCluster, node: str) -> list[Obj]:
    """The driver's ResourceSlices of `node`, as the admin lists them (kubelet wipes these
    when the node's agent has been deregistered for longer than `slice_wipe_delay`)."""
    assert cluster.admin is not None
    resource = client.ResourceV1Api(cluster.admin)
    selector = f"spec.nodeName={node},spec.driver={names.DRIVER_NAME}"
    listing = await call(resource.list_resource_slice, field_selector=selector)
    return [cluster.admin.sanitize_for_serialization(s) for s in listing.items]


def daemon_logs(cluster: SimCluster, node: str) -> str:
    """Everything the daemon pods' containers on `node` wrote (all restarts), so a test can
    look for what a daemon reports when it cannot do its job."""
    pods_dir = cluster.nodes[node].host.pods_dir
    return "".join(
        path.read_text(errors="replace")
        for path in sorted(pods_dir.glob(f"{cluster.namespace}_computedomain-daemon-*/*.log"))
    )
