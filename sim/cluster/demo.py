"""`compute-domain-sim demo`: the whole driver end to end, with the evidence of each step.

Brings a simulated cluster up, applies a ComputeDomain and its workloads, waits until every
workload container sees its IMEX channel device while recording the evidence chain,
deletes everything, checks nothing is left (objects, labels, finalizers, CDI files,
processes), and reports. Any failure names the step that did not happen.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from kubernetes import client

from api import names
from api.kube import call, is_transient
from sim.cluster import example
from sim.cluster.cluster import ClusterSpec, SimCluster
from sim.cluster.evidence import EvidenceChain, Snapshot
from sim.cluster.leftovers import cdi_leftovers, object_leftovers, process_leftovers

Obj = dict[str, Any]
T = TypeVar("T")
POLL = 0.2


@dataclass
class DemoResult:
    ok: bool = False
    failed_step: str | None = None
    cluster: Obj = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    chains: list[EvidenceChain] = field(default_factory=list)
    time_to_ready_s: float | None = None
    cleanup_s: float | None = None
    leftovers: list[str] = field(default_factory=list)
    server_version: str | None = None

    def to_dict(self) -> Obj:
        return {
            "ok": self.ok,
            "failedStep": self.failed_step,
            "server_version": self.server_version,
            "cluster": self.cluster,
            "applied": self.applied,
            "computeDomains": [c.to_dict() for c in self.chains],
            "time_to_ready_s": self.time_to_ready_s,
            "cleanup": {
                "ok": self.ok or not self.leftovers,
                "seconds": self.cleanup_s,
                "leftovers": self.leftovers,
            },
        }


class StepError(Exception):
    """A demo step that did not happen; the message names it."""


async def create_objects(api: client.ApiClient, objects: Sequence[Obj]) -> list[str]:
    """Create namespaces, then ComputeDomains, then Pods and Jobs; returns `Kind ns/name`."""
    order = {"Namespace": 0, names.KIND_COMPUTE_DOMAIN: 1, "Pod": 2, "Job": 2}
    custom, core, batch = (
        client.CustomObjectsApi(api),
        client.CoreV1Api(api),
        client.BatchV1Api(api),
    )
    created = []
    for obj in sorted(objects, key=lambda o: order[o["kind"]]):
        kind, md = obj["kind"], obj["metadata"]
        ns = md.get("namespace") or example.NAMESPACE
        try:
            if kind == "Namespace":
                await call(core.create_namespace, obj)
            elif kind == names.KIND_COMPUTE_DOMAIN:
                await call(
                    custom.create_namespaced_custom_object,
                    names.GROUP,
                    names.VERSION,
                    ns,
                    names.PLURAL_COMPUTE_DOMAINS,
                    obj,
                )
            elif kind == "Pod":
                await call(core.create_namespaced_pod, ns, obj)
            else:
                await call(batch.create_namespaced_job, ns, obj)
        except client.ApiException as err:
            raise StepError(
                f"apply: creating {kind} {ns}/{md['name']} failed: {err.status} {_reason(err)}"
            ) from None
        created.append(
            f"{kind} {md['name']}" if kind == "Namespace" else f"{kind} {ns}/{md['name']}"
        )
    return created


def _reason(err: client.ApiException) -> str:
    try:
        return str(json.loads(err.body or "{}").get("message") or err.reason)
    except ValueError:
        return str(err.reason)


async def delete_objects(api: client.ApiClient, objects: Sequence[Obj]) -> None:
    """Workloads first, then ComputeDomains, as a user tears a job down (namespaces the
    file created are left to the user's cluster, i.e. deleted with it)."""
    custom, core, batch = (
        client.CustomObjectsApi(api),
        client.CoreV1Api(api),
        client.BatchV1Api(api),
    )
    for kinds in (("Pod", "Job"), (names.KIND_COMPUTE_DOMAIN,)):
        for obj in objects:
            kind, md = obj["kind"], obj["metadata"]
            if kind not in kinds:
                continue
            ns = md.get("namespace") or example.NAMESPACE
            try:
                if kind == "Pod":
                    await call(core.delete_namespaced_pod, md["name"], ns)
                elif kind == "Job":
                    await call(
                        batch.delete_namespaced_job, md["name"], ns, propagation_policy="Background"
                    )
                else:
                    await call(
                        custom.delete_namespaced_custom_object,
                        names.GROUP,
                        names.VERSION,
                        ns,
                        names.PLURAL_COMPUTE_DOMAINS,
                        md["name"],
                    )
            except client.ApiException as err:
                if err.status != 404:
                    raise StepError(f"delete: {kind} {ns}/{md['name']}: {err.status}") from None


async def wait_ready(
    cluster: SimCluster,
    chains: Sequence[EvidenceChain],
    timeout: float,
    on_progress: Callable[[EvidenceChain], None] | None = None,
) -> float:
    """Observe until every chain is complete; seconds from the first CD seen to the last
    chain complete. Raises StepError naming the first missing link at the deadline."""
    assert cluster.admin is not None
    deadline = time.monotonic() + timeout
    while True:
        snap = await _observe(Snapshot.take(cluster.admin, cluster.namespace))
        if snap is None:
            await asyncio.sleep(POLL)
            continue
        now = time.monotonic()
        for chain in chains:
            chain.observe(snap, now)
            if on_progress is not None:
                on_progress(chain)
        if all(c.complete for c in chains):
            return max(c.links[-1].done_at or 0.0 for c in chains)
        if now > deadline:
            chain = next(c for c in chains if not c.complete)
            link = chain.first_missing()
            assert link is not None
            counted = f" ({link.count})" if link.count else ""
            raise StepError(
                f"{link.title}{counted} for ComputeDomain {chain.namespace}/{chain.name}"
                f" not reached within {timeout:.0f}s" + (f": {link.detail}" if link.detail else "")
            )
        await asyncio.sleep(POLL)


async def wait_clean(
    cluster: SimCluster, uids: Sequence[str], namespaces: Sequence[str], timeout: float
) -> list[str]:
    """Poll until nothing of the CDs is left in the API, on the nodes or in processes;
    what is still left at the deadline (empty when clean)."""
    assert cluster.admin is not None
    deadline = time.monotonic() + timeout
    allowed = [p.pid for p in cluster.processes() if p.pid is not None]
    allowed += [
        n.host_imex.process.pid
        for n in cluster.nodes.values()
        if n.host_imex is not None
        and n.host_imex.process is not None
        and n.host_imex.process.pid is not None
    ]
    while True:
        left = await _observe(object_leftovers(cluster.admin, cluster.namespace, uids, namespaces))
        if left is None:
            await asyncio.sleep(POLL)
            continue
        left += cdi_leftovers({n: node.host.cdi_dir for n, node in cluster.nodes.items()})
        left += process_leftovers(cluster.root, allowed)
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(POLL)


async def _observe(reading: Awaitable[T]) -> T | None:
    """One observation; None when the API answered 429 or 5xx or could not be reached (a
    flaky, busy or restarting server: look again next time, as any client would)."""
    try:
        return await reading
    except Exception as err:
        if is_transient(err):
            return None
        raise


@dataclass(frozen=True)
class DemoOptions:
    nodes: int = 4
    cliques: int | None = None
    mode: str = "driverManaged"
    workload: Path | None = None
    root: Path | None = None
    timeout: float = 300.0
    agent_program: Path | None = None
    in_process: bool = False
    control_plane: str = "emulator"
    resource_versions: tuple[str, ...] = ("v1",)


async def run_demo(opts: DemoOptions, progress: TextIO | None = None) -> DemoResult:
    """Everything the `demo` command does; never raises for a failed step."""
    result = DemoResult()
    objects = example.load(opts.workload) if opts.workload else None
    root = opts.root or Path(tempfile.mkdtemp(prefix="cd-sim-", dir="/tmp"))
    spec_kwargs: Obj = {
        "root": root,
        "nodes": opts.nodes,
        "cliques": opts.cliques,
        "mode": opts.mode,
    }
    spec_kwargs["in_process"] = opts.in_process
    spec_kwargs["control_plane"] = opts.control_plane
    spec_kwargs["resource_versions"] = opts.resource_versions
    if opts.agent_program is not None:
        spec_kwargs["agent_program"] = opts.agent_program
    cluster = SimCluster(ClusterSpec(**spec_kwargs))
    say = (lambda text: print(text, file=progress, flush=True)) if progress else (lambda _t: None)
    step = "cluster start"
    try:
        started = time.monotonic()
        await cluster.start()
        layout = cluster.spec.layout()
        result.server_version = cluster.server_version()
        result.cluster = {
            "nodes": len(layout),
            "cliques": cluster.spec.clique_count,
            "mode": opts.mode,
            "controlPlane": opts.control_plane,
            "serverVersion": result.server_version,
            "api": cluster.url,
            "root": str(root),
            "startSeconds": round(time.monotonic() - started, 3),
        }
        say(
            f"cluster up: {len(layout)} nodes, {cluster.spec.clique_count} clique(s), "
            f"{opts.mode}, {opts.control_plane} control plane {result.server_version}, "
            f"API {cluster.url} ({result.cluster['startSeconds']:.1f}s)"
        )
        if objects is None:
            first = [n for n in cluster.nodes.values() if n.host.clique == 1]
            objects = example.builtin(first[0].host.clique_id, len(first))
        step = "apply"
        result.applied = await create_objects(cluster.admin, objects)  # type: ignore[arg-type]
        say("applied: " + ", ".join(result.applied))
        chains = [
            EvidenceChain(
                o["metadata"].get("namespace") or example.NAMESPACE,
                o["metadata"]["name"],
                driver_namespace=cluster.namespace,
                host_managed=cluster.host_managed,
                node_roots={n: node.host.root for n, node in cluster.nodes.items()},
            )
            for o in objects
            if o["kind"] == names.KIND_COMPUTE_DOMAIN
        ]
        result.chains = chains
        step = "wait for ready"
        result.time_to_ready_s = round(await wait_ready(cluster, chains, opts.timeout), 3)
        say(
            f"ready: every workload container sees its channel "
            f"({result.time_to_ready_s:.2f}s after the ComputeDomain was created)"
        )
        step = "cleanup"
        t0 = time.monotonic()
        await delete_objects(cluster.admin, objects)  # type: ignore[arg-type]
        namespaces = sorted(
            {
                o["metadata"].get("namespace") or example.NAMESPACE
                for o in objects
                if o["kind"] in ("Pod", "Job")
            }
        )
        result.leftovers = await wait_clean(cluster, [c.uid for c in chains], namespaces, 120)
        result.cleanup_s = round(time.monotonic() - t0, 3)
        if result.leftovers:
            raise StepError(
                f"cleanup: {result.leftovers[0]}"
                + (f" (+{len(result.leftovers) - 1} more)" if len(result.leftovers) > 1 else "")
            )
        result.ok = True
    except StepError as err:
        result.failed_step = str(err)
    except Exception as err:  # a crash is a failed step too, named as such
        result.failed_step = f"{step}: {type(err).__name__}: {err}"
    finally:
        await cluster.stop()
    if result.ok:
        stray = process_leftovers(root)
        if stray:
            result.ok = False
            result.leftovers = stray
            result.failed_step = f"stop: {stray[0]}"
    result.cluster.setdefault("root", str(root))
    if result.ok and opts.root is None:
        shutil.rmtree(root, ignore_errors=True)  # a failed run keeps its logs for the user
    return result


def render_text(result: DemoResult) -> str:
    """The human-readable report (the README's first section shows one)."""
    lines: list[str] = []
    for chain in result.chains:
        lines.append(f"Evidence chain of ComputeDomain {chain.namespace}/{chain.name}:")
        for link in chain.links:
            when = f"+{link.done_at:6.2f}s" if link.done_at is not None else "   --   "
            mark = "ok  " if link.done_at is not None else "MISSING"
            count = f" [{link.count}]" if link.count else ""
            lines.append(f"  {when}  {mark} {link.title}{count}: {link.detail}".rstrip(": "))
    if result.time_to_ready_s is not None:
        lines.append(f"time to ready: {result.time_to_ready_s:.2f}s")
    if result.cleanup_s is not None and not result.leftovers:
        lines.append(
            f"cleanup: nothing left (objects, node labels, finalizers, CDI files, processes)"
            f" {result.cleanup_s:.2f}s after deletion"
        )
    for item in result.leftovers:
        lines.append(f"left behind: {item}")
    if not result.ok and result.cluster.get("root"):
        root = result.cluster["root"]
        lines.append(f"logs: {root}/nodes/*/pods/<namespace>_<pod>/<container>.log")
    lines.append("PASS" if result.ok else f"FAIL: {result.failed_step}")
    return "\n".join(lines)


def render_json(result: DemoResult) -> str:
    return json.dumps(result.to_dict(), indent=2)
