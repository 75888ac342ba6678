"""`compute-domain-sim demo`: the whole driver end to end, with the evidence of each step.

Brings a simulated cluster up, applies a ComputeDomain and its workloads, waits until every
workload container sees its IMEX channel device while recording the evidence chain,
deletes everything, checks nothing is left (objects, labels, finalizers, CDI files,
processes), and reports. Any failure names the step that did not happen.

The evidence is read from watches (`ClusterWatch`: admin informers), not from full LISTs
polled several times a second, so observing costs the cluster little of what it measures.
On the emulator the report also says what each daemon join cost the API server
(`driver_traffic`): the driver's writes and 409 conflicts by component, and the watch
events and bytes streamed to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from kubernetes import client

from api import names
from runtime.draclient import discover
from runtime.informer import Informer
from runtime.kubecall import call, is_transient
from sim.cluster import example
from sim.cluster.cluster import ClusterSpec, SimCluster, new_cluster
from sim.cluster.evidence import EvidenceChain, Snapshot
from sim.cluster.leftovers import cdi_leftovers, object_leftovers, process_leftovers
from sim.progress import Progress

Obj = dict[str, Any]
T = TypeVar("T")
POLL = 0.2
# Watched: the chains are looked at on every change, at most this often (the links read
# from the nodes' files, which no watch reports, at least every POLL).
MIN_GAP = 0.05
WRITES = ("create", "update", "patch", "delete")


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
    # What one daemon join cost the API server (emulator only; None upstream).
    per_join: Obj | None = None
    # Clique entries that went Ready -> NotReady before the domains were ready.
    readiness_flaps: int | None = None

    def to_dict(self) -> Obj:
        return {
            "ok": self.ok,
            "failedStep": self.failed_step,
            "server_version": self.server_version,
            "cluster": self.cluster,
            "applied": self.applied,
            "computeDomains": [c.to_dict() for c in self.chains],
            "time_to_ready_s": self.time_to_ready_s,
            "per_join": self.per_join,
            "readiness_flaps": self.readiness_flaps,
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
    *,
    watch: ClusterWatch | None = None,
) -> float:
    """Observe until every chain is complete; seconds from the first CD seen to the last
    chain complete. Raises StepError naming the first missing link at the deadline. With a
    started `watch`, each observation reads its caches, after a change or POLL; without, it
    takes a Snapshot (six LISTs) every POLL."""
    assert cluster.admin is not None
    deadline = time.monotonic() + timeout
    while True:
        if watch is not None:
            snap = watch.snapshot()
        else:
            snap = await _observe(Snapshot.take(cluster.admin, cluster.namespace))
        if snap is not None:
            now = time.monotonic()
            for chain in chains:
                chain.observe(snap, now)
                if on_progress is not None:
                    on_progress(chain)
            if all(c.complete for c in chains):
                return max(c.links[-1].done_at or 0.0 for c in chains)
        if time.monotonic() > deadline:
            raise _not_ready(chains, timeout)
        if watch is not None:
            await asyncio.sleep(MIN_GAP)
            await watch.changed(POLL - MIN_GAP)
        else:
            await asyncio.sleep(POLL)


def ready_reporter(progress: Progress | None = None) -> Callable[[EvidenceChain], None]:
    """wait_ready's on_progress for a long bring-up: each domain's first missing link with
    its count (`IMEX daemon pods running 37/144`), on stderr at most every few seconds."""
    shown = progress or Progress("waiting for ready")
    latest: dict[str, str] = {}

    def report(chain: EvidenceChain) -> None:
        link = chain.first_missing()
        latest[f"{chain.namespace}/{chain.name}"] = (
            "ready" if link is None else f"{link.title} {link.count}".strip())
        shown.update("; ".join(f"{name}: {text}" for name, text in latest.items()))

    return report


def _not_ready(chains: Sequence[EvidenceChain], timeout: float) -> StepError:
    chain = next(c for c in chains if not c.complete)
    link = chain.first_missing()
    assert link is not None
    counted = f" ({link.count})" if link.count else ""
    return StepError(
        f"{link.title}{counted} for ComputeDomain {chain.namespace}/{chain.name}"
        f" not reached within {timeout:.0f}s" + (f": {link.detail}" if link.detail else "")
    )


def _key(obj: Obj) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


class ReadinessFlaps:
    """Counts clique entries that went from Ready to NotReady: each such flap is a
    readiness change the workloads of that node see and a write on the shared clique."""

    def __init__(self) -> None:
        self.count = 0
        self._last: dict[tuple[str, str], str] = {}

    def observe(self, clique: Obj) -> None:
        name = str((clique.get("metadata") or {}).get("name", ""))
        for entry in clique.get("daemons") or ():
            key, status = (name, str(entry.get("nodeName", ""))), str(entry.get("status", ""))
            if self._last.get(key) == names.STATUS_READY and status != names.STATUS_READY:
                self.count += 1
            self._last[key] = status


class ClusterWatch:
    """What a Snapshot holds, kept by six admin informers (list once, then watch) instead
    of six full LISTs per look: `snapshot()` reads their caches, `changed()` waits. It
    also counts readiness flaps of clique entries (`flaps`)."""

    def __init__(self, api: client.ApiClient, driver_namespace: str) -> None:
        self.api = api
        self.driver_namespace = driver_namespace
        self.informers: dict[str, Informer] = {}
        self.flaps = ReadinessFlaps()
        self._change = asyncio.Event()

    def _on_change(self, source: str, obj: Obj) -> None:
        if source == "cliques":
            self.flaps.observe(obj)
        self._change.set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        dra = await discover(self.api)
        custom, core = client.CustomObjectsApi(self.api), client.CoreV1Api(self.api)
        to_dict = self.api.sanitize_for_serialization

        def cds(**kwargs: Any) -> Any:
            return custom.list_cluster_custom_object(
                names.GROUP, names.VERSION, names.PLURAL_COMPUTE_DOMAINS, **kwargs
            )

        def cliques(**kwargs: Any) -> Any:
            return custom.list_namespaced_custom_object(
                names.GROUP, names.VERSION, self.driver_namespace, names.PLURAL_CLIQUES, **kwargs
            )

        sources: dict[str, tuple[Callable[..., Any], Any, Any]] = {
            "cds": (cds, None, None),
            "templates": (
                dra.lister("resourceclaimtemplates"), None, dra.to_v1("resourceclaimtemplates")
            ),
            "claims": (dra.lister("resourceclaims"), None, dra.to_v1("resourceclaims")),
            "pods": (core.list_pod_for_all_namespaces, to_dict, None),
            "nodes": (core.list_node, to_dict, None),
            "cliques": (cliques, None, None),
        }
        for name, (list_fn, convert_model, convert) in sources.items():
            informer = Informer(
                loop, list_fn, _key, f"demo-{name}", to_dict=convert_model,
                on_change=functools.partial(self._on_change, name), convert=convert,
            )  # fmt: skip
            self.informers[name] = informer
            informer.start()

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def snapshot(self) -> Snapshot | None:
        """The cached objects; None until every informer has listed once."""
        if not all(i.synced.is_set() for i in self.informers.values()):
            return None
        return Snapshot(**{n: list(i.items.values()) for n, i in self.informers.items()})

    async def changed(self, timeout: float) -> None:
        """Return after the next change of any cache (one since the last call counts) or
        after `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._change.wait()
        self._change.clear()


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


# --- what a daemon join costs the API server ----------------------------------------------


async def user_stats(cluster: SimCluster) -> dict[str, dict[str, int]] | None:
    """Requests per user: the emulator's counters (`/_sim/stats` byUser, with the watch
    events and bytes it streamed), or on the upstream control plane kube-apiserver's
    audit log read back (sim/controlplane/audit.py: writes and 409s, no watch figures);
    None when neither is kept."""
    server = cluster.server
    if server is None:
        counted = await asyncio.to_thread(cluster.control_plane.requests_by_user)
        return {user: dict(verbs) for user, verbs in counted.items()} or None
    users: dict[str, dict[str, int]] = await asyncio.to_thread(server.op, "users")
    return users


def driver_traffic(
    before: Mapping[str, Mapping[str, int]],
    after: Mapping[str, Mapping[str, int]],
    accounts: Mapping[str, str],
    namespace: str,
) -> dict[str, dict[str, int]]:
    """role -> writes (create/update/patch/delete, Events aside), writes of Events, 409
    conflicts, and (where the snapshots count them: the emulator's) watch events and watch
    bytes of its ServiceAccount between two byUser snapshots."""
    out: dict[str, dict[str, int]] = {}
    watched = any("watchBytes" in counters for counters in after.values())
    for role, account in accounts.items():
        user = f"system:serviceaccount:{namespace}:{account}"
        a, b = before.get(user, {}), after.get(user, {})

        def delta(counter: str, a: Mapping[str, int] = a, b: Mapping[str, int] = b) -> int:
            return b.get(counter, 0) - a.get(counter, 0)

        out[role] = {
            "writes": sum(delta(v) for v in WRITES) - delta("eventWrites"),
            "eventWrites": delta("eventWrites"),
            "conflicts": delta("conflict"),
        }
        if watched:
            out[role] |= {"watchEvents": delta("watchEvents"), "watchBytes": delta("watchBytes")}
    return out


def per_join(traffic: Mapping[str, Mapping[str, int]], daemons: int) -> Obj:
    """`driver_traffic` divided by the IMEX daemons that joined (one per node of the
    domains): the report's `per_join`, each figure in total and by component."""
    n = max(daemons, 1)

    def figure(counter: str, digits: int | None) -> Obj:
        by_role = {role: round(t[counter] / n, digits) for role, t in traffic.items()}
        total = round(sum(t[counter] for t in traffic.values()) / n, digits)
        return {"total": total, **by_role}

    report = {
        "daemons": daemons,
        "api_writes": figure("writes", 2),
        "event_writes": figure("eventWrites", 2),
        "conflicts": figure("conflicts", 2),
    }
    if all("watchBytes" in t for t in traffic.values()):
        report |= {"watch_events": figure("watchEvents", 1),
                   "watch_bytes": figure("watchBytes", None)}
    return report


def joined_nodes(chains: Sequence[EvidenceChain]) -> int:
    """The nodes the domains' workloads were allocated on: one IMEX daemon each."""
    return sum(
        len({c["node"] for c in chain.link("allocation").data.get("claims", {}).values()})
        for chain in chains
    )


@dataclass(frozen=True)
class DemoOptions:
    nodes: int = 4
    cliques: int | None = None
    mode: str = "driverManaged"
    imex_placement: str = "pod"
    workload: Path | None = None
    root: Path | None = None
    timeout: float = 300.0
    agent_program: Path | None = None
    in_process: bool = False
    control_plane: str = "emulator"
    resource_versions: tuple[str, ...] = ("v1",)
    kubelet: str = "sim"
    sim_workers: int = 1  # in-process mode: worker processes the nodes run in


def _imex_where(opts: DemoOptions) -> str:
    """Where the demo's IMEX runs, for its first line: a host-managed domain's IMEX is the
    host's own nvidia-imex service, whatever the placement of driver-managed ones."""
    if opts.mode == "hostManaged":
        return "IMEX on the host"
    return f"IMEX in the {opts.imex_placement}"


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
        "imex_placement": opts.imex_placement,
    }
    spec_kwargs["in_process"] = opts.in_process
    spec_kwargs["control_plane"] = opts.control_plane
    spec_kwargs["resource_versions"] = opts.resource_versions
    spec_kwargs["kubelet"] = opts.kubelet
    spec_kwargs["sim_workers"] = opts.sim_workers
    if opts.agent_program is not None:
        spec_kwargs["agent_program"] = opts.agent_program
    cluster = new_cluster(ClusterSpec(**spec_kwargs))
    cluster.on_progress = Progress("cluster start").update
    watch: ClusterWatch | None = None
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
            "imexPlacement": opts.imex_placement,
            "controlPlane": opts.control_plane,
            "serverVersion": result.server_version,
            "api": cluster.url,
            "root": str(root),
            "startSeconds": round(time.monotonic() - started, 3),
        }
        say(
            f"cluster up: {len(layout)} nodes, {cluster.spec.clique_count} clique(s), "
            f"{opts.mode} ({_imex_where(opts)}), {opts.control_plane} control "
            f"plane {result.server_version}, "
            f"API {cluster.url} ({result.cluster['startSeconds']:.1f}s)"
        )
        if objects is None:
            # One domain over every fabric node, one workload pod per node: with several
            # cliques, the domain spans them (what a multi-rack job asks for).
            fabric = [n for n in cluster.nodes.values() if n.host.clique is not None]
            cliques = sorted({n.host.clique_id for n in fabric})
            objects = example.builtin(cliques, len(fabric))
        step = "apply"
        assert cluster.admin is not None
        watch = ClusterWatch(cluster.admin, cluster.namespace)
        await watch.start()
        before = await user_stats(cluster)
        result.applied = await create_objects(cluster.admin, objects)
        say("applied: " + ", ".join(result.applied))
        chains = [
            EvidenceChain(
                o["metadata"].get("namespace") or example.NAMESPACE,
                o["metadata"]["name"],
                driver_namespace=cluster.namespace,
                host_managed=cluster.host_managed,
                node_roots={n: node.host.root for n, node in cluster.nodes.items()},
                agent_placement=opts.imex_placement == "agent",
            )
            for o in objects
            if o["kind"] == names.KIND_COMPUTE_DOMAIN
        ]
        result.chains = chains
        step = "wait for ready"
        result.time_to_ready_s = round(
            await wait_ready(cluster, chains, opts.timeout, ready_reporter(), watch=watch), 3
        )
        result.readiness_flaps = watch.flaps.count
        after = await user_stats(cluster)
        if before is not None and after is not None:
            traffic = driver_traffic(before, after, cluster.accounts, cluster.namespace)
            result.per_join = per_join(traffic, joined_nodes(chains))
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
        if watch is not None:
            watch.stop()
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
    if result.per_join is not None:
        lines.append(_render_join(result.per_join))
    if result.readiness_flaps is not None:
        lines.append(f"readiness flaps (Ready -> NotReady) until ready: {result.readiness_flaps}")
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


def _render_join(join: Obj) -> str:
    writes, conflicts = join["api_writes"], join["conflicts"]
    parts = ", ".join(f"{k} {v}" for k, v in writes.items() if k != "total")
    watched = (
        f", {join['watch_events']['total']} watch events"
        f" / {join['watch_bytes']['total'] / 1024:.1f} KiB streamed to the driver"
        if "watch_bytes" in join else ""
    )
    return (
        f"per daemon join ({join['daemons']}): {writes['total']} driver API writes ({parts})"
        f" and {join['event_writes']['total']} of Events,"
        f" {conflicts['total']} conflicts{watched}"
    )


def render_json(result: DemoResult) -> str:
    return json.dumps(result.to_dict(), indent=2)
