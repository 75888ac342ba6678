"""How fast a lost node label comes back, and how long its domain is not whole, on both
control planes in one run.

A 2-node cluster (one clique, driver-managed) runs one ComputeDomain with a workload on each
node. Each round an admin removes node-02's `resource.nvidia.com/computeDomain` label
(`kubectl label node node-02 resource.nvidia.com/computeDomain-`, as a merge patch); the
figures are the seconds until node-02's agent has put the label back (its Node watch,
agent/plugin/nodelabels.py) and until both daemons' clique entries are Ready again (the
DaemonSet controller may have taken node-02's daemon away in between). The time is taken
by polling the API every 20 ms from outside.

    python tests/bench/bench_label_repair.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from results import write_section  # noqa: E402

from api import names  # noqa: E402
from runtime.kubecall import call  # noqa: E402
from sim.cluster.cluster import ClusterSpec, SimCluster  # noqa: E402
from sim.cluster.demo import create_objects  # noqa: E402
from sim.cluster.example import builtin  # noqa: E402
from sim.cluster.node import clique_id  # noqa: E402
from sim.controlplane import CONTROL_PLANES, KUBERNETES  # noqa: E402
from sim.controlplane.binaries import available  # noqa: E402

NODE = "node-02"


async def _until(check: Any, timeout: float = 120) -> float:
    """Seconds until `check()` is true (polled every 20 ms)."""
    t0 = time.monotonic()
    while not await check():
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"no repair within {timeout} s")
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


async def rounds_on(kind: str, rounds: int) -> list[tuple[float, float]]:
    with tempfile.TemporaryDirectory(prefix="cd-bench-labels-", dir="/tmp") as root:
        cluster = SimCluster(ClusterSpec(root=Path(root), control_plane=kind, nodes=2,
                                         cliques=1))
        try:
            await cluster.start()
            core = client.CoreV1Api(cluster.admin)
            custom = client.CustomObjectsApi(cluster.admin)
            objects = builtin(clique_id(1), 2, name="bench")
            await create_objects(cluster.admin, objects)

            async def cd_uid() -> str:
                cd = await call(custom.get_namespaced_custom_object, names.GROUP,
                                names.VERSION, "default", names.PLURAL_COMPUTE_DOMAINS, "bench")
                return str(cd["metadata"]["uid"])

            uid = await cd_uid()
            clique = names.clique_object_name(uid, clique_id(1))

            async def labeled() -> bool:
                node = await call(core.read_node, NODE)
                return (node.metadata.labels or {}).get(names.LABEL_COMPUTE_DOMAIN) == uid

            async def whole() -> bool:
                try:
                    obj = await call(custom.get_namespaced_custom_object, names.GROUP,
                                     names.VERSION, cluster.namespace, names.PLURAL_CLIQUES,
                                     clique)
                except ApiException:
                    return False
                ready = {d["nodeName"] for d in obj.get("daemons") or ()
                         if d.get("status") == names.STATUS_READY}
                return ready == {"node-01", NODE} and await labeled()

            await _until(whole)
            out = []
            for _ in range(rounds):
                await call(core.patch_node, NODE,
                           {"metadata": {"labels": {names.LABEL_COMPUTE_DOMAIN: None}}},
                           _content_type="application/merge-patch+json")
                t0 = time.monotonic()
                await _until(labeled)
                back = time.monotonic() - t0
                await _until(whole)
                out.append((back, time.monotonic() - t0))
                await asyncio.sleep(2)  # the DaemonSet's replacement settles
                await _until(whole)
            return out
        finally:
            await cluster.stop()


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"


async def main(rounds: int) -> None:
    built, why = available()
    kinds = CONTROL_PLANES if built else tuple(k for k in CONTROL_PLANES if k != KUBERNETES)
    if not built:
        print(f"kubernetes control plane skipped: {why}")
    rows = []
    for kind in kinds:
        results = await rounds_on(kind, rounds)
        label = "kubernetes v1.37" if kind == KUBERNETES else "emulator"
        rows += [
            (f"{label}: label back on the Node", _median([r[0] for r in results])),
            (f"{label}: both daemons Ready again", _median([r[1] for r in results])),
        ]
    note = (f"A 2-node simulated cluster; node-02's computeDomain label removed {rounds} "
            "times by an admin; median (min, max) from the removal.")
    print(write_section("Self-healing: a removed node label", rows, note))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(main(parser.parse_args().rounds))
