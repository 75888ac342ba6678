"""The demo on the real kubelet and on the simulated one, side by side in one run.

Both on the upstream control plane (`make k8s`), so the kubelet is the only difference:
`compute-domain-sim demo --control-plane kubernetes --nodes 2 --cliques 1` with
`--kubelet upstream` (the pinned kubelet on the sim's CRI runtime, the driver installed by
helm) and with the simulated kubelet, `--rounds` times alternating the two so both see the
same machine load. Reported per kubelet: cluster start (nodes Ready, driver pods Ready),
the demo's time to ready (ComputeDomain created to every workload container seeing its
channel), and cleanup; and the ratio of the two times to ready.

    python tests/bench/bench_kubelets.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from results import write_section  # noqa: E402

from sim.cluster.cluster import KUBELETS, SIM_KUBELET, UPSTREAM_KUBELET  # noqa: E402
from sim.cluster.demo import DemoOptions, run_demo  # noqa: E402
from sim.controlplane import KUBERNETES  # noqa: E402
from sim.controlplane.binaries import available  # noqa: E402

NODES = 2


async def one_demo(kubelet: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="cd-bench-kubelet-", dir="/tmp") as root:
        result = await run_demo(DemoOptions(
            nodes=NODES, cliques=1, root=Path(root), control_plane=KUBERNETES,
            kubelet=kubelet))
    if not result.ok:
        raise SystemExit(f"demo on the {kubelet} kubelet failed: {result.failed_step}")
    return {"start": float(result.cluster["startSeconds"]),
            "ready": float(result.time_to_ready_s or 0),
            "cleanup": float(result.cleanup_s or 0)}


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"


async def main(rounds: int) -> None:
    built, why = available()
    if not built:
        raise SystemExit(f"bench_kubelets needs `make k8s helm`: {why}")
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in KUBELETS}
    for _ in range(rounds):
        for kubelet in KUBELETS:
            runs[kubelet].append(await one_demo(kubelet))
    labels = {UPSTREAM_KUBELET: "real kubelet v1.37", SIM_KUBELET: "simulated kubelet"}
    rows: list[tuple[str, str]] = []
    for kubelet in (UPSTREAM_KUBELET, SIM_KUBELET):
        label = labels[kubelet]
        rows += [
            (f"{label}: cluster start ({NODES} nodes, driver pods Ready)",
             _median([r["start"] for r in runs[kubelet]])),
            (f"{label}: demo time to ready", _median([r["ready"] for r in runs[kubelet]])),
            (f"{label}: demo cleanup", _median([r["cleanup"] for r in runs[kubelet]])),
        ]
    real = statistics.median(r["ready"] for r in runs[UPSTREAM_KUBELET])
    ours = statistics.median(r["ready"] for r in runs[SIM_KUBELET])
    rows.append(("time to ready, real / simulated kubelet", f"{real / ours:.2f}x"))
    note = (f"`compute-domain-sim demo --control-plane kubernetes --nodes {NODES} --cliques 1` "
            f"with `--kubelet upstream` and with the simulated kubelet, {rounds} rounds "
            "alternating the two; median (min, max).")
    print(write_section("Kubelets: the demo on the real kubelet and on the simulated one",
                        rows, note))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.rounds))
