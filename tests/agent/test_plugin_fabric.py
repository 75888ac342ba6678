"""Host-managed mode against the fake host `nvidia-imex`, and RPC concurrency on one node."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import pytest
from eventually import eventually
from plugin_env import NODE, AgentThread, Kubelet, NodeEnv, waiting_reason, waits_of

from sim.fakeimex.install import install

SOCKET = "/etc/nvidia-imex/imex_ctrl.sock"


@pytest.fixture
def host_node(apiserver, cluster, short_dir, tmp_path):
    env = NodeEnv(
        short_dir / "h",
        extra_args=[
            "--imex-mode",
            "hostManaged",
            "--feature-gates",
            "HostManagedIMEXDaemon=true",
            "--imex-ctl-chroot",
            "false",
            "--imex-host-socket-path",
            SOCKET,
            "--prepare-timeout",
            "4s",
        ],
    )
    install(env.root / "driver-root" / "usr" / "bin")
    agent = AgentThread(env.config(apiserver.write_kubeconfig(tmp_path / "kc")))
    try:
        yield env
    finally:
        agent.close()


def start_host_imex(env: NodeEnv, **knobs: str) -> subprocess.Popen:
    """The host's nvidia-imex with a unix command socket, as the admin runs it."""
    root = env.root / "driver-root"
    (root / "etc" / "nvidia-imex").mkdir(parents=True, exist_ok=True)
    nodes = env.root / "nodes.cfg"
    nodes.write_text("127.0.1.40\n")
    config = env.root / "imex.cfg"
    config.write_text(
        f"DAEMONIZE=0\nBIND_INTERFACE_IP=127.0.1.40\nSERVER_PORT={free_port()}\n"
        f"IMEX_NODE_CONFIG_FILE={nodes}\nIMEX_WAIT_FOR_QUORUM=RECOVERY\nIMEX_CMD_ENABLED=1\n"
        f"IMEX_CMD_PORT=\nIMEX_CMD_UNIX_DOMAIN_PATH={root}{SOCKET}\n"
    )
    proc_env = dict(os.environ, **knobs)
    proc = subprocess.Popen(
        [root / "usr" / "bin" / "nvidia-imex", "-c", str(config)],
        env=proc_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    def socket_open() -> bool:
        if proc.poll() is not None:
            pytest.fail("fake nvidia-imex exited")
        return (root / SOCKET.lstrip("/")).exists()

    eventually(socket_open, "fake nvidia-imex opening its socket", timeout=15, interval=0.05)
    return proc


def test_host_imex_ready_releases_the_claim(host_node, cluster):
    proc = start_host_imex(host_node)
    try:
        cd = cluster.compute_domain("cd1")
        claim = cluster.channel_claim("wl", "default", cd["metadata"]["uid"])
        resp = Kubelet(host_node).prepare([claim], timeout=30)
        result = resp.claims[claim["metadata"]["uid"]]
        assert result.error == "" and len(result.devices[0].cdi_device_ids) == 1
    finally:
        proc.terminate()
        proc.wait(10)


def test_host_imex_not_ready_or_socket_missing_keeps_the_claim_pending(host_node, cluster):
    cd = cluster.compute_domain("cd1")
    claim = cluster.channel_claim("wl", "default", cd["metadata"]["uid"])
    resp = Kubelet(host_node).prepare([claim], timeout=30)
    assert "host nvidia-imex" in waiting_reason(resp, claim["metadata"]["uid"])
    proc = start_host_imex(host_node, FAKE_IMEX_NEVER_READY="1")
    try:
        resp = Kubelet(host_node).prepare([claim], timeout=30)
        assert "not ready" in waiting_reason(resp, claim["metadata"]["uid"])
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_waiting_workload_never_blocks_the_daemon_claim(apiserver, cluster, short_dir, tmp_path):
    env = NodeEnv(short_dir / "c", extra_args=["--prepare-timeout", "20s"])
    agent = AgentThread(env.config(apiserver.write_kubeconfig(tmp_path / "kc")))
    try:
        kubelet = Kubelet(env)
        cd = cluster.compute_domain("cd1")
        uid = cd["metadata"]["uid"]
        workload = cluster.channel_claim("wl", "default", uid)
        done = {}
        waiting = threading.Thread(
            target=lambda: done.setdefault("resp", kubelet.prepare([workload], timeout=40))
        )
        waits = waits_of(agent)
        waiting.start()
        eventually(lambda: waits, "the workload's Prepare waiting")
        daemon = cluster.daemon_claim("daemon", uid)
        start = time.monotonic()
        resp = kubelet.prepare([daemon], timeout=10)
        assert resp.claims[daemon["metadata"]["uid"]].error == ""
        assert time.monotonic() - start < 3, "the daemon's Prepare waited for the workload"
        assert "resp" not in done
        cluster.set_clique_daemon(uid, env.clique_id, NODE, "Ready")
        waiting.join(20)
        assert done["resp"].claims[workload["metadata"]["uid"]].error == ""
    finally:
        agent.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]
