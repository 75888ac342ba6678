"""Time to ready of a driver-managed ComputeDomain of 18, 72 and 144 nodes (1, 4, 8 cliques).

The simulated cluster in in-process mode (one process: the node agents, the IMEX daemon
containers and the fake `nvidia-imex`, whose start takes 0.5 s; the controller and the API
emulator are processes of their own). One workload pod per node, all in one ComputeDomain.
Reported: the time from the workload claims being allocated to every workload container
seeing its channel, the driver's API writes (Events apart) and 409 conflicts per daemon
join, readiness flaps, and the CPU-seconds of each process, beside the reference driver's
published figures for the same shapes. The bench watches the cluster (sim/cluster/demo.py
ClusterWatch) rather than polling LISTs, so it costs little of the CPU it measures; it also
reports the watch bytes the API server streamed to the driver per daemon join.

It also runs one shape twice, on the idle machine and beside a CPU hog on every core (as
`stress --cpu N` would: busy processes outside everything measured), and compares the
driver's writes per join, by component and by the resource written: a count that grew with
the load would mean writes that retries, races or timers make, not the joins themselves.

    python tests/bench/bench_bringup.py [--shapes 18:1,72:4,144:8] [--load-shape 72:4]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from results import write_section  # noqa: E402

from api import names  # noqa: E402
from runtime.kubecall import call  # noqa: E402
from sim.cluster.cluster import ClusterSpec, SimCluster  # noqa: E402
from sim.cluster.demo import (  # noqa: E402
    ClusterWatch,
    StepError,
    create_objects,
    delete_objects,
    driver_traffic,
    user_stats,
    wait_clean,
    wait_ready,
)
from sim.cluster.evidence import EvidenceChain, Snapshot  # noqa: E402
from sim.cluster.example import NAMESPACE, builtin  # noqa: E402
from sim.controlplane import CONTROL_PLANES, EMULATOR  # noqa: E402

REFERENCE = {18: "~20 s", 72: "~63 s", 144: "not reported"}


async def one(nodes: int, cliques: int, timeout: float, control_plane: str = EMULATOR,
              imex_placement: str = "pod", sim_workers: int = 1) -> dict:
    root = Path(tempfile.mkdtemp(prefix="cd-bench-", dir="/tmp"))
    spec = ClusterSpec(
        root=root, nodes=nodes, cliques=cliques, in_process=True, imex_start_delay=0.5,
        verbosity=1, control_plane=control_plane, imex_placement=imex_placement,
        sim_workers=sim_workers, cpu_meter=True,
    )  # fmt: skip
    cluster = SimCluster(spec)
    try:
        started = time.perf_counter()
        await cluster.start()
        start_s = time.perf_counter() - started
        objects = builtin(None, nodes, name="bench")
        assert cluster.admin is not None
        watch = ClusterWatch(cluster.admin, cluster.namespace)
        await watch.start()
        before = await user_stats(cluster)
        writes_before = await writes_by_resource(cluster)
        cpu = ProcessCpu(cluster)
        split_before = await cluster.cpu_split()
        await create_objects(cluster.admin, objects)
        chain = EvidenceChain(
            NAMESPACE, "bench", driver_namespace=cluster.namespace, host_managed=False,
            node_roots={n: node.host.root for n, node in cluster.nodes.items()},
            agent_placement=imex_placement == "agent",
        )  # fmt: skip
        waited = time.perf_counter()
        try:
            await wait_ready(cluster, [chain], timeout, watch=watch)
        except StepError as err:
            raise StalledError(str(err), _progress(chain, start_s, time.perf_counter() - waited,
                                              cpu.seconds())) from None
        finally:
            watch.stop()
        cpu_s = cpu.seconds()
        split = split_delta(split_before, await cluster.cpu_split())
        after = await user_stats(cluster)
        writes_after = await writes_by_resource(cluster)
        assert before is not None and after is not None  # emulator stats or the audit log
        rss = psutil.Process().memory_info().rss / 2**20
        allocated = chain.link("allocation").done_at or 0.0
        ready = chain.link("device").done_at or 0.0
        counts = driver_traffic(before, after, cluster.accounts, cluster.namespace)
        generated = await generated_objects(cluster, chain.uid)
        await delete_objects(cluster.admin, objects)
        left = await wait_clean(cluster, [chain.uid], [NAMESPACE], 120)
        return {
            "start": start_s, "allocated": allocated, "ready": ready, "counts": counts,
            "rss": rss, "clean": not left, "cpu": cpu_s, "flaps": watch.flaps.count,
            "split": split, "driver_cpu": driver_cpu(cpu_s, split),
            "generated": generated,
            "by_resource": resource_deltas(writes_before, writes_after, cluster),
        }  # fmt: skip
    finally:
        await cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


async def writes_by_resource(cluster: SimCluster) -> dict[str, dict[str, int]]:
    """user -> "METHOD resource" -> writes, from the emulator's counters ({} upstream)."""
    if cluster.server is None:
        return {}
    counted: dict[str, dict[str, int]] = await asyncio.to_thread(cluster.server.op, "writes")
    return counted


