"""The simulated cluster's in-process scale mode (`ClusterSpec(in_process=True)`).

Agents, daemon containers and fake `nvidia-imex` daemons run as tasks of the test process;
the driver code is the same, only the process boundary is replaced (`sim.cluster.inprocess`).
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil
import pytest
from eventually import eventually_async

from agent.daemon.process import ImexProcess
from agent.daemon.readiness import READY, query_state
from api import names
from sim.cluster import example
from sim.cluster.cluster import ClusterSpec, SimCluster
from sim.cluster.demo import create_objects, delete_objects, wait_clean, wait_ready
from sim.cluster.evidence import EvidenceChain
from sim.cluster.inprocess_imex import InProcessCtl, InProcessImexLauncher
from sim.cluster.leftovers import process_leftovers

CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"
DRIVER_PROGRAMS = ("compute-domain-agent", "nvidia-imex", "nvidia-imex-ctl")


def _driver_children() -> list[str]:
    """Processes of the driver (agent, daemon, IMEX) started by this test process."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            line = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if any(p in line for p in DRIVER_PROGRAMS):
            found.append(line[:120])
    return found


def _chain(cluster: SimCluster, name: str) -> EvidenceChain:
    return EvidenceChain(
        example.NAMESPACE,
        name,
        driver_namespace=cluster.namespace,
        host_managed=cluster.host_managed,
        node_roots={n: node.host.root for n, node in cluster.nodes.items()},
    )


async def _pod_node(cluster: SimCluster, pod: str) -> str:
    from kubernetes import client

    from runtime.kubecall import call

    assert cluster.admin is not None
    obj = await call(client.CoreV1Api(cluster.admin).read_namespaced_pod, pod, example.NAMESPACE)
    return str(obj.spec.node_name)


def test_in_process_cluster_runs_the_example_to_ready_and_cleans_up(
    short_dir: Path, control_plane: str
) -> None:
    async def main() -> None:
        cluster = SimCluster(
            ClusterSpec(
                root=short_dir, nodes=4, cliques=2, in_process=True, control_plane=control_plane
            )
        )
        try:
            await cluster.start()
            # Of the driver, only the controller is a process; agents run in this one.
            upstream = cluster.control_plane.processes()
            assert [p.name for p in cluster.processes() if p not in upstream] == ["controller"]
            # Each plugin pod's init container ran here too, on the node's driver root.
            inits = [p.read_text() for n in cluster.nodes.values()
                     for p in n.host.pods_dir.glob(f"{cluster.namespace}_*/init-container*.log")]
            assert len(inits) == len(cluster.nodes), inits
            assert all("NVIDIA driver found under" in t for t in inits), inits
            first = [n for n in cluster.nodes.values() if n.host.clique == 1]
            objects = example.builtin(first[0].host.clique_id, len(first))
            await create_objects(cluster.admin, objects)  # type: ignore[arg-type]
            chain = _chain(cluster, example.CD_NAME)
            await wait_ready(cluster, [chain], timeout=90)
            assert chain.complete

            workers = [o["metadata"]["name"] for o in objects if o["kind"] == "Pod"]
            for pod in workers:
                node = cluster.nodes[await _pod_node(cluster, pod)]
                view = json.loads(
                    (node.host.pods_dir / f"{example.NAMESPACE}_{pod}" / "worker.json").read_text()
                )
                assert CHANNEL0 in [d["path"] for d in view["deviceNodes"]], (pod, view)

            # The daemons ran the real supervisor around an in-process fake IMEX: its output
            # reached the container log through the supervisor's forwarder.
            logs = [
                p.read_text()
                for n in first
                for p in n.host.pods_dir.glob(f"{cluster.namespace}_computedomain-daemon-*/*.log")
            ]
            assert len(logs) == len(first)
            for text in logs:
                assert "nvidia-imex[" in text and "IMEX daemon is ready (READY)" in text
            # No agent, daemon or IMEX process exists (nothing but the controller). Not
            # process_leftovers here: the workload containers are processes of this cluster,
            # and one may still be between fork and exec; it runs after the stop below.
            assert _driver_children() == []

            await delete_objects(cluster.admin, objects)  # type: ignore[arg-type]
            left = await wait_clean(cluster, [chain.uid], [example.NAMESPACE], 60)
            assert left == []
            assert cluster.in_process is not None
            assert cluster.in_process.launcher.children == {}
            assert cluster.in_process.executor.containers == set()
        finally:
            await cluster.stop()

    asyncio.run(main())
    assert process_leftovers(short_dir) == []


@pytest.mark.e2e
def test_in_process_scale_smoke_36_nodes(short_dir: Path) -> None:
    """Two full cliques (36 nodes) in one process; the example domain spans clique 1."""

    async def main() -> tuple[float, float]:
        cluster = SimCluster(ClusterSpec(root=short_dir, nodes=36, cliques=2, in_process=True))
        try:
            t0 = time.monotonic()
            await cluster.start()
            started = time.monotonic() - t0
            first = [n for n in cluster.nodes.values() if n.host.clique == 1]
            assert len(first) == names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
            objects = example.builtin(first[0].host.clique_id, len(first))
            await create_objects(cluster.admin, objects)  # type: ignore[arg-type]
            chain = _chain(cluster, example.CD_NAME)
            ready = await wait_ready(cluster, [chain], timeout=90)
            await delete_objects(cluster.admin, objects)  # type: ignore[arg-type]
            assert await wait_clean(cluster, [chain.uid], [example.NAMESPACE], 60) == []
            return started, ready
        finally:
            await cluster.stop()

    # How long it takes is measured by `make bench` (tests/bench/bench_bringup.py), not
    # asserted here: the waits above bound a hang, and the figures are printed.
    t0 = time.monotonic()
    started, ready = asyncio.run(main())
    print(f"36 nodes: {time.monotonic() - t0:.1f}s (start {started:.1f}s, ready {ready:.1f}s)")


