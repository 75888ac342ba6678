"""What a domain of 72 nodes (4 full cliques) costs the API server per daemon join, and that
every join lands: the scale smoke test of the end-to-end tier (tests/bench/bench_bringup.py
measures the times; nothing here is timed).

Counted by the emulator per ServiceAccount and resource (`/_sim` op "writes"), between the
domain's creation and every workload container seeing its channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import pytest
from kubernetes import client

from api import names
from sim.cluster import example
from sim.cluster.cluster import ClusterSpec, SimCluster
from sim.cluster.demo import create_objects, delete_objects, wait_clean, wait_ready
from sim.cluster.evidence import EvidenceChain

NODES, CLIQUES = 72, 4


def _deltas(before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]],
            user: str) -> dict[str, int]:
    a, b = before.get(user, {}), after.get(user, {})
    return {k: n - a.get(k, 0) for k, n in b.items() if n - a.get(k, 0)}


@pytest.mark.e2e
def test_72_nodes_join_with_two_clique_writes_each_and_every_index_settled(
        short_dir: Path) -> None:
    async def main() -> tuple[dict[str, dict[str, int]], list[dict], int]:
        cluster = SimCluster(ClusterSpec(root=short_dir, nodes=NODES, cliques=CLIQUES,
                                         in_process=True))
        try:
            await cluster.start()
            assert cluster.server is not None and cluster.admin is not None
            objects = example.builtin(None, NODES, name="scale")
            before = await asyncio.to_thread(cluster.server.op, "writes")
            await create_objects(cluster.admin, objects)
            chain = EvidenceChain(
                example.NAMESPACE, "scale", driver_namespace=cluster.namespace,
                host_managed=False,
                node_roots={n: node.host.root for n, node in cluster.nodes.items()})
            await wait_ready(cluster, [chain], timeout=600)
            after = await asyncio.to_thread(cluster.server.op, "writes")
            custom = client.CustomObjectsApi(cluster.admin)
            cliques = (await asyncio.to_thread(
                custom.list_namespaced_custom_object, names.GROUP, names.VERSION,
                cluster.namespace, names.PLURAL_CLIQUES))["items"]
            writes = {role: _deltas(before, after, f"system:serviceaccount:"
                                    f"{cluster.namespace}:{account}")
                      for role, account in cluster.accounts.items()}
            await delete_objects(cluster.admin, objects)
            assert await wait_clean(cluster, [chain.uid], [example.NAMESPACE], 120) == []
            return writes, cliques, len(cluster.nodes)
        finally:
            await cluster.stop()

    writes, cliques, nodes = asyncio.run(main())
    print(f"\n{nodes} nodes, driver writes by resource: {writes}")
    # No lost join: every clique full, each index once, every entry Ready, and the index
    # each entry holds is the one written (a contested append wrote it with its Ready).
    assert len(cliques) == CLIQUES
    for clique in cliques:
        daemons = clique["daemons"]
        assert sorted(d["index"] for d in daemons) == list(range(NODES // CLIQUES))
        assert {d["status"] for d in daemons} == {names.STATUS_READY}
    daemon = writes["daemon"]
    created = daemon.get("POST computedomaincliques", 0)
    # Per join: one label on the pod (the reference's consumers read it), one append (or
    # the create carrying it) and one Ready, however many joined at once. A create lost to
    # a peer is the only other clique write.
    assert daemon.get("PATCH pods") == NODES
    assert daemon.get("PATCH computedomaincliques", 0) + CLIQUES == 2 * NODES
    assert CLIQUES <= created <= CLIQUES + NODES // 8
    assert writes["agent"].get("PATCH nodes") == NODES  # the domain's node label
    # The controller's status: batched (controller/statuspacer.py), not one per join.
    assert writes["controller"].get("PUT computedomains/status", 0) <= NODES // 2
