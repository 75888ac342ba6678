"""A 20-node ComputeDomain brought up through a flaky API server: watches dropped every few
seconds, history compacted (so resumed watches get 410 Gone), 5 % of requests answered
429 or 500. Everyone (controller, agents, daemons, and the simulated cluster's own actors)
sees the same faults; the domain must still converge, with no object created twice."""

from __future__ import annotations

import asyncio
import collections
import contextlib

from scenario_env import delete_until_clean, ready, run_scenario, snapshot

from api import names
from sim.cluster.cluster import SimCluster
from sim.cluster.demo import create_objects
from sim.cluster.example import NAMESPACE, builtin

NODES = 20


async def chaos(cluster: SimCluster, stop: asyncio.Event) -> dict[str, int]:
    """Toggle 429/500 at 5 %, drop every watch every 2 s, compact every 5 s."""
    assert cluster.server is not None
    thread, server = cluster.server, cluster.server.server
    done = collections.Counter()

    def faults(code: int, rate: float) -> None:
        server.faults.error_rate, server.faults.error_code = rate, code

    tick = 0
    while not stop.is_set():
        thread.call(lambda code=(429, 500)[tick % 2]: faults(code, 0.05))
        if tick % 4 == 0:
            done["watches closed"] += thread.call(server.store.close_watches)
        if tick % 10 == 0:
            thread.call(server.store.compact)
            done["compactions"] += 1
        tick += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    thread.call(lambda: faults(500, 0.0))
    return dict(done)


def test_twenty_node_bring_up_converges_through_api_faults(short_dir, control_plane):
    async def body(cluster: SimCluster) -> None:
        objects = builtin(None, NODES, name="flaky")
        await create_objects(cluster.admin, objects)  # the user's apply, before the storm
        stop = asyncio.Event()
        chaos_task = asyncio.create_task(chaos(cluster, stop))
        try:
            observed = await ready(cluster, "flaky", timeout=240)
        finally:
            stop.set()
            done = await chaos_task
        assert done["watches closed"] > 0 and done["compactions"] >= 1, done
        errors = cluster.server.call(lambda: dict(cluster.server.server.stats.requests))
        assert sum(errors.values()) > 0
        uid = observed.uid

        # Exactly one of everything: no duplicate from a retried create.
        snap = await snapshot(cluster)
        templates = [t for t in snap.templates if _cd(t) == uid]
        assert sorted(t["metadata"]["labels"][names.LABEL_TARGET] for t in templates) == [
            names.TARGET_DAEMON,
            names.TARGET_WORKLOAD,
        ]
        daemons = [p for p in snap.pods if _cd(p) == uid]
        assert sorted(p["spec"]["nodeName"] for p in daemons) == sorted(cluster.nodes)
        workload_claims = [c for c in snap.claims if c["metadata"]["namespace"] == NAMESPACE]
        assert len(workload_claims) == NODES
        daemon_claims = [c for c in snap.claims if c["metadata"]["namespace"] == cluster.namespace]
        assert len(daemon_claims) == NODES
        cliques = [c for c in snap.cliques if c["metadata"]["name"].startswith(uid)]
        assert len(cliques) == 2
        entries = [d for c in cliques for d in c["daemons"]]
        assert sorted(d["nodeName"] for d in entries) == sorted(cluster.nodes)
        for clique in cliques:  # indices unique within each clique
            assert sorted(d["index"] for d in clique["daemons"]) == list(range(NODES // 2))
        assert all(d["status"] == names.STATUS_READY for d in entries)
        from kubernetes import client

        from api.kube import call

        slices = await call(client.ResourceV1Api(cluster.admin).list_resource_slice)
        pools = collections.Counter(s.spec.pool.name for s in slices.items)
        assert pools == dict.fromkeys(cluster.nodes, 1), pools

        await delete_until_clean(cluster, objects, [uid], timeout=120)

    # Two racks' worth of cliques: one IMEX domain holds at most 18 nodes.
    run_scenario(
        short_dir, body, control_plane=control_plane, nodes=NODES, cliques=2, in_process=True
    )


def _cd(obj: dict) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(names.LABEL_COMPUTE_DOMAIN)