# --- the hooks on their own ----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def _imex_config(root: Path, address: str, hosts: Path) -> tuple[Path, dict[str, str]]:
    nodes = root / "nodes.cfg"
    nodes.write_text(f"{address}\n")
    config = root / "imex.cfg"
    config.write_text(
        f"LOG_LEVEL=4\nLOG_FILE_NAME=\nDAEMONIZE=0\nBIND_INTERFACE_IP={address}\n"
        f"SERVER_PORT={_free_port()}\nIMEX_NODE_CONFIG_FILE={nodes}\n"
        "IMEX_WAIT_FOR_QUORUM=RECOVERY\nIMEX_CMD_ENABLED=1\n"
        f"IMEX_CMD_BIND_INTERFACE_IP={address}\nIMEX_CMD_PORT={_free_port()}\n"
    )
    hosts.write_text("127.0.0.1\tlocalhost\n")
    env = {"FAKE_IMEX_HOSTS_FILE": str(hosts), "FAKE_IMEX_HEARTBEAT": "0.1"}
    return config, env


async def _until(predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0) -> None:
    await eventually_async(predicate, timeout=timeout, interval=0.05)


def test_in_process_imex_is_supervised_like_a_process(tmp_path: Path) -> None:
    """ImexProcess drives an in-process fake IMEX through the launcher hook: start,
    readiness through the ctl hook, SIGUSR1, crash and backoff restart, stop, strays."""
    address = "127.0.1.250"
    config, env = _imex_config(tmp_path, address, tmp_path / "hosts")

    async def main() -> None:
        launcher, ctl = InProcessImexLauncher(), InProcessCtl()

        async def ready() -> bool:
            return await query_state("nvidia-imex-ctl", str(config), runner=ctl) == READY

        imex = ImexProcess(
            ["nvidia-imex", "-c", str(config)],
            env=env,
            launcher=launcher,
            grace=2.0,
            backoff_base=0.1,
        )
        assert await imex.ensure_started()
        await _until(ready)
        pid = imex.pid
        assert pid is not None and not psutil.pid_exists(pid)  # synthetic: no such process
        assert await imex.signal_reload()
        child = launcher.children[pid]
        assert child.daemon is not None
        daemon = child.daemon
        await _until(lambda: daemon.reload_count == 1)

        # A scripted crash (os._exit in the process) ends it with its code; restarted.
        daemon.exit_now(7)
        await _until(lambda: imex.last_exit == 7 and imex.running and imex.pid != pid)
        await _until(ready)

        # A later supervisor finds the running one as a stray on its address and ends it;
        # not on other ports or addresses.
        second = imex.pid
        none = await launcher.kill_stray("nvidia-imex", ports=[1], addresses=[address])
        assert none == []
        none = await launcher.kill_stray(
            "nvidia-imex", ports=[daemon.server_port], addresses=["127.0.1.249"]
        )
        assert none == []
        ended = await launcher.kill_stray(
            "nvidia-imex", ports=[daemon.server_port], addresses=[address]
        )
        assert ended == [second]

        await imex.stop()
        assert not imex.running
        await launcher.stop_all()
        assert launcher.children == {}
        code, _, err = await ctl(["nvidia-imex-ctl", "-c", str(config), "-q"], 5)
        assert code == 1 and "cannot connect" in err

    asyncio.run(main())


def test_in_process_imex_sigterm_and_sigkill(tmp_path: Path) -> None:
    address = "127.0.1.251"
    config, env = _imex_config(tmp_path, address, tmp_path / "hosts")

    async def main() -> None:
        launcher, ctl = InProcessImexLauncher(), InProcessCtl()

        async def ready() -> bool:
            return await query_state("nvidia-imex-ctl", str(config), runner=ctl) == READY

        child = await launcher.spawn(["nvidia-imex", "-c", str(config)], env, 1 << 16)
        await _until(ready)
        child.send_signal(signal.SIGTERM)
        assert await child.wait() == 0
        with pytest.raises(ProcessLookupError):
            child.send_signal(signal.SIGUSR1)
        child = await launcher.spawn(["nvidia-imex", "-c", str(config)], env, 1 << 16)
        await _until(ready)
        child.kill_group()
        assert await child.wait() == -signal.SIGKILL
        # A config it cannot use: exit 1 at once, the reason on its output.
        bad = await launcher.spawn(["nvidia-imex", "-c", str(tmp_path / "none")], env, 1 << 16)
        assert await bad.wait() == 1
        assert bad.stdout is not None and b"FATAL" in await bad.stdout.read()

    asyncio.run(main())
