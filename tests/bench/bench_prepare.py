"""Prepare / Unprepare latency through the real gRPC socket, and the agent's footprint.

The agent runs as a real process (`compute-domain-agent plugin`, or the frozen binary with
--agent) against the API emulator, on a node whose IMEX daemon is already Ready, with the
checkpoint fsync'd on every change as in production. A kubelet-side client prepares and
unprepares one channel claim over and over (Single: channel 0; All: 2048 channels), then
prepares 200 distinct daemon-style claims to measure the RSS they cost.

    python tests/bench/bench_prepare.py [--iterations N] [--agent PROGRAM]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "agent"))
# plugin_env waits through tests/eventually.py, which conftest.py puts on the path for pytest.
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from plugin_env import NODE, AgentProcess, ClusterObjects, Kubelet, NodeEnv  # noqa: E402
from results import pct, write_section  # noqa: E402

from sim.apiserver.runner import ServerThread  # noqa: E402


def timed(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def ms(values: list[float]) -> str:
    return f"{pct(values, 0.5):.1f} / {pct(values, 0.99):.1f} ms"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20


def run(args: argparse.Namespace) -> list[tuple[str, str]]:
    root = Path(tempfile.mkdtemp(prefix="cd-bench-", dir="/tmp"))
    server = ServerThread().start()
    api = server.api_client()
    cluster = ClusterObjects(api)
    for crd in sorted((REPO / "packaging/helm/dra-driver-nvidia-gpu/crds").glob("*.yaml")):
        import yaml
        from kubernetes import client

        client.ApiextensionsV1Api(api).create_custom_resource_definition(
            yaml.safe_load(crd.read_text())
        )
    time.sleep(0.5)
    cluster.namespace("nvidia-dra-driver")
    cluster.node(NODE)
    # Metrics served as the chart deploys the agent (kubeletplugin.yaml HTTP_ENDPOINT).
    port = _free_port()
    node = NodeEnv(root / "n", extra_args=["--http-endpoint", f"127.0.0.1:{port}"])
    kubeconfig = server.write_kubeconfig(root / "kc")
    started = time.perf_counter()
    agent = AgentProcess(node, kubeconfig, program=args.agent)
    start_to_registered = time.perf_counter() - started
    kubelet = Kubelet(node)
    rows: list[tuple[str, str]] = [
        ("agent program", "frozen binary" if args.agent else "venv entry point"),
        ("start to registered (GetInfo answers)", f"{start_to_registered:.2f} s"),
    ]
    try:
        time.sleep(3)
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        if b"nvidia_dra_requests_total" not in scrape:
            raise SystemExit("the agent's /metrics does not serve its metrics")
        rows.append(("idle RSS (agent and children, metrics served)",
                     f"{rss_mib(agent.proc.pid):.0f} MiB"))
        cd = cluster.compute_domain("bench")
        uid = cd["metadata"]["uid"]
        cluster.set_clique_daemon(uid, node.clique_id, NODE, "Ready")
        for mode in ("Single", "All"):
            claim = cluster.channel_claim(f"wl-{mode.lower()}", "default", uid, mode)
            prep: list[float] = []
            unprep: list[float] = []
            for _ in range(args.iterations):
                prep += timed(lambda c=claim: _ok(kubelet.prepare([c])), 1)
                unprep += timed(lambda c=claim: _ok(kubelet.unprepare([c])), 1)
            rows.append((f"Prepare {mode}, p50 / p99 ({args.iterations} runs)", ms(prep)))
            rows.append((f"Unprepare {mode}, p50 / p99", ms(unprep)))
            rows.append((f"Prepare {mode}, mean", f"{statistics.mean(prep):.1f} ms"))
        # One node serves one claim per device; distinct channels keep 200 apart (the
        # driver allocates any of its 2048 channels, the ResourceSlice publishes channel 0).
        claims = [
            cluster.channel_claim(f"many-{i}", "default", uid, device=f"channel-{i + 1}")
            for i in range(args.claims)
        ]
        for claim in claims:
            _ok(kubelet.prepare([claim]))
        rss = rss_mib(agent.proc.pid)
        rows.append((f"RSS with {args.claims} prepared claims", f"{rss:.0f} MiB"))
        for claim in claims:
            _ok(kubelet.unprepare([claim]))
    finally:
        agent.terminate()
        api.close()
        server.close()
    return rows


def _ok(response) -> None:
    for uid, result in response.claims.items():
        if result.error:
            raise SystemExit(f"claim {uid}: {result.error}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--agent", type=Path, default=None, help="agent program (frozen binary)")
    args = parser.parse_args()
    title = "Agent: Prepare latency and footprint" + (" (frozen binary)" if args.agent else "")
    print(write_section(title, run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
