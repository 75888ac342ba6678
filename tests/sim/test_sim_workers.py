"""The in-process nodes shared out over worker processes (`ClusterSpec(sim_workers=N)`).

The demo's own path (`run_demo`, what `compute-domain-sim demo --in-process --sim-workers
N` runs) on a small cluster whose nodes live in two worker processes: every workload sees
its channel, cleanup leaves nothing, and after stop the workers are gone with everything
they started. Bad worker counts are refused with a message that says what to give.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path

import psutil
import pytest

from sim.cli import main as sim_main
from sim.cluster.cluster import ClusterSpec, SimCluster
from sim.cluster.demo import DemoOptions, run_demo
from sim.cluster.leftovers import process_leftovers
from sim.cluster.nodeplan import blocks
from sim.cluster.nodeworkers import InWorkerError


def _workers_of_this_process() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "multiprocessing" in line and "spawn" in line:
            found.append(child)
    return found


@pytest.mark.e2e
def test_demo_on_two_sim_workers_is_ready_and_leaves_nothing(short_dir: Path) -> None:
    """8 nodes in 2 cliques, 4 in each worker: the builtin domain spans both cliques, so
    IMEX daemons of both workers must peer and every workload must see its channel."""
    seen: dict[str, object] = {}

    async def main() -> None:
        original = SimCluster.start

        async def start(cluster: SimCluster) -> None:
            await original(cluster)
            assert cluster.workers is not None
            seen["pids"] = list(cluster.workers.pids)
            seen["threads"] = await cluster.workers.ask("threads")
            # In-process objects of nodes in workers are out of reach, and say so.
            with pytest.raises(InWorkerError, match="sim_workers=1"):
                await cluster.restart_agent(next(iter(cluster.nodes)))
            with pytest.raises(InWorkerError, match="sim_workers=1"):
                _ = next(iter(cluster.nodes.values())).kubelet.workers

        SimCluster.start = start  # type: ignore[method-assign]
        try:
            seen["result"] = await run_demo(
                DemoOptions(nodes=8, cliques=2, in_process=True, sim_workers=2, root=short_dir,
                            timeout=240)
            )
        finally:
            SimCluster.start = original  # type: ignore[method-assign]

    asyncio.run(main())
    result = seen["result"]
    doc = result.to_dict()  # type: ignore[attr-defined]
    assert doc["ok"], doc["failedStep"]
    assert doc["cleanup"]["leftovers"] == []
    (chain,) = doc["computeDomains"]
    device = next(step for step in chain["steps"] if step["step"] == "device")
    assert chain["complete"] and device["ok"], chain
    # Every workload container saw its channel device node (the chain reads each one's
    # CDI view on its node while it runs; cleanup removed them since).
    assert device["count"] == "8/8", device
    # Each worker answered; the workers are gone after stop, and so is what they ran.
    assert len(seen["threads"]) == 2  # type: ignore[arg-type]
    for pid in seen["pids"]:  # type: ignore[attr-defined]
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert _workers_of_this_process() == []
    assert multiprocessing.active_children() == []
    assert process_leftovers(short_dir) == []


def test_sim_workers_must_be_a_positive_number(tmp_path: Path) -> None:
    for bad in (0, -2):
        with pytest.raises(ValueError, match="sim_workers must be at least 1"):
            ClusterSpec(root=tmp_path, in_process=True, sim_workers=bad).validate()
    with pytest.raises(ValueError, match="in_process"):
        ClusterSpec(root=tmp_path, sim_workers=2).validate()
    # More workers than nodes is fine: at most one per node is used, 1 means none.
    assert ClusterSpec(root=tmp_path, nodes=3, in_process=True, sim_workers=8).worker_count == 3
    assert ClusterSpec(root=tmp_path, nodes=3, in_process=True).worker_count == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--in-process", "--sim-workers", "0"], "0 must be at least 1"),
        (["--in-process", "--sim-workers", "-3"], "-3 must be at least 1"),
        (["--in-process", "--sim-workers", "two"], "invalid number 'two'"),
        (["--sim-workers", "2"], "add --in-process"),
    ],
)
def test_bad_sim_workers_flag_is_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = sim_main(["demo", *argv])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err


def test_nodes_are_dealt_in_contiguous_equal_blocks() -> None:
    assert blocks(8, 2) == [range(0, 4), range(4, 8)]
    assert blocks(144, 16)[0] == range(0, 9)
    assert [len(b) for b in blocks(10, 3)] == [3, 3, 4]
    assert blocks(2, 5) == [range(0, 1), range(1, 2)]  # at most one worker per node


def test_pod_informer_lists_watches_and_resumes_on_the_loop() -> None:
    """The kubelet's pod watch as a task (what worker nodes use): it lists the node's pods,
    follows changes and deletions of its node's pods only, survives a server restart
    (re-lists), and starts no thread."""
    from kubernetes import client

    from sim.apiserver.runner import ServerThread
    from sim.cluster.podwatch import PodInformer
    from sim.cluster.podworker import pod_key

    server = ServerThread().start()
    api = server.api_client()
    core = client.CoreV1Api(api)

    def pod(name: str, node: str) -> dict[str, object]:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}

    async def main() -> None:
        seen: list[str] = []
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(core.create_namespaced_pod, "default", pod("before", "n1"))
        informer = PodInformer(loop, api, pod_key, "test-pods", "spec.nodeName=n1",
                               on_change=lambda o: seen.append(o["metadata"]["name"]))
        import threading

        threads = threading.active_count()
        informer.start()
        try:
            assert await informer.wait_for(lambda: "default/before" in informer.items, 10)
            assert threading.active_count() == threads
            await asyncio.to_thread(core.create_namespaced_pod, "default", pod("other", "n2"))
            await asyncio.to_thread(core.create_namespaced_pod, "default", pod("after", "n1"))
            assert await informer.wait_for(lambda: "default/after" in informer.items, 10)
            await asyncio.to_thread(core.delete_namespaced_pod, "before", "default",
                                    grace_period_seconds=0)
            assert await informer.wait_for(lambda: "default/before" not in informer.items, 10)
            await asyncio.to_thread(server.restart)
            await asyncio.to_thread(core.create_namespaced_pod, "default", pod("later", "n1"))
            assert await informer.wait_for(lambda: "default/later" in informer.items, 20)
            assert "other" not in seen
            assert set(informer.items) == {"default/after", "default/later"}
        finally:
            informer.stop()
            await informer.wait_stopped()

    try:
        asyncio.run(main())
    finally:
        api.close()
        server.close()