def resource_deltas(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
                    cluster: SimCluster) -> dict[str, dict[str, int]]:
    """role -> "METHOD resource" -> the driver's writes between two snapshots."""
    out: dict[str, dict[str, int]] = {}
    for role, account in cluster.accounts.items():
        user = f"system:serviceaccount:{cluster.namespace}:{account}"
        a, b = before.get(user, {}), after.get(user, {})
        out[role] = {k: n - a.get(k, 0) for k, n in b.items() if n - a.get(k, 0)}
    return out


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def cpu_hogs(count: int):
    """`count` processes that keep a core busy each until the block ends."""
    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(count)]
    for hog in hogs:
        hog.start()
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.join()


async def generated_objects(cluster: SimCluster, uid: str) -> dict[str, int]:
    """What the driver created for the domain, counted once it is ready: the per-domain
    DaemonSets, the daemon pods and claims in the driver namespace, the claim templates."""
    snap = await Snapshot.take(cluster.admin, cluster.namespace)
    assert snap is not None

    def ours(objs: list[dict]) -> list[dict]:
        return [o for o in objs
                if (o["metadata"].get("labels") or {}).get(names.LABEL_COMPUTE_DOMAIN) == uid]

    driver_ns = [c for c in snap.claims if c["metadata"].get("namespace") == cluster.namespace]
    apps = client.AppsV1Api(cluster.admin)
    daemonsets = await call(apps.list_daemon_set_for_all_namespaces,
                            label_selector=f"{names.LABEL_COMPUTE_DOMAIN}={uid}")
    return {"DaemonSets": len(daemonsets.items), "daemon pods": len(ours(snap.pods)),
            "daemon claims": len(driver_ns), "claim templates": len(ours(snap.templates))}


class StalledError(Exception):
    """A shape that did not converge: why, and the rows that say how far it got."""

    def __init__(self, why: str, rows: list[tuple[str, str]]) -> None:
        super().__init__(why)
        self.rows = rows


def _progress(chain: EvidenceChain, start_s: float, waited_s: float,
              cpu: dict[str, float]) -> list[tuple[str, str]]:
    """Each hand-off of the chain at the deadline (when it held, or how many had), the
    CPU each process used while waiting (2.0 cores is all this machine has), and the sim
    process's RSS: enough to tell a stuck hand-off from a saturated machine."""
    rows = [("cluster start (nodes registered, driver installed)", f"{start_s:.0f} s")]
    for link in chain.links:
        state = f"at {link.done_at:.1f} s" if link.done_at is not None else "NOT REACHED"
        rows.append((f"hand-off: {link.title}",
                     f"{state}{f' ({link.count})' if link.count else ''}"))
    rows.append((f"CPU while waiting {waited_s:.0f} s (cores used)",
                 ", ".join(f"{k} {v:.0f} s ({v / waited_s:.2f})" for k, v in cpu.items())))
    rows.append(("sim process RSS", f"{psutil.Process().memory_info().rss / 2**20:.0f} MiB"))
    return rows


def split_delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
                ) -> dict[str, float]:
    """The driver's and the sim's CPU-seconds inside the processes running in-process
    nodes, between two `SimCluster.cpu_split()` looks, summed over those processes."""
    out = {"driver": 0.0, "sim": 0.0}
    for name, now in after.items():
        was = before.get(name, {})
        for key in out:
            out[key] += now.get(key, 0.0) - was.get(key, 0.0)
    return out


def driver_cpu(cpu: dict[str, float], split: dict[str, float]) -> float:
    """The driver's CPU-seconds: its controller process and its in-process share."""
    return cpu.get("controller (driver)", 0.0) + split.get("driver", 0.0)


