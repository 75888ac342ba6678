"""The agent as a real process: fatal start-up errors, crash recovery, health and metrics."""

from __future__ import annotations

import asyncio
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from eventually import eventually_async
from grpc_health.v1 import health_pb2, health_pb2_grpc
from plugin_env import (
    DRIVER_NS,
    NODE,
    AgentProcess,
    AgentThread,
    Kubelet,
    NodeEnv,
)

from agent.checkpoint import CheckpointStore
from api import names

AGENT = Path(sys.executable).parent / "compute-domain-agent"


def run_agent(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [AGENT, "plugin", *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_fatal_start_up_errors_are_one_line_that_says_what_to_fix(
    apiserver, cluster, short_dir, tmp_path
):
    node = NodeEnv(short_dir / "n")
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kc")
    (node.root / "proc-devices").write_text("Character devices:\n195 nvidia\n\nBlock devices:\n")
    out = run_agent(node.args(kubeconfig))
    assert out.returncode == 1
    assert 'no "nvidia-caps-imex-channels" character device' in out.stderr
    out = run_agent([*node.args(kubeconfig), "--feature-gates", "Bogus=true"])
    assert out.returncode == 1 and "unrecognized feature gate 'Bogus'" in out.stderr
    out = run_agent([*node.args(kubeconfig), "--imex-mode", "hostManaged"])
    assert out.returncode == 1
    assert 'imex.mode="hostManaged" requires the HostManagedIMEXDaemon feature gate' in out.stderr
    out = run_agent([a for a in node.args(kubeconfig) if a not in ("--node-name", NODE)])
    assert out.returncode == 2 and "--node-name" in out.stderr
    out = run_agent(node.args(kubeconfig), env={"PREPARE_TIMEOUT": "soon", "PATH": "/usr/bin"})
    assert out.returncode != 0 and "PREPARE_TIMEOUT" in out.stderr


def test_health_and_metrics_endpoints(apiserver, cluster, short_dir, tmp_path):
    node = NodeEnv(
        short_dir / "n", extra_args=["--healthcheck-port", "0", "--http-endpoint", "127.0.0.1:0"]
    )
    agent = AgentThread(node.config(apiserver.write_kubeconfig(tmp_path / "kc")))
    try:
        port = agent.app.health.port
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service in ("", "liveness"):
                resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                assert resp.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as err:
                stub.Check(health_pb2.HealthCheckRequest(service="other"), timeout=10)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
        cd = cluster.compute_domain("cd1")
        claim = cluster.daemon_claim("d", cd["metadata"]["uid"])
        Kubelet(node).prepare([claim])
        url = f"http://127.0.0.1:{agent.app.metrics_server.port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert (
            'nvidia_dra_requests_total{driver="compute-domain.nvidia.com",operation="prepare"} 1.0'
        ) in text
        assert (
            'nvidia_dra_prepared_devices{device_type="daemon",'
            'driver="compute-domain.nvidia.com",node="node-a"} 1.0'
        ) in text
    finally:
        agent.close()


def test_a_cancelled_agent_closes_its_ports_for_the_next_one(
    apiserver, cluster, short_dir, tmp_path
):
    """The in-process sim cancels an agent that outlives its grace period (its SIGKILL),
    often while it still starts. Its health and metrics listeners must close with it:
    the next agent on the node binds the same ports."""
    from agent.plugin.app import PluginApp, run

    health = metrics = 0
    while health == metrics:
        health, metrics = _free_port(), _free_port()
    node = NodeEnv(
        short_dir / "n",
        extra_args=["--healthcheck-port", str(health), "--http-endpoint", f"127.0.0.1:{metrics}"],
    )
    config = node.config(apiserver.write_kubeconfig(tmp_path / "kc"))

    async def serving(task: asyncio.Task) -> None:
        async def ports_open() -> bool:
            if task.done():
                pytest.fail(f"the agent ended: {task.result()!r}")
            try:
                for port in (health, metrics):
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    await writer.wait_closed()
            except OSError:
                return False
            return True

        await eventually_async(ports_open, "the agent opening its ports", timeout=60,
                               interval=0.05)

    async def main() -> int:
        for _ in range(2):  # cancelled while it starts, then once it serves
            for wait in (False, True):
                task = asyncio.create_task(run(config, asyncio.Event()))
                if wait:
                    await serving(task)
                else:
                    await asyncio.sleep(0)
                task.cancel()
                await asyncio.wait([task])
                assert task.cancelled()
        # Cancelled in the middle of its graceful stop: the ports close and the watch
        # threads are told to end all the same.
        app = PluginApp(config)
        await app.start()
        stopping = asyncio.create_task(app.stop())
        await asyncio.sleep(0)
        stopping.cancel()
        await asyncio.wait([stopping])
        assert app.cluster is not None and app.cluster.node_object.stopped
        stop = asyncio.Event()
        task = asyncio.create_task(run(config, stop))
        await serving(task)
        stop.set()
        return await task

    assert asyncio.run(main()) == 0
    for port in (health, metrics):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def test_a_reference_written_checkpoint_is_honoured(apiserver, cluster, short_dir, tmp_path):
    """A node switching from the reference driver keeps its prepared claims."""
    from agent.checkpoint import Checkpoint, ClaimEntry, PreparedDevice, PreparedGroup

    node = NodeEnv(short_dir / "n")
    cd = cluster.compute_domain("cd1")
    claim = cluster.daemon_claim("d", cd["metadata"]["uid"])
    uid = claim["metadata"]["uid"]
    ids = ["k8s.compute-domain.nvidia.com/device=all"]
    node.plugin_dir.mkdir(parents=True)
    boot_id = (node.root / "boot_id").read_text().strip()
    CheckpointStore(node.plugin_dir / "checkpoint.json").write(
        Checkpoint(
            claims={
                uid: ClaimEntry(
                    state="PrepareCompleted",
                    status=claim["status"],
                    prepared=[
                        PreparedGroup(
                            config_type="daemon",
                            domain_id=cd["metadata"]["uid"],
                            devices=[
                                PreparedDevice(
                                    kind="daemon",
                                    id=0,
                                    requests=["daemon"],
                                    pool=NODE,
                                    device="daemon-0",
                                    cdi_device_ids=ids,
                                )
                            ],
                        )
                    ],
                    name="d",
                    namespace=DRIVER_NS,
                )
            },
            boot_id=boot_id,
        )
    )
    agent = AgentThread(node.config(apiserver.write_kubeconfig(tmp_path / "kc")))
    try:
        resp = Kubelet(node).prepare([claim])
        assert list(resp.claims[uid].devices[0].cdi_device_ids) == ids
    finally:
        agent.close()


def test_kill_9_at_random_points_leaves_recoverable_state(apiserver, cluster, short_dir, tmp_path):
    node = NodeEnv(short_dir / "n")
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kc")
    cd = cluster.compute_domain("cd1")
    cd_uid = cd["metadata"]["uid"]
    cluster.set_clique_daemon(cd_uid, node.clique_id, NODE, "Ready")
    claims = [
        cluster.daemon_claim("daemon", cd_uid),
        cluster.channel_claim("wl", "default", cd_uid, "All"),
    ]
    kubelet = Kubelet(node)
    rng = random.Random(1234)
    expected: dict[str, list[str]] = {}
    for _ in range(6):
        agent = AgentProcess(node, kubeconfig)
        stop = threading.Event()

        def churn(stop: threading.Event = stop) -> None:
            while not stop.is_set():
                try:
                    for claim in claims:
                        kubelet.prepare([claim], timeout=10)
                    if rng.random() < 0.5:
                        kubelet.unprepare(claims)
                except grpc.RpcError:
                    return

        worker = threading.Thread(target=churn)
        worker.start()
        time.sleep(rng.uniform(0.05, 0.6))
        agent.kill()
        stop.set()
        worker.join(30)
        # Recovery: the checkpoint verifies, a re-Prepare gives the same CDI IDs as ever.
        CheckpointStore(node.plugin_dir / "checkpoint.json").read()
        agent = AgentProcess(node, kubeconfig)
        try:
            for claim in claims:
                uid = claim["metadata"]["uid"]
                result = kubelet.prepare([claim]).claims[uid]
                assert result.error == ""
                got = list(result.devices[0].cdi_device_ids)
                assert expected.setdefault(uid, got) == got
                for cdi_id in got:
                    if "/claim=" in cdi_id:
                        spec = node.root / "cdi" / f"k8s.compute-domain.nvidia.com-claim_{uid}.yaml"
                        devices = yaml.safe_load(spec.read_text())["devices"]
                        assert cdi_id.split("=", 1)[1] in [d["name"] for d in devices]
        finally:
            agent.kill()
    agent = AgentProcess(node, kubeconfig)
    try:
        un = kubelet.unprepare(claims)
        errors = {u: c.error for u, c in un.claims.items()}
        assert errors == {c["metadata"]["uid"]: "" for c in claims}
        assert node.cdi_files() == ["k8s.compute-domain.nvidia.com-device_base.yaml"]
        assert names.LABEL_COMPUTE_DOMAIN not in cluster.node_labels(NODE)
        cp = CheckpointStore(node.plugin_dir / "checkpoint.json").read()
        assert all(e.state == "PrepareAborted" for e in cp.claims.values())
    finally:
        code = agent.terminate()
    assert code == 0, agent.log.read_text()[-3000:]
    assert not node.dra_socket.exists()
