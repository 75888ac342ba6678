"""`make demo` on both control planes, side by side in one run.

For each control plane (the embedded emulator, and upstream etcd + kube-apiserver +
kube-controller-manager + kube-scheduler built by `make k8s`), the demo's cluster (4 nodes,
one clique, driver-managed) is brought up and the built-in example applied, `--rounds`
times alternating the two, so both see the same machine load. Reported per control plane:
the control plane's own start time, the whole cluster's start time, the demo's time to
ready (ComputeDomain created to every workload container seeing its channel), cleanup, and
the process RSS of the control plane's components.

    python tests/bench/bench_controlplanes.py [--rounds 3] [--nodes 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from results import write_section  # noqa: E402

from sim.cluster.demo import DemoOptions, run_demo  # noqa: E402
from sim.controlplane import CONTROL_PLANES, EMULATOR, KUBERNETES  # noqa: E402
from sim.controlplane.binaries import available  # noqa: E402
from sim.controlplane.emulator import EmulatorControlPlane  # noqa: E402
from sim.controlplane.upstream import KubernetesControlPlane  # noqa: E402


async def plane_start(kind: str, root: Path) -> tuple[float, float]:
    """Seconds until the control plane serves and its controllers act, and the RSS (MiB) of
    its processes then (the emulator runs inside this process: no RSS of its own)."""
    plane: EmulatorControlPlane | KubernetesControlPlane = (
        KubernetesControlPlane(root) if kind == KUBERNETES else EmulatorControlPlane(root)
    )
    t0 = time.monotonic()
    try:
        await plane.start()
        await plane.wait_settled()
        took = time.monotonic() - t0
        rss = sum(psutil.Process(p.pid).memory_info().rss for p in plane.processes() if p.pid)
        return took, rss / 2**20
    finally:
        await plane.stop()


async def one_demo(kind: str, nodes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="cd-bench-", dir="/tmp") as root:
        result = await run_demo(
            DemoOptions(nodes=nodes, cliques=1, root=Path(root), control_plane=kind)
        )
    if not result.ok:
        raise SystemExit(f"demo on {kind} failed: {result.failed_step}")
    return {
        "start": float(result.cluster["startSeconds"]),
        "ready": float(result.time_to_ready_s or 0),
        "cleanup": float(result.cleanup_s or 0),
    }


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"


async def main(rounds: int, nodes: int) -> None:
    built, why = available()
    if not built:
        raise SystemExit(f"bench_controlplanes needs `make k8s`: {why}")
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in CONTROL_PLANES}
    planes: dict[str, list[tuple[float, float]]] = {k: [] for k in CONTROL_PLANES}
    for _ in range(rounds):
        for kind in CONTROL_PLANES:
            runs[kind].append(await one_demo(kind, nodes))
            with tempfile.TemporaryDirectory(prefix="cd-bench-cp-", dir="/tmp") as root:
                planes[kind].append(await plane_start(kind, Path(root)))
    rows = [
        ("emulator control plane start (API emulator and the sim's scheduler and "
         "controllers, in this process)", _median([p[0] for p in planes[EMULATOR]])),
        ("upstream control plane start (etcd, kube-apiserver, kube-controller-manager, "
         "kube-scheduler; until the default ServiceAccount exists)",
         _median([p[0] for p in planes[KUBERNETES]])),
        ("upstream control plane RSS at start (4 processes)",
         f"{statistics.median([p[1] for p in planes[KUBERNETES]]):.0f} MiB"),
    ]  # fmt: skip
    for kind in CONTROL_PLANES:
        label = "kubernetes v1.37" if kind == KUBERNETES else "emulator"
        rows += [
            (f"{label}: cluster start ({nodes} nodes, agents registered, controller leading)",
             _median([r["start"] for r in runs[kind]])),
            (f"{label}: demo time to ready", _median([r["ready"] for r in runs[kind]])),
            (f"{label}: demo cleanup", _median([r["cleanup"] for r in runs[kind]])),
        ]
    note = (f"`make demo` (`compute-domain-sim demo --nodes {nodes} --cliques 1`) on each "
            f"control plane, {rounds} rounds alternating the two; median (min, max).")
    print(write_section("Control planes: make demo on the emulator and on Kubernetes", rows,
                        note))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.nodes))