class ProcessCpu:
    """CPU-seconds of the sim's processes from now on: this one (the sim's scheduler and
    controllers, and with one sim worker the kubelets and the in-process agents, IMEX
    daemons and fake IMEX too), each node worker process, the emulator's own process or
    each upstream control-plane component's, and the driver's controller process. Inside
    the processes that run nodes, `SimCluster.cpu_split` tells the driver's share."""

    def __init__(self, cluster: SimCluster) -> None:
        server = cluster.server
        workers = cluster.workers.pids if cluster.workers is not None else []
        pids = {
            "sim" if workers else "sim + in-process agents and daemons": psutil.Process().pid,
            **{f"sim worker {n}": pid for n, pid in enumerate(workers, 1)},
            "API emulator": getattr(server, "pid", None),
            **{p.name: p.pid for p in cluster.control_plane.processes()},
            "controller (driver)": cluster.controller.pid,
        }
        self._procs = {k: psutil.Process(p) for k, p in pids.items() if p is not None}
        self._start = {k: self._cpu(p) for k, p in self._procs.items()}

    @staticmethod
    def _cpu(proc: psutil.Process) -> float:
        times = proc.cpu_times()
        return float(times.user + times.system)

    def seconds(self) -> dict[str, float]:
        return {k: self._cpu(p) - self._start[k] for k, p in self._procs.items()}


def run(args: argparse.Namespace) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    per_join_kib: dict[int, float] = {}
    for shape in args.shapes.split(","):
        nodes, cliques = (int(x) for x in shape.split(":"))
        label = f"{nodes} nodes / {cliques} clique{'s' if cliques > 1 else ''}"
        if args.control_plane != EMULATOR:
            label += f", {args.control_plane} control plane"
        try:
            r = asyncio.run(one(nodes, cliques, args.timeout, args.control_plane,
                                sim_workers=args.sim_workers))
        except StalledError as err:  # a shape that does not converge is a result too
            rows.append((f"{label}: not ready", str(err)[:300]))
            rows += [(f"{label}: {k}", v) for k, v in err.rows]
            print(rows[-len(err.rows) - 1:], flush=True)
            continue
        except Exception as err:  # so is one that cannot even start
            rows.append((f"{label}: failed", f"{type(err).__name__}: {err}"[:300]))
            print(rows[-1:], flush=True)
            continue
        writes = {role: t["writes"] for role, t in r["counts"].items()}
        events = sum(t["eventWrites"] for t in r["counts"].values())
        conflicts = sum(t["conflicts"] for t in r["counts"].values())
        watched = all("watchBytes" in t for t in r["counts"].values())
        watch_kib = sum(t.get("watchBytes", 0) for t in r["counts"].values()) / 1024
        if watched:
            per_join_kib[nodes] = watch_kib / nodes
        watch_events = sum(t.get("watchEvents", 0) for t in r["counts"].values())
        rows += [
            (f"{label}: allocated -> every container sees its channel",
             f"{r['ready'] - r['allocated']:.1f} s (reference: {REFERENCE.get(nodes, '-')})"),
            (f"{label}: CD created -> ready", f"{r['ready']:.1f} s"),
            (f"{label}: driver API writes per daemon join, Events aside",
             f"{sum(writes.values()) / nodes:.1f} (agent {writes.get('agent', 0) / nodes:.1f}, "
             f"daemon {writes.get('daemon', 0) / nodes:.1f}, "
             f"controller {writes.get('controller', 0) / nodes:.1f}); "
             f"Events {events / nodes:.1f}"),
            (f"{label}: 409 conflicts per daemon join", f"{conflicts / nodes:.2f}"),
            (f"{label}: readiness flaps (Ready -> NotReady)", str(r["flaps"])),
            (f"{label}: CPU-seconds, CD created -> ready",
             ", ".join(f"{k} {v:.0f}" for k, v in r["cpu"].items())),
            (f"{label}: CPU-seconds per node, driver / sim (in the node processes)",
             f"{r['driver_cpu'] / nodes:.2f} / {r['split']['sim'] / nodes:.2f} (driver: "
             f"controller {r['cpu'].get('controller (driver)', 0.0):.0f} s + agents and "
             f"daemons {r['split']['driver']:.0f} s)"),
            (f"{label}: watch traffic to the driver per daemon join",
             f"{watch_kib / nodes:.1f} KiB ({watch_events / nodes:.1f} events)" if watched
             else "not counted (kube-apiserver keeps no per-client watch bytes)"),
            (f"{label}: sim process RSS / cleanup", f"{r['rss']:.0f} MiB / "
             f"{'nothing left' if r['clean'] else 'LEFTOVERS'}"),
        ]  # fmt: skip
        print(rows[-9:], flush=True)
    if len(per_join_kib) > 1:  # the scaling target: per-node cost constant in N
        small, large = min(per_join_kib), max(per_join_kib)
        rows.append((f"watch traffic per daemon join, {large} vs {small} nodes",
                     f"{per_join_kib[large] / per_join_kib[small]:.2f}x"))  # fmt: skip
    return rows


