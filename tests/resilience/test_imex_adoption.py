"""Agent placement: the node agent supervises nvidia-imex, and kill -9 of the agent never
disturbs the running domain.

The simulated cluster runs the shipped agent-placement manifests in process mode: the
kubelet plugin container's first process is `compute-domain-agent keep plugin`, the agent
its child, nvidia-imex (the fake) the agent's child in a session of its own. The agent is
SIGKILLed 20 times while a two-node domain is up (each time once the liveness probe has
passed again, as it would between crashes on a cluster); each next agent must adopt the
running nvidia-imex (pid, start time and command line recorded next to the domain), so its pid
never changes, the clique entries never leave Ready (watched, every write seen), the
workloads keep running with their channel, and the container itself is never restarted.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest
from scenario_env import (
    apply_until_ready,
    channel_devices,
    delete_until_clean,
    eventually,
    pods_of,
    run_scenario,
    snapshot,
)

from api import names
from runtime.informer import Informer
from sim.cluster.cluster import SimCluster
from sim.cluster.example import NAMESPACE, builtin
from sim.cluster.node import clique_id

KILLS = 20
ADOPTED = "Adopted running nvidia-imex pid"
READY_LINE = "compute-domain kubelet plugin ready on node"


def _is_imex(proc: psutil.Process) -> bool:
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    return bool(cmdline) and Path(cmdline[0]).name == names.IMEX_BINARY


def _agent(keeper: psutil.Process) -> psutil.Process:
    [agent] = [p for p in keeper.children() if not _is_imex(p)]
    return agent


def _imex_pids(keeper: psutil.Process) -> list[int]:
    return sorted(p.pid for p in keeper.children(recursive=True) if _is_imex(p))


def _state(pid: int) -> str:
    try:
        return f"is {psutil.Process(pid).status()}"
    except psutil.Error:
        return "is gone"


def _imex_log(node: Any, uid: str) -> str:
    path = node.host.plugin_dir / "domains" / uid / "nvidia-imex.log"
    try:
        return path.read_text(errors="replace")
    except OSError as err:
        return f"({err})"


def _diagnosis(log: str, imex: int, node: Any, uid: str) -> str:
    """What a timeout reports: how far the new agent got, its last words, and what became
    of the first nvidia-imex."""
    mine = [x for x in log.splitlines() if f"pid {imex} " in x or "keeper:" in x]
    return (f"the log ends:\n{log[-2000:]}\nnvidia-imex pid {imex} {_state(imex)}; "
            f"lines about it and the keeper: {mine}; its log ends:\n"
            f"{_imex_log(node, uid)[-5000:]}")


class EntryWatch:
    """Every state the watched cliques' entries were seen in (a watch, not samples)."""

    def __init__(self, cluster: SimCluster, uid: str) -> None:
        from kubernetes import client

        custom = client.CustomObjectsApi(cluster.admin)
        self.seen: list[tuple[str, str, Any]] = []  # (node, status, index)

        def record(obj: dict[str, Any] | None) -> None:
            for d in (obj or {}).get("daemons") or ():
                self.seen.append((d.get("nodeName"), d.get("status"), d.get("index")))

        self.informer = Informer(
            asyncio.get_running_loop(), custom.list_namespaced_custom_object,
            lambda o: o["metadata"]["name"], "test-cliques",
            {"group": names.GROUP, "version": names.VERSION, "namespace": cluster.namespace,
             "plural": names.PLURAL_CLIQUES,
             "label_selector": f"{names.LABEL_COMPUTE_DOMAIN}={uid}"},
            on_change=record)


@pytest.mark.e2e
def test_kill_9_of_the_agent_20_times_leaves_nvidia_imex_and_the_workloads_alone(short_dir):
    async def body(cluster: SimCluster) -> None:
        objects = builtin(clique_id(1), 2, name="warm")
        observed = await apply_until_ready(cluster, objects)
        uid = observed.uid
        node = cluster.nodes["node-01"]
        assert node.agent.pid is not None
        keeper = psutil.Process(node.agent.pid)
        assert keeper.cmdline()[-2:] == ["keep", "plugin"], keeper.cmdline()
        [imex] = _imex_pids(keeper)
        starts = node.agent.starts
        snap = await snapshot(cluster)
        workers = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(snap, NAMESPACE)}
        assert len(workers) == 2
        # No daemon pods, daemon claims or per-domain DaemonSets in agent placement.
        assert pods_of(snap, cluster.namespace, uid) == []
        assert [c for c in snap.claims if c["metadata"]["namespace"] == cluster.namespace] == []

        watch = EntryWatch(cluster, uid)
        watch.informer.start()
        await watch.informer.synced.wait()
        try:
            for kill in range(1, KILLS + 1):
                agent = _agent(keeper)
                os.kill(agent.pid, signal.SIGKILL)

                async def adopted(n: int = kill, old: int = agent.pid) -> bool:
                    log = node.agent.log_text()
                    assert log.count(ADOPTED) >= n and log.count(READY_LINE) >= n + 1, (
                        f"{log.count(ADOPTED)} adoptions, {log.count(READY_LINE)} ready "
                        f"lines; {_diagnosis(log, imex, node, uid)}")
                    return _agent(keeper).pid != old

                await eventually(adopted, f"agent {kill} adopted nvidia-imex and is ready")
                assert _imex_pids(keeper) == [imex], f"after kill {kill}"
                # Kill again only once the kubelet's liveness probe has passed since: the
                # sim probes every second (a cluster every 10 s), and 30 s of misses in a
                # row would restart the container, which ends nvidia-imex by design.
                container = node.agent.container()
                assert container is not None
                passed = container.probe_passes.get("liveness", 0)

                async def probed(c: Any = container, n: int = passed) -> bool:
                    return c.probe_passes.get("liveness", 0) > n

                await eventually(probed, f"a liveness probe passed after kill {kill}")
            # Every write the cliques saw kept both entries Ready at their indices.
            first = {n: i for n, _, i in watch.seen[:2]}
            assert watch.seen and {s for _, s, _ in watch.seen} == {names.STATUS_READY}
            assert all(first[n] == i for n, _, i in watch.seen), watch.seen
        finally:
            watch.informer.stop()
        assert node.agent.starts == starts  # the keeper kept the container up
        snap = await snapshot(cluster)
        after = {p["metadata"]["name"]: p for p in pods_of(snap, NAMESPACE)}
        assert {n: p["metadata"]["uid"] for n, p in after.items()} == workers
        for name, pod in after.items():
            assert pod["status"]["phase"] == "Running"
            [status] = pod["status"]["containerStatuses"]
            assert status["restartCount"] == 0, name
            where = pod["spec"]["nodeName"]
            view = json.loads((cluster.nodes[where].host.pods_dir / f"{NAMESPACE}_{name}"
                               / "worker.json").read_text())
            assert channel_devices(view) == ["/dev/nvidia-caps-imex-channels/channel0"]
        # The domain's end still stops this nvidia-imex (the cleanup checks no process is
        # left behind).
        await delete_until_clean(cluster, objects, [uid])
        assert not psutil.pid_exists(imex) or psutil.Process(imex).status() == "zombie"

    run_scenario(short_dir, body, nodes=2, cliques=1, imex_placement="agent",
                 agent_env={"KEEPER_RESTART_DELAY": "0.1", "KEEPER_MAX_RESTART_DELAY": "0.1"})
