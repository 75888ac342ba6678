"""A 20-node ComputeDomain brought up through a flaky API server; the domain must still
converge, with no object created twice.

On the emulator: watches dropped every few seconds, history compacted (so resumed watches
get 410 Gone), 5 % of requests answered 429 or 500; everyone (controller, agents, daemons,
and the simulated cluster's own actors) sees the same faults.

On the upstream control plane, the real mechanisms: kube-apiserver killed with SIGKILL and
restarted every few seconds (every connection and watch breaks, requests are refused while
it is down, its watch cache starts over so resumed watches get 410), etcd compacted after
each restart, and API priority and fairness squeezing the driver's ServiceAccounts into a
priority level of one share that rejects what it cannot seat (429 with Retry-After)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any

import pytest
from kubernetes import client
from scenario_env import delete_until_clean, ready, run_scenario, snapshot

from api import names
from runtime.kubecall import call
from sim.cluster.cluster import SimCluster
from sim.cluster.demo import create_objects
from sim.cluster.example import NAMESPACE, builtin
from sim.controlplane import KUBERNETES
from sim.controlplane.upstream import KubernetesControlPlane

NODES = 20


THROTTLE = "sim-throttle-driver"


async def throttle_driver(cluster: SimCluster) -> None:
    """A priority level with one concurrency share that rejects at once, for every request
    of the driver's ServiceAccounts (matched before the default schemas)."""
    flow = client.FlowcontrolApiserverV1Api(cluster.admin)
    await call(flow.create_priority_level_configuration, {
        "metadata": {"name": THROTTLE},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 1, "lendablePercent": 0,
            "limitResponse": {"type": "Reject"}}},
    })  # fmt: skip
    rule = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"],
            "clusterScope": True}  # fmt: skip
    group = f"system:serviceaccounts:{cluster.namespace}"
    await call(flow.create_flow_schema, {
        "metadata": {"name": THROTTLE},
        "spec": {"priorityLevelConfiguration": {"name": THROTTLE}, "matchingPrecedence": 500,
                 "distinguisherMethod": {"type": "ByUser"},
                 "rules": [{"subjects": [{"kind": "Group", "group": {"name": group}}],
                            "resourceRules": [rule]}]},
    })  # fmt: skip


async def upstream_chaos(cluster: SimCluster, stop: asyncio.Event) -> dict[str, int]:
    """kill -9 and restart kube-apiserver every 6 s, compacting etcd after each restart."""
    plane = cluster.control_plane
    assert isinstance(plane, KubernetesControlPlane)
    done = collections.Counter()
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 6)
        if stop.is_set():
            break
        await plane.restart_apiserver(kill=True)
        done["apiserver restarts"] += 1
        await plane.compact_etcd()
        done["compactions"] += 1
    return dict(done)


async def chaos(cluster: SimCluster, stop: asyncio.Event) -> dict[str, int]:
    """Toggle 429/500 at 5 %, drop every watch every 2 s, compact every 5 s."""
    if cluster.spec.control_plane == KUBERNETES:
        return await upstream_chaos(cluster, stop)
    server = cluster.server
    assert server is not None
    done = collections.Counter()

    async def op(name: str, **args: object) -> Any:
        return await asyncio.to_thread(server.op, name, **args)

    tick = 0
    while not stop.is_set():
        await op("faults", code=(429, 500)[tick % 2], rate=0.05)
        if tick % 4 == 0:
            done["watches closed"] += await op("close_watches")
        if tick % 10 == 0:
            await op("compact")
            done["compactions"] += 1
        tick += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    await op("faults", code=500, rate=0.0)
    return dict(done)


@pytest.mark.e2e
def test_twenty_node_bring_up_converges_through_api_faults(short_dir, control_plane):
    async def body(cluster: SimCluster) -> None:
        objects = builtin(None, NODES, name="flaky")
        upstream = cluster.spec.control_plane == KUBERNETES
        if upstream:
            await throttle_driver(cluster)
        await create_objects(cluster.admin, objects)  # the user's apply, before the storm
        stop = asyncio.Event()
        chaos_task = asyncio.create_task(chaos(cluster, stop))
        try:
            observed = await ready(cluster, "flaky", timeout=240)
        finally:
            stop.set()
            done = await chaos_task
        if upstream:
            assert done["apiserver restarts"] >= 2 and done["compactions"] >= 2, done
            rejected = _driver_answers(cluster, 429)
            print(f"faults: {done}; 429s from priority and fairness: {rejected}")
        else:
            assert done["watches closed"] > 0 and done["compactions"] >= 1, done
            assert cluster.server is not None
            errors = cluster.server.op("requests")
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
        slices = await call(client.ResourceV1Api(cluster.admin).list_resource_slice)
        pools = collections.Counter(s.spec.pool.name for s in slices.items)
        assert pools == dict.fromkeys(cluster.nodes, 1), pools

        await delete_until_clean(cluster, objects, [uid], timeout=120)

    # Two racks' worth of cliques: one IMEX domain holds at most 18 nodes.
    run_scenario(
        short_dir, body, control_plane=control_plane, nodes=NODES, cliques=2, in_process=True
    )


def _driver_answers(cluster: SimCluster, code: int) -> int:
    """How many requests of the driver's ServiceAccounts kube-apiserver answered `code`."""
    plane = cluster.control_plane
    assert isinstance(plane, KubernetesControlPlane)
    prefix = f"system:serviceaccount:{cluster.namespace}:"
    return sum(n for (user, got), n in plane.answers().items() if got == code
               and user.startswith(prefix))


def _cd(obj: dict) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(names.LABEL_COMPUTE_DOMAIN)