def per_join_writes(r: dict, nodes: int) -> tuple[float, str]:
    """Writes per join (Events aside) and the breakdown by component and resource."""
    total = sum(t["writes"] for t in r["counts"].values()) / nodes
    parts = []
    for role, writes in sorted(r["by_resource"].items()):
        for key, n in sorted(writes.items(), key=lambda kv: -kv[1]):
            if not key.endswith(" events"):
                parts.append(f"{role} {key} {n / nodes:.2f}")
    return total, "; ".join(parts)


def run_load(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The load shape on the idle machine, then beside a busy process per core."""
    nodes, cliques = (int(x) for x in args.load_shape.split(":"))
    label = f"{nodes} nodes / {cliques} cliques"
    hogs = os.cpu_count() or 2
    results = {}
    for name in ("idle", "loaded"):
        with cpu_hogs(hogs) if name == "loaded" else contextlib.nullcontext():
            results[name] = asyncio.run(one(nodes, cliques, args.timeout, args.control_plane,
                                            sim_workers=args.sim_workers))
    rows: list[tuple[str, str]] = []
    figures = {}
    for name, r in results.items():
        total, breakdown = per_join_writes(r, nodes)
        conflicts = sum(t["conflicts"] for t in r["counts"].values()) / nodes
        figures[name] = total
        where = "idle machine" if name == "idle" else f"{hogs} CPU hogs beside it"
        rows += [
            (f"{label}, {where}: CD created -> ready", f"{r['ready']:.1f} s"),
            (f"{label}, {where}: driver API writes per daemon join, Events aside",
             f"{total:.2f}, 409 conflicts {conflicts:.2f} ({breakdown})"),
        ]
    rows.append((f"{label}: writes per join, loaded / idle",
                 f"{figures['loaded'] / figures['idle']:.2f}x"))
    print(rows, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", default="18:1,72:4,144:8")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--control-plane", choices=CONTROL_PLANES, default=EMULATOR,
                        help="the API emulator, or upstream kube-apiserver, etcd, "
                        "kube-controller-manager and kube-scheduler (`make k8s` first)")
    parser.add_argument("--sim-workers", type=int, default=1,
                        help="node worker processes of the simulated cluster (1: the nodes "
                        "in the bench's own process)")
    parser.add_argument("--load-shape", default="72:4",
                        help="the shape run idle and under CPU load ('' skips it)")
    parser.add_argument("--section", default="",
                        help="RESULTS.md section title (default: one per control plane)")
    args = parser.parse_args()
    upstream = args.control_plane != EMULATOR
    where = ("upstream kube-apiserver, etcd, kube-controller-manager and kube-scheduler in "
             "processes of their own, writes and 409s counted from kube-apiserver's audit "
             "log" if upstream else "the API emulator in a process of its own")
    nodes_in = ("one process" if args.sim_workers == 1
                else f"{args.sim_workers} node worker processes, the sim's scheduler and "
                "controllers in the main one")
    note = (
        f"In-process simulated cluster (agents, IMEX daemons and fake nvidia-imex in "
        f"{nodes_in}; {where}; the controller in a process of its own), fake "
        "nvidia-imex start 0.5 s, one workload pod per node. Reference figures: "
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/816 "
        "(8 min for 256 pods), measured on real racks."
    )
    title = args.section or ("Time to ready (driver-managed, in-process"
                             + (", upstream control plane)" if upstream else ")"))
    rows = run(args) if args.shapes else []
    if args.load_shape:
        rows += run_load(args)
    print(write_section(title, rows, note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
