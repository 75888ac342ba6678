"""Time to ready in pod placement (an IMEX daemon pod per domain and node, the reference's
model) and agent placement (the node agent runs nvidia-imex itself), side by side.

The same in-process simulated cluster as bench_bringup.py (fake nvidia-imex start 0.5 s,
one workload pod per node, one ComputeDomain), each shape run in both placements one after
the other in this run, so the ratio compares like with like on this machine. Reported per
shape and placement: CD created -> every workload container sees its channel, the
driver's API writes per node (Events apart), and what the driver created for the domain.

    python tests/bench/bench_placement.py [--shapes 18:1,72:4,144:8]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_bringup import StalledError, one
from results import write_section

PLACEMENTS = ("pod", "agent")


def _writes(r: dict, nodes: int) -> str:
    writes = {role: t["writes"] for role, t in r["counts"].items()}
    events = sum(t["eventWrites"] for t in r["counts"].values())
    parts = ", ".join(f"{role} {n / nodes:.1f}" for role, n in sorted(writes.items()) if n)
    return f"{sum(writes.values()) / nodes:.1f} ({parts}); Events {events / nodes:.1f}"


def run(args: argparse.Namespace) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for shape in args.shapes.split(","):
        nodes, cliques = (int(x) for x in shape.split(":"))
        label = f"{nodes} nodes / {cliques} clique{'s' if cliques > 1 else ''}"
        ready: dict[str, float] = {}
        for placement in PLACEMENTS:
            try:
                r = asyncio.run(one(nodes, cliques, args.timeout, imex_placement=placement))
            except StalledError as err:
                rows.append((f"{label}, {placement}: not ready", str(err)[:300]))
                continue
            ready[placement] = r["ready"]
            made = ", ".join(f"{k} {v}" for k, v in r["generated"].items())
            rows += [
                (f"{label}, {placement}: CD created -> ready", f"{r['ready']:.1f} s"),
                (f"{label}, {placement}: driver API writes per node", _writes(r, nodes)),
                (f"{label}, {placement}: created for the domain", made),
                (f"{label}, {placement}: readiness flaps / cleanup",
                 f"{r['flaps']} / {'nothing left' if r['clean'] else 'LEFTOVERS'}"),
            ]
            print(rows[-4:], flush=True)
        if len(ready) == 2 and ready["agent"] > 0:
            rows.append((f"{label}: pod / agent time to ready",
                         f"{ready['pod'] / ready['agent']:.1f}x"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", default="18:1,72:4,144:8")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    note = ("In-process simulated cluster, API emulator in a process of its own, fake "
            "nvidia-imex start 0.5 s, one workload pod per node; each shape in both "
            "placements in one run.")
    print(write_section("IMEX placement: pod vs agent (in-process)", run(args), note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
