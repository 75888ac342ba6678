"""The simulated cluster's knobs for breaking the driver on purpose: an agent taken away
(and kubelet wiping its node's ResourceSlices after the delay, as the real kubelet does),
brought back, and the driver's environment overridden through `ClusterSpec`."""

from __future__ import annotations

import asyncio

import pytest
from eventually import eventually_async
from scenario_env import (
    clique_entries,
    daemon_logs,
    eventually,
    node_slices,
    pods_of,
    run_scenario,
    snapshot,
)

from api import names
from sim.cluster.cluster import SimCluster
from sim.cluster.demo import create_objects
from sim.cluster.example import builtin
from sim.cluster.kubelet import WIPE_SLICES_AFTER
from sim.cluster.node import clique_id


async def _slice_uid(cluster: SimCluster, node: str) -> str:
    [one] = await eventually(lambda: node_slices(cluster, node), f"the slice of {node}", 20)
    return str(one["metadata"]["uid"])


@pytest.mark.parametrize("in_process", [False, True], ids=["processes", "in-process"])
def test_stopped_agent_loses_its_slice_after_the_delay_and_gets_it_back(
    short_dir, in_process, control_plane
):
    """kubelet wipes a deregistered driver's slices of its node only; the agent republishes
    its slice when it starts again."""

    async def body(cluster: SimCluster) -> None:
        other = await _slice_uid(cluster, "node-02")
        await cluster.stop_agent("node-01")
        assert not cluster.nodes["node-01"].agent.running

        async def gone() -> bool:
            # The kubelet records a wipe once its DELETE call has returned, which can be
            # after the API server already lists the slice gone.
            return (await node_slices(cluster, "node-01") == []
                    and bool(cluster.nodes["node-01"].kubelet.wiped_slices))

        await eventually(gone, "node-01's slice wiped by its kubelet", timeout=10)
        assert await _slice_uid(cluster, "node-02") == other
        assert cluster.nodes["node-02"].kubelet.wiped_slices == []

        await cluster.start_agent("node-01")
        await _slice_uid(cluster, "node-01")
        await cluster.wait_ready()

    run_scenario(
        short_dir,
        body,
        control_plane=control_plane,
        nodes=2,
        cliques=1,
        slice_wipe_delay=1.0,
        in_process=in_process,
    )


def test_restarted_agent_keeps_its_slice_with_the_default_delay(short_dir, control_plane):
    """A killed or gracefully restarted agent re-registers well within kubelet's delay: the
    very same slice (uid) stays throughout, nothing is wiped."""

    async def body(cluster: SimCluster) -> None:
        assert cluster.spec.slice_wipe_delay == WIPE_SLICES_AFTER
        uid = await _slice_uid(cluster, "node-01")
        seen: set[str] = set()
        samples = 0
        done = asyncio.Event()

        async def watch() -> None:
            nonlocal samples
            while not done.is_set():
                slices = await node_slices(cluster, "node-01")
                seen.update([s["metadata"]["uid"] for s in slices] or ["none"])
                samples += 1
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        for kill in (True, False):
            await cluster.restart_agent("node-01", kill=kill)
            await cluster.wait_ready()
        # The restarted agent settles its slice: twenty more looks at it, as many as a
        # second's worth on an idle machine and never fewer on a loaded one.
        target = samples + 20
        await eventually_async(lambda: samples >= target, "twenty more samples")
        done.set()
        await watcher
        assert seen == {uid}
        assert cluster.nodes["node-01"].kubelet.wiped_slices == []

    run_scenario(short_dir, body, control_plane=control_plane, nodes=1, cliques=1)


def test_reregistering_within_the_delay_calls_off_the_wipe(short_dir, control_plane):
    """A graceful restart deregisters the agent for a moment; registering again before the
    delay is over means the slice is never wiped, even after the delay has passed."""

    async def body(cluster: SimCluster) -> None:
        uid = await _slice_uid(cluster, "node-01")
        kubelet = cluster.nodes["node-01"].kubelet
        await cluster.stop_agent("node-01")  # returns once deregistered: the wipe is due
        wipe = kubelet._wipes[names.DRIVER_NAME]
        await cluster.start_agent("node-01")
        # Registering again cancels the pending wipe: it can never run, and none is due.
        await eventually_async(wipe.done, "the wipe called off")
        assert wipe.cancelled() and names.DRIVER_NAME not in kubelet._wipes
        assert await _slice_uid(cluster, "node-01") == uid
        assert kubelet.wiped_slices == []

    # Well above an agent's restart (a new container: Python start, cache sync and
    # registration take about 3 s on an idle 2-core machine, more under load); kubelet's
    # own default is 30 s.
    delay = 10.0
    run_scenario(
        short_dir, body, control_plane=control_plane, nodes=1, cliques=1, slice_wipe_delay=delay
    )


def test_controller_env_limits_nodes_per_imex_domain(short_dir, control_plane):
    """MAX_NODES_PER_IMEX_DOMAIN=1 over the manifests' controller env reaches the daemon
    pods: of two daemons in one clique only one gets an entry, the other reports the clique
    full."""

    async def body(cluster: SimCluster) -> None:
        objects = builtin(clique_id(1), 2, name="full")
        await create_objects(cluster.admin, objects)

        async def one_in_one_full() -> bool:
            snap = await snapshot(cluster)
            cds = [c for c in snap.cds if c["metadata"]["name"] == "full"]
            if not cds:
                return False
            entries = clique_entries(snap, cds[0]["metadata"]["uid"])
            full = [n for n in cluster.nodes if "is full" in daemon_logs(cluster, n)]
            return sum(map(len, entries.values())) == 1 and len(full) == 1

        await eventually(one_in_one_full, "one clique entry and one daemon finding it full", 30)
        snap = await snapshot(cluster)
        uid = next(c["metadata"]["uid"] for c in snap.cds if c["metadata"]["name"] == "full")
        daemons = pods_of(snap, cluster.namespace, uid)
        assert daemons
        for pod in daemons:
            env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", ())}
            assert env[names.ENV_MAX_NODES_PER_IMEX_DOMAIN] == "1"

    run_scenario(
        short_dir,
        body,
        control_plane=control_plane,
        nodes=2,
        cliques=1,
        controller_env={names.ENV_MAX_NODES_PER_IMEX_DOMAIN: "1"},
    )
