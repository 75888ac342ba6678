"""The DaemonSet, ReplicaSet, Deployment and Job controllers of kube-controller-manager, for
the simulated cluster.

The driver's controller renders a per-ComputeDomain daemon DaemonSet and expects pods to
follow node labels; tests and demos run Jobs and Deployments as workloads. None of them
exists in the API emulator, which only stores objects, so these actors do the controllers'
part against it through the real `kubernetes` client: list+watch informers wake a single
reconcile worker per controller, and a slow resync catches anything an event missed.

Simplifications (on purpose, documented where they matter): a DaemonSet rolling update
never surges (`maxSurge` counts as 0) and DaemonSets ignore minReadySeconds; a template hash
stands in for ControllerRevisions; ownership is the controller reference alone (no adoption
or release by selector); a Deployment scaled in the middle of a rollout is not scaled
proportionally, and `paused` only stops rollouts; no pod finalizers for Job tracking (counts
come from the pods that exist), no indexed Jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import functools
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client

from runtime.informer import Informer
from runtime.kubecall import call, error_text, status_of
from runtime.nodematch import pod_spec_matches_node, untolerated_taint

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# Taint effects that keep a pod off a node; PreferNoSchedule only steers the scheduler.
# The real DaemonSet controller adds these to every daemon pod (util.AddOrUpdateDaemonPod-
# Tolerations), so node conditions never evict or block a daemon.
_DAEMON_TOLERATIONS: tuple[Obj, ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
_NETWORK_UNAVAILABLE_TOLERATION: Obj = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}
# How long a created pod counts before the pod informer shows it (the real controllers'
# "expectations"): without this, the next reconcile would create a duplicate.
_EXPECTATION_TTL = 30.0


# --- small helpers ---------------------------------------------------------------------------


def _key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace') or ''}/{md.get('name')}"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _controller_ref(obj: Mapping[str, Any], kind: str) -> Obj | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == kind:
            return ref
    return None


def _owner_ref(owner: Mapping[str, Any], api_version: str, kind: str) -> Obj:
    md = owner["metadata"]
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": md["name"],
        "uid": md["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _phase(pod: Mapping[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def _terminating(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or ()
    )


def _oldest_first(pods: Iterable[Obj]) -> list[Obj]:
    return sorted(
        pods,
        key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]),
    )


def _parse_time(value: Any) -> datetime.datetime | None:
    if not value:
        return None
    if isinstance(value, datetime.datetime):
        return value
    try:
        return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _ready_since(pod: Mapping[str, Any]) -> datetime.datetime | None:
    """When the pod's Ready condition last turned True (None if not ready or unknown)."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready" and c.get("status") == "True":
            return _parse_time(c.get("lastTransitionTime"))
    return None


def _available_in(pod: Mapping[str, Any], min_ready: int, now: datetime.datetime) -> float | None:
    """podutil.IsPodAvailable as a delay: 0 if available now, the seconds until it will be
    (ready, but not yet for `min_ready` seconds), None if it is not ready."""
    if not _ready(pod):
        return None
    since = _ready_since(pod)
    if min_ready <= 0:
        return 0.0
    if since is None:
        return None  # IsPodAvailable: no transition time, never available
    return max(0.0, (since - now).total_seconds() + min_ready)


def _pruned(value: Any) -> Any:
    """`value` without null, empty map and empty list fields: what apiequality.Semantic
    treats as equal, and what differs between a listed client model and a watched raw
    object of the same template (`creationTimestamp: null`)."""
    if isinstance(value, dict):
        items = ((k, _pruned(v)) for k, v in value.items())
        return {k: v for k, v in items if v is not None and v != {} and v != []}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def scaled_value(value: Any, total: int, *, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int as it is, `N%` of `total` rounded up or
    down (anything else counts as 0; validation refuses it)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value or "").strip()
    try:
        if not text.endswith("%"):
            return int(text)
        percent = int(text[:-1])
    except ValueError:
        return 0
    return -(-percent * total // 100) if round_up else percent * total // 100


# --- node matching (the DaemonSet controller's NodeShouldRunDaemonPod) -----------------------


def daemon_pod_tolerations(spec: Mapping[str, Any]) -> list[Obj]:
    """The template's tolerations plus the ones the real controller adds to daemon pods."""
    tolerations = [dict(t) for t in spec.get("tolerations") or ()]
    extra = list(_DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        extra.append(_NETWORK_UNAVAILABLE_TOLERATION)
    for t in extra:
        if t not in tolerations:
            tolerations.append(dict(t))
    return tolerations


def node_should_run(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether a daemon pod with this pod spec belongs on the node: nodeSelector, required
    node affinity, and every NoSchedule/NoExecute taint tolerated."""
    if _terminating(node):
        return False
    if not pod_spec_matches_node(spec, node):
        return False
    return untolerated_taint(daemon_pod_tolerations(spec), node) is None


def pin_to_node(spec: Obj, node: str) -> None:
    """The real DaemonSet controller's node pinning: every required node-affinity term
    gets `metadata.name In [node]` as its matchFields (one such term when there is none)."""
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": []}
    )
    pin = [{"key": "metadata.name", "operator": "In", "values": [node]}]
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [dict(t, matchFields=pin) for t in terms]


def target_node(pod: Mapping[str, Any]) -> str:
    """The node a pod is bound to, or (not yet bound) the one it is pinned to; "" if none."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or ():
        for field in term.get("matchFields") or ():
            values = field.get("values") or []
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and values:
                return str(values[0])
    return ""


def _canonical(template: Mapping[str, Any]) -> bytes:
    return json.dumps(_pruned(dict(template)), sort_keys=True, separators=(",", ":")).encode()


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable label value for the template (stands in for the ControllerRevision hash)."""
    return hashlib.sha256(_canonical(template)).hexdigest()[:10]


_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # rand.SafeEncodeString's: no vowels


def pod_template_hash(template: Mapping[str, Any], collision_count: int | None = None) -> str:
    """The `pod-template-hash` of a Deployment's ReplicaSet, shaped as controller.ComputeHash
    makes it: FNV-1a (32 bit) of the template and the collision count, its decimal digits
    written in the safe alphabet. Go hashes a spew dump of the struct, this the template's
    JSON, so the values differ from a real cluster's; what matters is that they are stable,
    and that a collision count changes them."""
    data = _canonical(template)
    if collision_count is not None:
        data += (int(collision_count) & 0xFFFFFFFF).to_bytes(4, "little") + bytes(4)
    digest = 0x811C9DC5
    for byte in data:
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHABET[b % len(_SAFE_ALPHABET)] for b in str(digest).encode())


# --- the shared actor skeleton ---------------------------------------------------------------


class _Controller:
    """Informers that mark keys dirty and one worker that reconciles them one at a time.

    One worker keeps a controller's writes ordered without locks; the resync re-queues every
    owner so that a missed or failed write heals within `resync_seconds`.
    """

    name = "controller"
    owner_kind = ""  # the kind in the controller reference of the pods this one owns
    watches_pods = True

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        resync_seconds: float = 30.0,
        retry_seconds: float = 1.0,
    ) -> None:
        self._client = api_client
        self._core = client.CoreV1Api(api_client)
        self._resync = resync_seconds
        self._retry = retry_seconds
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._informers: list[Informer] = []
        self._task: asyncio.Task[None] | None = None
        # pod key -> (owner key, node name or "", deadline): created, not yet in the cache.
        self._expected: dict[str, tuple[str, str, float]] = {}
        # pod key -> deadline: deleted, still live in the cache. Without these a reconcile
        # before the watch event would count the pod again (and delete one more).
        self._deleting: dict[str, float] = {}
        self.pods: Informer | None = None
        self.owners: Informer | None = None

    # subclasses: the owner kind's list function, and one owner's reconcile
    def _owner_list_fn(self) -> Callable[..., Any]:
        raise NotImplementedError

    def _extra_informers(self, loop: asyncio.AbstractEventLoop) -> list[Informer]:
        return []

    async def _reconcile(self, owner: Obj) -> None:
        raise NotImplementedError

    def _informer(
        self,
        loop: asyncio.AbstractEventLoop,
        list_fn: Callable[..., Any],
        name: str,
        on_change: Callable[[Obj], None],
    ) -> Informer:
        return Informer(
            loop,
            list_fn,
            _key,
            name,
            to_dict=self._client.sanitize_for_serialization,
            on_change=on_change,
        )

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.owners = self._informer(
            loop, self._owner_list_fn(), f"{self.name}-owners", lambda o: self._enqueue(_key(o))
        )
        if self.watches_pods:
            self.pods = self._informer(
                loop, self._core.list_pod_for_all_namespaces, f"{self.name}-pods", self._on_pod
            )
        pods = [self.pods] if self.pods is not None else []
        self._informers = [self.owners, *pods, *self._extra_informers(loop)]
        for informer in self._informers:
            informer.start()
        self._task = loop.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        for informer in self._informers:
            informer.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _enqueue(self, key: str) -> None:
        self._dirty.add(key)
        self._wake.set()

    def _enqueue_after(self, key: str, seconds: float) -> None:
        """Reconcile `key` again in `seconds` (a pod turning available, a deadline)."""
        asyncio.get_running_loop().call_later(max(0.0, seconds), self._enqueue, key)

    def _enqueue_all(self) -> None:
        if self.owners is not None:
            for key in self.owners.items:
                self._enqueue(key)

    def _on_pod(self, pod: Obj) -> None:
        key = _key(pod)
        self._expected.pop(key, None)
        assert self.pods is not None
        cached = self.pods.items.get(key)
        if cached is None or _terminating(cached):
            self._deleting.pop(key, None)
        ref = _controller_ref(pod, self.owner_kind)
        if ref is not None:
            self._enqueue(f"{pod['metadata'].get('namespace') or ''}/{ref.get('name')}")

    def _owned_pods(self, owner: Obj) -> list[Obj]:
        """Live cached pods whose controller reference is this owner (by uid)."""
        assert self.pods is not None
        uid = owner["metadata"]["uid"]
        ns = owner["metadata"].get("namespace")
        return [
            p
            for p in self.pods.items.values()
            if p["metadata"].get("namespace") == ns
            and (_controller_ref(p, self.owner_kind) or {}).get("uid") == uid
        ]

    def _pending(self, owner_key: str) -> list[str]:
        """Nodes (or "") of pods created for the owner that the cache does not show yet."""
        assert self.pods is not None
        now = time.monotonic()
        for key, (_, _, deadline) in list(self._expected.items()):
            if deadline < now or key in self.pods.items:
                del self._expected[key]
        return [node for owner, node, _ in self._expected.values() if owner == owner_key]

    def _alive(self, pod: Obj) -> bool:
        """Neither terminating nor deleted by this controller (as far as the cache lags)."""
        if _terminating(pod):
            return False
        key = _key(pod)
        deadline = self._deleting.get(key)
        if deadline is not None and deadline < time.monotonic():
            del self._deleting[key]
            deadline = None
        return deadline is None

    async def _create_pod(self, owner_key: str, namespace: str, body: Obj, node: str) -> None:
        created = await call(self._core.create_namespaced_pod, namespace, body)
        assert created.metadata is not None
        key = f"{namespace}/{created.metadata.name}"
        assert self.pods is not None
        if key not in self.pods.items:
            self._expected[key] = (owner_key, node, time.monotonic() + _EXPECTATION_TTL)

    async def _delete_pod(self, pod: Obj) -> None:
        md = pod["metadata"]
        try:
            await call(self._core.delete_namespaced_pod, md["name"], md["namespace"])
        except client.ApiException as err:
            if err.status != 404:
                raise
        key = _key(pod)
        cached = self.pods.items.get(key) if self.pods is not None else None
        if cached is not None and not _terminating(cached):
            self._deleting[key] = time.monotonic() + _EXPECTATION_TTL

    async def _run(self) -> None:
        for informer in self._informers:
            await informer.synced.wait()
        self._enqueue_all()
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that races
                # the event being set, and this loop would never stop.
                async with asyncio.timeout(self._resync):
                    await self._wake.wait()
            if not self._wake.is_set():
                self._enqueue_all()  # resync
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            for key in sorted(dirty):
                assert self.owners is not None
                owner = self.owners.items.get(key)
                if owner is None or _terminating(owner):
                    continue  # deleted or going: the emulator's GC removes its pods
                try:
                    await self._reconcile(owner)
                except asyncio.CancelledError:
                    raise
                except Exception as err:
                    if status_of(err) != 409:
                        log.info("%s: reconciling %s failed: %s", self.name, key, error_text(err))
                    loop.call_later(self._retry, self._enqueue, key)


# --- DaemonSet -------------------------------------------------------------------------------


def _revision_of(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get("controller-revision-hash"))


def rolling_deletes(
    wanted: Iterable[str],
    pods_by_node: Mapping[str, list[Obj]],
    revision: str,
    max_unavailable: Any,
) -> list[Obj]:
    """The outdated pods a RollingUpdate without surge deletes now (rollingUpdate in
    https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/controller/daemon/update.go).

    `pods_by_node` holds each node's live pods. A desired node counts as unavailable when it
    has no pod (missing, or its replacement not created yet), two, or an up-to-date pod that
    is not ready; an outdated pod that is not ready is always replaced (it adds nothing to
    availability); ready outdated pods are replaced, in node order, only while fewer than
    `max_unavailable` (an int or a percent of the desired nodes, rounded up; at least 1)
    nodes are unavailable.
    """
    nodes = sorted(set(wanted))
    budget = scaled_value(max_unavailable, len(nodes), round_up=True) or 1
    unavailable = 0
    replace: list[Obj] = []
    candidates: list[Obj] = []
    for node in nodes:
        pods = pods_by_node.get(node) or []
        new = [p for p in pods if _revision_of(p) == revision]
        old = [p for p in pods if _revision_of(p) != revision]
        if len(new) > 1 or len(old) > 1 or bool(new) == bool(old):
            unavailable += 1  # duplicates, or nothing: the manage step handles this node
        elif new:
            unavailable += 0 if _ready(new[0]) else 1
        elif not _ready(old[0]):
            replace.append(old[0])
            unavailable += 1
        elif unavailable < budget:
            candidates.append(old[0])
    room = min(max(0, budget - unavailable), len(candidates))
    return replace + candidates[:room]


class DaemonSetController(_Controller):
    """Keeps exactly one pod of every DaemonSet on each node that should run it.

    As the real controller, it pins each pod to its node with a required node-affinity term
    on `metadata.name` and leaves binding to the scheduler, which is also what allocates the
    pod's ResourceClaims (a pod created with `spec.nodeName` would bypass that).
    Pods whose node stopped matching (a label removed, an untolerated taint) or vanished are
    deleted; a Failed pod is deleted and replaced; a terminating pod blocks its replacement
    until it is gone, as in the real controller. With `updateStrategy` RollingUpdate (the
    default) pods of an older template are deleted, and so replaced, while no more than
    `maxUnavailable` of the desired nodes lack an available pod (`rolling_deletes`);
    `OnDelete` leaves them until someone deletes them.
    """

    name = "daemonset-controller"
    owner_kind = "DaemonSet"

    def __init__(self, api_client: client.ApiClient, **kwargs: Any) -> None:
        super().__init__(api_client, **kwargs)
        self._apps = client.AppsV1Api(api_client)
        self.nodes: Informer | None = None

    def _owner_list_fn(self) -> Callable[..., Any]:
        return self._apps.list_daemon_set_for_all_namespaces

    def _extra_informers(self, loop: asyncio.AbstractEventLoop) -> list[Informer]:
        # Any node change (labels, taints, deletion) may change every DaemonSet's placement.
        self.nodes = self._informer(
            loop, self._core.list_node, f"{self.name}-nodes", lambda _node: self._enqueue_all()
        )
        return [self.nodes]

    def _pod_body(self, ds: Obj, node: str, revision: str) -> Obj:
        template = ds["spec"]["template"]
        tmeta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        pin_to_node(spec, node)
        spec["tolerations"] = daemon_pod_tolerations(spec)
        labels = dict(tmeta.get("labels") or {})
        labels["controller-revision-hash"] = revision
        labels["pod-template-generation"] = str(ds["metadata"].get("generation") or 1)
        metadata: Obj = {
            "generateName": f"{ds['metadata']['name']}-",
            "namespace": ds["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [_owner_ref(ds, "apps/v1", "DaemonSet")],
        }
        if tmeta.get("annotations"):
            metadata["annotations"] = dict(tmeta["annotations"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    async def _reconcile(self, ds: Obj) -> None:
        assert self.nodes is not None
        key = _key(ds)
        spec = (ds["spec"].get("template") or {}).get("spec") or {}
        revision = template_hash(ds["spec"]["template"])
        nodes = {n["metadata"]["name"]: n for n in self.nodes.items.values()}
        wanted = {name for name, node in nodes.items() if node_should_run(spec, node)}

        by_node: dict[str, list[Obj]] = {}
        for pod in self._owned_pods(ds):
            by_node.setdefault(target_node(pod), []).append(pod)
        pending = self._pending(key)

        creates: list[str] = []
        deletes: list[Obj] = []
        for node in sorted(wanted | set(by_node)):
            pods = by_node.get(node, [])
            live = [p for p in pods if self._alive(p)]
            if node not in wanted:
                deletes += live
                continue
            failed = [p for p in live if _phase(p) == "Failed"]
            deletes += failed
            live = [p for p in live if _phase(p) != "Failed"]
            if len(live) > 1:
                deletes += _oldest_first(live)[1:]
            elif not pods and node not in pending:
                # A failed or terminating pod is replaced only once it is gone.
                creates.append(node)

        strategy = ds["spec"].get("updateStrategy") or {}
        if (strategy.get("type") or "RollingUpdate") == "RollingUpdate":
            doomed = {_key(p) for p in deletes}
            current = {
                node: [p for p in pods if self._alive(p) and _key(p) not in doomed]
                for node, pods in by_node.items()
            }
            rolling = strategy.get("rollingUpdate") or {}
            deletes += rolling_deletes(wanted, current, revision, rolling.get("maxUnavailable", 1))

        for pod in deletes:
            await self._delete_pod(pod)
        for node in creates:
            body = self._pod_body(ds, node, revision)
            await self._create_pod(key, ds["metadata"]["namespace"], body, node)

        await self._write_status(ds, wanted, by_node, revision, len(creates))

    async def _write_status(
        self, ds: Obj, wanted: set[str], by_node: dict[str, list[Obj]], revision: str, created: int
    ) -> None:
        def live(node: str) -> list[Obj]:
            return [p for p in by_node.get(node, []) if self._alive(p) and _phase(p) != "Failed"]

        scheduled = {n for n in wanted if live(n)}
        ready = sum(1 for n in scheduled if any(_ready(p) for p in live(n)))
        updated = sum(
            1
            for n in scheduled
            if any(
                (p["metadata"].get("labels") or {}).get("controller-revision-hash") == revision
                for p in live(n)
            )
        )
        desired = len(wanted)
        status: Obj = {
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": len(scheduled) + created,
            "numberMisscheduled": sum(1 for n in by_node if n not in wanted and live(n)),
            "numberReady": ready,
            "numberAvailable": ready,
            "numberUnavailable": desired - ready,
            "updatedNumberScheduled": updated + created,
            "observedGeneration": ds["metadata"].get("generation") or 1,
        }
        old = ds.get("status") or {}
        if all(old.get(k, 0) == v for k, v in status.items()):
            return
        body = copy.deepcopy(ds)
        body["status"] = {**old, **status}
        md = ds["metadata"]
        await call(
            self._apps.replace_namespaced_daemon_set_status, md["name"], md["namespace"], body
        )


# --- ReplicaSet ------------------------------------------------------------------------------

POD_TEMPLATE_HASH = "pod-template-hash"  # apps.DefaultDeploymentUniqueLabelKey
_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}  # podPhaseToOrdinal
# The real controller creates at most `burstReplicas` pods per sync.
_BURST_REPLICAS = 500


def _replicas(obj: Mapping[str, Any]) -> int:
    """`spec.replicas`, 1 when unset (the API server's default; the emulator stores none)."""
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def _status_int(obj: Mapping[str, Any], field: str) -> int:
    return int((obj.get("status") or {}).get(field) or 0)


def _restarts(pod: Mapping[str, Any]) -> tuple[int, int]:
    """maxContainerRestarts: the most restarts of a regular container, then of a sidecar."""
    status = pod.get("status") or {}
    regular = max(
        (int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or ()),
        default=0,
    )
    sidecars = {
        c.get("name")
        for c in (pod.get("spec") or {}).get("initContainers") or ()
        if c.get("restartPolicy") == "Always"
    }
    sidecar = max(
        (
            int(c.get("restartCount") or 0)
            for c in status.get("initContainerStatuses") or ()
            if c.get("name") in sidecars
        ),
        default=0,
    )
    return regular, sidecar


def _log_rank(moment: datetime.datetime | None, now: datetime.datetime) -> int:
    """logarithmicRankDiff's rank of a time: log2 of its age in nanoseconds, -1 if none."""
    if moment is None:
        return -1
    age = (now - moment).total_seconds() * 1e9
    return int(math.log2(age)) if age > 0 else -1


def deletion_order(pods: Iterable[Obj], now: datetime.datetime | None = None) -> list[Obj]:
    """Pods in the order the ReplicaSet controller deletes surplus ones (ActivePodsWithRanks
    in https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/controller/controller_utils.go):
    unscheduled, pending, not ready, low deletion cost, doubled up on a node, ready most
    recently, restarted most, created most recently (ages compared on a log2 scale) first."""
    pods = list(pods)
    now = now or datetime.datetime.now(datetime.UTC)

    def node(p: Obj) -> str:
        return str((p.get("spec") or {}).get("nodeName") or "")

    on_node: dict[str, int] = {}
    for pod in pods:
        on_node[node(pod)] = on_node.get(node(pod), 0) + 1

    def cost(p: Obj) -> int:
        try:
            return int(((p["metadata"].get("annotations") or {}).get(_DELETION_COST)) or 0)
        except ValueError:
            return 0

    def by_time(a: datetime.datetime | None, b: datetime.datetime | None, pa: Obj, pb: Obj) -> int:
        if a == b:
            return 0
        if a is None or b is None:  # afterOrZero: a missing time sorts first
            return -1 if a is None else 1
        diff = _log_rank(a, now) - _log_rank(b, now)
        if diff == 0:
            ua, ub = pa["metadata"].get("uid") or "", pb["metadata"].get("uid") or ""
            return -1 if ua < ub else (1 if ua > ub else 0)
        return -1 if diff < 0 else 1

    def compare(a: Obj, b: Obj) -> int:
        if node(a) != node(b) and not (node(a) and node(b)):
            return -1 if not node(a) else 1
        phase_a, phase_b = _PHASE_ORDER.get(_phase(a), 0), _PHASE_ORDER.get(_phase(b), 0)
        if phase_a != phase_b:
            return -1 if phase_a < phase_b else 1
        if _ready(a) != _ready(b):
            return -1 if not _ready(a) else 1
        if cost(a) != cost(b):
            return -1 if cost(a) < cost(b) else 1
        rank_a, rank_b = on_node[node(a)], on_node[node(b)]
        if rank_a != rank_b:
            return -1 if rank_a > rank_b else 1
        if _ready(a) and _ready(b):
            order = by_time(_ready_since(a), _ready_since(b), a, b)
            if _ready_since(a) != _ready_since(b):
                return order
        restarts_a, restarts_b = _restarts(a), _restarts(b)
        if restarts_a != restarts_b:
            return -1 if restarts_a > restarts_b else 1
        created_a = _parse_time(a["metadata"].get("creationTimestamp"))
        created_b = _parse_time(b["metadata"].get("creationTimestamp"))
        return by_time(created_a, created_b, a, b)

    return sorted(pods, key=functools.cmp_to_key(compare))


class ReplicaSetController(_Controller):
    """Keeps `spec.replicas` live pods of each ReplicaSet, as kube-controller-manager's
    replicaset controller (https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/controller/replicaset/replica_set.go).

    Missing pods are created from the template (named `<replicaset>-<5 random chars>` by
    generateName), surplus ones deleted in `deletion_order`; Failed and Succeeded pods no
    longer count, so they are replaced (and left for the pod GC, as on a cluster). The
    status counts the live pods, those with all template labels, the ready and the
    available ones (ready for minReadySeconds) and the terminating ones; a refused create
    or delete shows as the ReplicaFailure condition.
    """

    name = "replicaset-controller"
    owner_kind = "ReplicaSet"

    def __init__(self, api_client: client.ApiClient, **kwargs: Any) -> None:
        super().__init__(api_client, **kwargs)
        self._apps = client.AppsV1Api(api_client)

    def _owner_list_fn(self) -> Callable[..., Any]:
        return self._apps.list_replica_set_for_all_namespaces

    def _pod_body(self, rs: Obj) -> Obj:
        template = rs["spec"].get("template") or {}
        tmeta = template.get("metadata") or {}
        md = rs["metadata"]
        metadata: Obj = {
            "generateName": f"{md['name']}-",
            "namespace": md["namespace"],
            "labels": dict(tmeta.get("labels") or {}),
            "ownerReferences": [_owner_ref(rs, "apps/v1", "ReplicaSet")],
        }
        for field in ("annotations", "finalizers"):
            if tmeta.get(field):
                metadata[field] = copy.deepcopy(tmeta[field])
        spec = copy.deepcopy(template.get("spec") or {})
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    async def _reconcile(self, rs: Obj) -> None:
        key = _key(rs)
        pods = self._owned_pods(rs)
        active = [p for p in pods if self._alive(p) and _phase(p) not in ("Succeeded", "Failed")]
        terminating = [
            p for p in pods if _terminating(p) and _phase(p) not in ("Succeeded", "Failed")
        ]
        diff = len(active) + len(self._pending(key)) - _replicas(rs)
        failure: Exception | None = None
        try:
            if diff < 0:
                for _ in range(min(-diff, _BURST_REPLICAS)):
                    await self._create_pod(key, rs["metadata"]["namespace"], self._pod_body(rs), "")
            elif diff > 0:
                for pod in deletion_order(active)[:diff]:
                    await self._delete_pod(pod)
        except client.ApiException as err:
            failure = err
        await self._write_status(rs, active, terminating, failure, diff)
        if failure is not None:
            raise failure

    async def _write_status(
        self,
        rs: Obj,
        active: list[Obj],
        terminating: list[Obj],
        failure: Exception | None,
        diff: int,
    ) -> None:
        """calculateStatus in replica_set_utils.go; zero counts are omitted as Go's
        `omitempty` omits them (`replicas` and `terminatingReplicas` always show)."""
        now = datetime.datetime.now(datetime.UTC)
        min_ready = int(rs["spec"].get("minReadySeconds") or 0)
        want = ((rs["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        ready = available = labeled = 0
        wait: float | None = None
        for pod in active:
            labels = pod["metadata"].get("labels") or {}
            labeled += all(labels.get(k) == v for k, v in want.items())
            delay = _available_in(pod, min_ready, now)
            if delay is None:
                continue
            ready += 1
            if delay == 0:
                available += 1
            else:
                wait = delay if wait is None else min(wait, delay)
        if wait is not None:
            self._enqueue_after(_key(rs), wait + 0.05)
        old = rs.get("status") or {}
        counted = ("fullyLabeledReplicas", "readyReplicas", "availableReplicas")
        status: Obj = {k: v for k, v in old.items() if k not in counted}
        status["replicas"] = len(active)
        for field, count in (
            ("fullyLabeledReplicas", labeled),
            ("readyReplicas", ready),
            ("availableReplicas", available),
        ):
            if count:
                status[field] = count
        status["terminatingReplicas"] = len(terminating)
        status["observedGeneration"] = rs["metadata"].get("generation") or 1
        conditions = [c for c in old.get("conditions") or () if c.get("type") != "ReplicaFailure"]
        failed = next(
            (c for c in old.get("conditions") or () if c.get("type") == "ReplicaFailure"), None
        )
        if failure is not None:
            failed = failed or {
                "type": "ReplicaFailure",
                "status": "True",
                "lastTransitionTime": _now(),
                "reason": "FailedCreate" if diff < 0 else "FailedDelete",
                "message": error_text(failure),
            }
            conditions.append(failed)
        if conditions:
            status["conditions"] = conditions
        else:
            status.pop("conditions", None)
        if status == old:
            return
        body = copy.deepcopy(rs)
        body["status"] = status
        md = rs["metadata"]
        await call(
            self._apps.replace_namespaced_replica_set_status, md["name"], md["namespace"], body
        )


# --- Deployment ------------------------------------------------------------------------------

REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
# Deployment annotations a ReplicaSet does not inherit (annotationsToSkip in deployment_util.go).
_NOT_COPIED = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        REVISION,
        "deployment.kubernetes.io/revision-history",
        DESIRED_REPLICAS,
        MAX_REPLICAS,
        "deprecated.deployment.rollback.to",
    }
)
_NO_DEADLINE = 2**31 - 1  # progressDeadlineSeconds: math.MaxInt32 means none
_MERGE_PATCH = "application/merge-patch+json"


def _revision(rs: Mapping[str, Any]) -> int:
    try:
        return int(((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION) or 0)
    except ValueError:
        return 0


def _without_hash(template: Mapping[str, Any]) -> Any:
    t = copy.deepcopy(dict(template))
    ((t.get("metadata") or {}).get("labels") or {}).pop(POD_TEMPLATE_HASH, None)
    return _pruned(t)


def _condition(obj: Mapping[str, Any], kind: str) -> Obj | None:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == kind),
        None,
    )


class _Rollout:
    """A Deployment's spec with the API server's defaults (the emulator stores none):
    1 replica, RollingUpdate with 25% surge and 25% unavailable, 10 old ReplicaSets kept,
    600 s progress deadline."""

    def __init__(self, d: Obj) -> None:
        spec = d.get("spec") or {}
        strategy = spec.get("strategy") or {}
        self.replicas = _replicas(d)
        self.recreate = strategy.get("type") == "Recreate"
        rolling = strategy.get("rollingUpdate") or {}
        surge, unavailable = rolling.get("maxSurge", "25%"), rolling.get("maxUnavailable", "25%")
        # ResolveFenceposts: surge rounds up, unavailability down, and never both 0.
        self.max_surge = 0 if self.recreate else scaled_value(surge, self.replicas, round_up=True)
        self.max_unavailable = 0
        if not self.recreate and self.replicas > 0:
            self.max_unavailable = scaled_value(unavailable, self.replicas, round_up=False)
            if self.max_surge == 0 and self.max_unavailable == 0:
                self.max_unavailable = 1
            self.max_unavailable = min(self.max_unavailable, self.replicas)
        limit = spec.get("revisionHistoryLimit")
        self.history_limit = 10 if limit is None else int(limit)
        deadline = spec.get("progressDeadlineSeconds")
        self.deadline = 600 if deadline is None else int(deadline)
        self.min_ready = int(spec.get("minReadySeconds") or 0)


class DeploymentController(_Controller):
    """Rolls each Deployment out through ReplicaSets, as kube-controller-manager's deployment
    controller (https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/controller/deployment/).

    The ReplicaSet of the current template is `<deployment>-<pod-template-hash>`, the hash
    label on the ReplicaSet, in its selector and on its pods, its revision annotation one
    above the old ones'. RollingUpdate scales it up while the total stays within replicas +
    maxSurge and scales the old ones down while availability stays at replicas -
    maxUnavailable (rolling.go); Recreate scales the old ones to 0 and waits for their pods
    to go first (recreate.go). The status sums the ReplicaSets' and carries the Available
    and Progressing conditions `kubectl rollout status` reads; old ReplicaSets beyond
    revisionHistoryLimit are deleted once a rollout is complete.
    """

    name = "deployment-controller"
    owner_kind = "Deployment"
    watches_pods = False  # Recreate reads its old pods from the ReplicaSets' status

    def __init__(self, api_client: client.ApiClient, **kwargs: Any) -> None:
        super().__init__(api_client, **kwargs)
        self._apps = client.AppsV1Api(api_client)
        self.replicasets: Informer | None = None

    def _owner_list_fn(self) -> Callable[..., Any]:
        return self._apps.list_deployment_for_all_namespaces

    def _extra_informers(self, loop: asyncio.AbstractEventLoop) -> list[Informer]:
        self.replicasets = self._informer(
            loop,
            self._apps.list_replica_set_for_all_namespaces,
            f"{self.name}-replicasets",
            self._on_replica_set,
        )
        return [self.replicasets]

    def _on_replica_set(self, rs: Obj) -> None:
        ref = _controller_ref(rs, "Deployment")
        if ref is not None:
            self._enqueue(f"{rs['metadata'].get('namespace') or ''}/{ref.get('name')}")

    def _owned(self, d: Obj) -> list[Obj]:
        assert self.replicasets is not None
        uid, ns = d["metadata"]["uid"], d["metadata"].get("namespace")
        return sorted(
            (
                rs
                for rs in self.replicasets.items.values()
                if rs["metadata"].get("namespace") == ns
                and (_controller_ref(rs, "Deployment") or {}).get("uid") == uid
            ),
            key=lambda r: (r["metadata"].get("creationTimestamp") or "", r["metadata"]["name"]),
        )

    async def _reconcile(self, d: Obj) -> None:
        selector = d["spec"].get("selector") or {}
        if not (selector.get("matchLabels") or selector.get("matchExpressions")):
            return  # selects everything: the real controller only records an event
        plan = _Rollout(d)
        status = copy.deepcopy(d.get("status") or {})  # conditions change as the sync goes
        rss = {r["metadata"]["name"]: r for r in self._owned(d)}
        template = _without_hash(d["spec"].get("template") or {})
        new = next(
            (r for r in rss.values() if _without_hash(r["spec"].get("template") or {}) == template),
            None,
        )
        _paused_condition(d, plan, status)
        if new is not None and not d["spec"].get("paused"):
            new = await self._refresh_new(d, plan, rss, new)
        if d["spec"].get("paused"):
            pass  # a paused Deployment keeps its ReplicaSets as they are
        elif plan.recreate:
            new = await self._recreate(d, plan, rss, new, status)
        else:
            new = await self._rolling(d, plan, rss, new, status)
        await self._write_status(d, plan, list(rss.values()), new, status)
        if new is not None:  # after the status: this patch changes the resourceVersion
            await self._sync_revision(d, new)

    # -- rollouts

    async def _rolling(
        self, d: Obj, plan: _Rollout, rss: dict[str, Obj], new: Obj | None, status: Obj
    ) -> Obj | None:
        """rolloutRolling: scale the new ReplicaSet up, else the old ones down."""
        if new is None:
            new = await self._create_new(d, plan, rss, status)
            if new is None:
                return None
        elif _replicas(new) > plan.replicas:
            await self._scale(d, plan, rss, new, plan.replicas)
            return rss[new["metadata"]["name"]]
        elif _replicas(new) < plan.replicas:
            want = self._new_replicas(plan, rss, new)
            if want != _replicas(new):
                await self._scale(d, plan, rss, new, want)
                return rss[new["metadata"]["name"]]
        await self._scale_down_old(d, plan, rss, rss[new["metadata"]["name"]])
        return rss[new["metadata"]["name"]]

    def _new_replicas(self, plan: _Rollout, rss: dict[str, Obj], new: Obj) -> int:
        """NewRSNewReplicas: up to replicas + maxSurge pods in all, never above replicas."""
        if plan.recreate:
            return plan.replicas
        total = sum(_replicas(r) for r in rss.values())
        room = plan.replicas + plan.max_surge - total
        if room <= 0:
            return _replicas(new)
        return _replicas(new) + min(room, plan.replicas - _replicas(new))

    async def _scale_down_old(self, d: Obj, plan: _Rollout, rss: dict[str, Obj], new: Obj) -> None:
        """reconcileOldReplicaSets: first the old ReplicaSets' unavailable pods, then
        available ones while the Deployment keeps replicas - maxUnavailable available."""
        name = new["metadata"]["name"]
        old = [r for n, r in rss.items() if n != name and _replicas(r) > 0]
        if not old:
            return
        total = sum(_replicas(r) for r in rss.values())
        min_available = plan.replicas - plan.max_unavailable
        new_unavailable = _replicas(new) - _status_int(new, "availableReplicas")
        budget = total - min_available - new_unavailable
        if budget <= 0:
            return
        cleaned = 0
        for rs in old:
            unhealthy = _replicas(rs) - _status_int(rs, "availableReplicas")
            if cleaned >= budget:
                break
            if unhealthy <= 0:
                continue
            count = min(budget - cleaned, unhealthy)
            await self._scale(d, plan, rss, rs, _replicas(rs) - count)
            cleaned += count
        available = sum(_status_int(r, "availableReplicas") for r in rss.values())
        if available <= min_available:
            return
        room, scaled = available - min_available, 0
        for rs in old:
            current = rss[rs["metadata"]["name"]]
            if scaled >= room:
                break
            if _replicas(current) == 0:
                continue
            count = min(_replicas(current), room - scaled)
            await self._scale(d, plan, rss, current, _replicas(current) - count)
            scaled += count

    async def _recreate(
        self, d: Obj, plan: _Rollout, rss: dict[str, Obj], new: Obj | None, status: Obj
    ) -> Obj | None:
        """rolloutRecreate: old ReplicaSets to 0; once none reports a pod, the new one up."""
        new_name = new["metadata"]["name"] if new is not None else None
        old = [r for n, r in rss.items() if n != new_name]
        scaled = False
        for rs in old:
            if _replicas(rs) > 0:
                await self._scale(d, plan, rss, rs, 0)
                scaled = True
        if scaled:
            return new
        if any(_status_int(r, "replicas") or _status_int(r, "terminatingReplicas") for r in old):
            return new  # oldPodsRunning: wait for them to go
        if new is None:
            return await self._create_new(d, plan, rss, status)
        if _replicas(new) != plan.replicas:
            await self._scale(d, plan, rss, new, plan.replicas)
        return rss[new["metadata"]["name"]]

    # -- writes

    def _replica_annotations(self, plan: _Rollout) -> dict[str, str]:
        return {
            DESIRED_REPLICAS: str(plan.replicas),
            MAX_REPLICAS: str(plan.replicas + plan.max_surge),
        }

    async def _scale(
        self, d: Obj, plan: _Rollout, rss: dict[str, Obj], rs: Obj, replicas: int
    ) -> None:
        """scaleReplicaSet: the new size and the desired/max-replicas annotations, with the
        cached resourceVersion (a stale cache gets 409 and a retry)."""
        body = copy.deepcopy(rs)
        body["spec"]["replicas"] = replicas
        annotations = body["metadata"].setdefault("annotations", {})
        annotations.update(self._replica_annotations(plan))
        md = body["metadata"]
        updated = await call(
            self._apps.replace_namespaced_replica_set, md["name"], md["namespace"], body
        )
        rss[md["name"]] = self._client.sanitize_for_serialization(updated)

    async def _create_new(
        self, d: Obj, plan: _Rollout, rss: dict[str, Obj], status: Obj
    ) -> Obj | None:
        """getNewReplicaSet: `<deployment>-<hash>` with the next revision; a name taken by
        another template bumps `status.collisionCount` (and so the hash) for the next try."""
        md = d["metadata"]
        template = copy.deepcopy(d["spec"].get("template") or {})
        digest = pod_template_hash(template, status.get("collisionCount"))
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), POD_TEMPLATE_HASH: digest}
        selector = copy.deepcopy(d["spec"]["selector"])
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), POD_TEMPLATE_HASH: digest}
        prefix = md["name"][: 253 - 1 - len(digest)]  # generateReplicaSetName
        annotations = {
            k: v for k, v in (md.get("annotations") or {}).items() if k not in _NOT_COPIED
        }
        annotations[REVISION] = str(max((_revision(r) for r in rss.values()), default=0) + 1)
        annotations.update(self._replica_annotations(plan))
        body: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{prefix}-{digest}",
                "namespace": md["namespace"],
                "labels": dict(tmeta["labels"]),
                "annotations": annotations,
                "ownerReferences": [_owner_ref(d, "apps/v1", "Deployment")],
            },
            "spec": {"replicas": 0, "selector": selector, "template": template},
        }
        if plan.min_ready:
            body["spec"]["minReadySeconds"] = plan.min_ready
        name = body["metadata"]["name"]
        body["spec"]["replicas"] = self._new_replicas(plan, {**rss, name: body}, body)
        try:
            created = await call(self._apps.create_namespaced_replica_set, md["namespace"], body)
        except client.ApiException as err:
            if err.status != 409:
                raise
            existing = self._client.sanitize_for_serialization(
                await call(self._apps.read_namespaced_replica_set, name, md["namespace"])
            )
            ours = (_controller_ref(existing, "Deployment") or {}).get("uid") == md["uid"]
            if ours and _without_hash(existing["spec"]["template"]) == _without_hash(template):
                rss[name] = existing  # created by an earlier sync the cache does not show yet
                return existing
            status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
            await self._write_status(d, plan, list(rss.values()), None, status)
            raise
        rss[name] = self._client.sanitize_for_serialization(created)
        message = f'Created new replica set "{name}"'
        _set_condition(status, "Progressing", "True", "NewReplicaSetCreated", message)
        return rss[name]

    async def _refresh_new(self, d: Obj, plan: _Rollout, rss: dict[str, Obj], new: Obj) -> Obj:
        """getNewReplicaSet for an existing one: the Deployment's annotations copied, the
        revision raised above the old ones' (a rollback to an older template), and
        minReadySeconds kept equal to the Deployment's."""
        name = new["metadata"]["name"]
        body = copy.deepcopy(new)
        annotations = body["metadata"].setdefault("annotations", {})
        for k, v in (d["metadata"].get("annotations") or {}).items():
            if k not in _NOT_COPIED:
                annotations[k] = v
        revision = max((_revision(r) for n, r in rss.items() if n != name), default=0) + 1
        if _revision(new) < revision:
            annotations[REVISION] = str(revision)
        body["spec"].pop("minReadySeconds", None)
        if plan.min_ready:  # omitted when 0, as Go's omitempty omits it
            body["spec"]["minReadySeconds"] = plan.min_ready
        if _pruned(body) == _pruned(new):
            return new
        md = body["metadata"]
        updated = await call(
            self._apps.replace_namespaced_replica_set, md["name"], md["namespace"], body
        )
        rss[name] = self._client.sanitize_for_serialization(updated)
        return rss[name]

    async def _sync_revision(self, d: Obj, new: Obj) -> None:
        """The Deployment's revision annotation follows its new ReplicaSet's. The real
        controller sends it with a status update (kube-apiserver's deployments/status takes
        annotation changes); the emulator's status endpoint keeps all metadata, so this is
        a patch of the Deployment itself, which works on both."""
        revision = str(_revision(new))
        if (d["metadata"].get("annotations") or {}).get(REVISION) == revision:
            return
        md = d["metadata"]
        patch = {"metadata": {"annotations": {REVISION: revision}}}
        await call(
            self._apps.patch_namespaced_deployment,
            md["name"],
            md["namespace"],
            patch,
            _content_type=_MERGE_PATCH,
        )

    async def _cleanup(self, d: Obj, plan: _Rollout, old: list[Obj]) -> None:
        """cleanupDeployment: delete the oldest empty ReplicaSets beyond revisionHistoryLimit."""
        alive = sorted((r for r in old if not _terminating(r)), key=_revision)
        for rs in alive[: max(0, len(alive) - plan.history_limit)]:
            generation = rs["metadata"].get("generation") or 0
            if (
                _status_int(rs, "replicas")
                or _replicas(rs)
                or generation > _status_int(rs, "observedGeneration")
            ):
                continue
            md = rs["metadata"]
            with contextlib.suppress(client.ApiException):
                await call(self._apps.delete_namespaced_replica_set, md["name"], md["namespace"])

    async def _write_status(
        self, d: Obj, plan: _Rollout, rss: list[Obj], new: Obj | None, status: Obj
    ) -> None:
        """calculateStatus (sync.go) and syncRolloutStatus (progress.go)."""
        available = sum(_status_int(r, "availableReplicas") for r in rss)
        counts = {
            "observedGeneration": d["metadata"].get("generation") or 1,
            "replicas": sum(_status_int(r, "replicas") for r in rss),
            "updatedReplicas": _status_int(new, "replicas") if new is not None else 0,
            "readyReplicas": sum(_status_int(r, "readyReplicas") for r in rss),
            "availableReplicas": available,
            "unavailableReplicas": max(0, sum(_replicas(r) for r in rss) - available),
        }
        for field, value in counts.items():
            if value:
                status[field] = value
            else:
                status.pop(field, None)  # omitempty
        terminating = [(r.get("status") or {}).get("terminatingReplicas") for r in rss]
        # Never-synced ReplicaSets do not count; a synced one without the field voids the sum.
        synced = [
            t
            for r, t in zip(rss, terminating, strict=True)
            if t is not None or _status_int(r, "observedGeneration")
        ]
        if None in synced:
            status.pop("terminatingReplicas", None)
        else:
            status["terminatingReplicas"] = sum(int(t or 0) for t in synced)

        if available >= plan.replicas - plan.max_unavailable:
            message = "Deployment has minimum availability."
            _set_condition(status, "Available", "True", "MinimumReplicasAvailable", message)
        else:
            message = "Deployment does not have minimum availability."
            _set_condition(status, "Available", "False", "MinimumReplicasUnavailable", message)
        self._progress(d, plan, new, status)
        # The new ReplicaSet's ReplicaFailure first, else any one's (getReplicaFailures).
        owners = ([new] if new is not None else []) + rss
        failure = next((c for r in owners if (c := _condition(r, "ReplicaFailure"))), None)
        if failure is not None:
            _set_condition(
                status,
                "ReplicaFailure",
                failure.get("status", "True"),
                failure.get("reason", ""),
                failure.get("message", ""),
                at=failure.get("lastTransitionTime"),
            )
        else:
            _drop_condition(status, "ReplicaFailure")
        if not status.get("conditions"):
            status.pop("conditions", None)

        complete = _complete(d, plan, status)
        if complete and new is not None and not d["spec"].get("paused"):
            await self._cleanup(d, plan, [r for r in rss if r is not new])
        if status == (d.get("status") or {}):
            return
        body = copy.deepcopy(d)
        body["status"] = status
        md = d["metadata"]
        await call(
            self._apps.replace_namespaced_deployment_status, md["name"], md["namespace"], body
        )

    def _progress(self, d: Obj, plan: _Rollout, new: Obj | None, status: Obj) -> None:
        """The Progressing condition of syncRolloutStatus, and a wake-up at its deadline."""
        if plan.deadline == _NO_DEADLINE:
            _drop_condition(status, "Progressing")
            return
        current = _condition({"status": status}, "Progressing")
        done = (
            status.get("replicas", 0) == status.get("updatedReplicas", 0)
            and current is not None
            and current.get("reason") == "NewReplicaSetAvailable"
        )
        if done or d["spec"].get("paused"):
            return
        if new is not None:
            subject = f'ReplicaSet "{new["metadata"]["name"]}"'
        else:
            subject = f'Deployment "{d["metadata"]["name"]}"'
        if _complete(d, plan, status):
            message = f"{subject} has successfully progressed."
            _set_condition(status, "Progressing", "True", "NewReplicaSetAvailable", message)
        elif _progressed(d.get("status") or {}, status):
            # Progress always refreshes lastUpdateTime (the deadline counts from it).
            since = None
            if current is not None and current.get("status") == "True":
                since = current.get("lastTransitionTime")
            _drop_condition(status, "Progressing")
            message = f"{subject} is progressing."
            _set_condition(status, "Progressing", "True", "ReplicaSetUpdated", message, since=since)
        elif current is not None and current.get("reason") not in (
            "ProgressDeadlineExceeded",
            "NewReplicaSetAvailable",
        ):
            last = _parse_time(current.get("lastUpdateTime"))
            now = datetime.datetime.now(datetime.UTC)
            left = plan.deadline - ((now - last).total_seconds() if last else 0.0)
            if left < 0:
                message = f"{subject} has timed out progressing."
                _set_condition(status, "Progressing", "False", "ProgressDeadlineExceeded", message)
            else:
                self._enqueue_after(_key(d), left + 1)  # requeueStuckDeployment


def _complete(d: Obj, plan: _Rollout, status: Mapping[str, Any]) -> bool:
    """DeploymentComplete: every replica updated and available, the generation observed."""
    return (
        status.get("updatedReplicas", 0) == plan.replicas
        and status.get("replicas", 0) == plan.replicas
        and status.get("availableReplicas", 0) == plan.replicas
        and status.get("observedGeneration", 0) >= (d["metadata"].get("generation") or 1)
    )


def _progressed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """DeploymentProgressing: more updated, ready or available pods, or fewer old ones."""

    def n(status: Mapping[str, Any], field: str) -> int:
        return int(status.get(field) or 0)

    return (
        n(new, "updatedReplicas") > n(old, "updatedReplicas")
        or n(new, "replicas") - n(new, "updatedReplicas")
        < n(old, "replicas") - n(old, "updatedReplicas")
        or n(new, "readyReplicas") > n(old, "readyReplicas")
        or n(new, "availableReplicas") > n(old, "availableReplicas")
    )


def _paused_condition(d: Obj, plan: _Rollout, status: Obj) -> None:
    """checkPausedConditions: Progressing Unknown while paused, and once resumed, so that
    the time spent paused never counts against the progress deadline."""
    if plan.deadline == _NO_DEADLINE:
        return
    current = _condition({"status": status}, "Progressing")
    reason = (current or {}).get("reason")
    if reason == "ProgressDeadlineExceeded":
        return
    if d["spec"].get("paused") and reason != "DeploymentPaused":
        _set_condition(status, "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused")
    elif not d["spec"].get("paused") and reason == "DeploymentPaused":
        message = "Deployment is resumed"
        _set_condition(status, "Progressing", "Unknown", "DeploymentResumed", message)


def _set_condition(
    status: Obj,
    kind: str,
    value: str,
    reason: str,
    message: str,
    *,
    at: str | None = None,
    since: str | None = None,
) -> None:
    """SetDeploymentCondition: unchanged if status and reason are; the transition time kept
    while the status is (or set to `since`); the condition moves to the end of the list."""
    conditions = status.setdefault("conditions", [])
    current = next((c for c in conditions if c.get("type") == kind), None)
    if current is not None and current.get("status") == value and current.get("reason") == reason:
        return
    now = at or _now()
    condition = {
        "type": kind,
        "status": value,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }
    if current is not None and current.get("status") == value:
        condition["lastTransitionTime"] = current.get("lastTransitionTime") or now
    if since:
        condition["lastTransitionTime"] = since
    status["conditions"] = [c for c in conditions if c.get("type") != kind] + [condition]


def _drop_condition(status: Obj, kind: str) -> None:
    if "conditions" in status:
        status["conditions"] = [c for c in status["conditions"] if c.get("type") != kind]


# --- Job -------------------------------------------------------------------------------------


class JobController(_Controller):
    """Runs each Job's pods: up to `parallelism` active at once until `completions` succeed.

    Simplified: `completions` defaults to 1 (the real default for a non-indexed Job also
    finishes on one success), counts come from the pods that exist (no tracking finalizers),
    and more than `backoffLimit` failed pods fail the Job. `suspend` deletes active pods.
    """

    name = "job-controller"
    owner_kind = "Job"

    def __init__(self, api_client: client.ApiClient, **kwargs: Any) -> None:
        super().__init__(api_client, **kwargs)
        self._batch = client.BatchV1Api(api_client)

    def _owner_list_fn(self) -> Callable[..., Any]:
        return self._batch.list_job_for_all_namespaces

    def _pod_body(self, job: Obj) -> Obj:
        template = job["spec"]["template"]
        tmeta = template.get("metadata") or {}
        md = job["metadata"]
        labels = dict(tmeta.get("labels") or {})
        labels |= {
            "job-name": md["name"],
            "batch.kubernetes.io/job-name": md["name"],
            "controller-uid": md["uid"],
            "batch.kubernetes.io/controller-uid": md["uid"],
        }
        metadata: Obj = {
            "generateName": f"{md['name']}-",
            "namespace": md["namespace"],
            "labels": labels,
            "ownerReferences": [_owner_ref(job, "batch/v1", "Job")],
        }
        if tmeta.get("annotations"):
            metadata["annotations"] = dict(tmeta["annotations"])
        spec = copy.deepcopy(template.get("spec") or {})
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    async def _reconcile(self, job: Obj) -> None:
        key = _key(job)
        spec = job["spec"]
        pods = self._owned_pods(job)
        succeeded = sum(1 for p in pods if _phase(p) == "Succeeded")
        failed = sum(1 for p in pods if _phase(p) == "Failed")
        active = _oldest_first(
            p for p in pods if _phase(p) not in ("Succeeded", "Failed") and not _terminating(p)
        )
        parallelism = spec.get("parallelism")
        parallelism = 1 if parallelism is None else int(parallelism)
        completions = int(spec.get("completions") or 1)
        backoff_limit = spec.get("backoffLimit")
        backoff_limit = 6 if backoff_limit is None else int(backoff_limit)

        finished = _condition_true(job, "Complete") or _condition_true(job, "Failed")
        if finished:
            complete, failing = _condition_true(job, "Complete"), _condition_true(job, "Failed")
        else:
            complete = succeeded >= completions
            failing = not complete and failed > backoff_limit
        want = 0
        if not (complete or failing or spec.get("suspend")):
            want = max(0, min(parallelism, completions - succeeded))
        n_active = len(active) + len(self._pending(key))
        created = 0
        if n_active > want:
            excess = min(len(active), n_active - want)
            for pod in active[len(active) - excess :]:  # the newest go first
                await self._delete_pod(pod)
                n_active -= 1
        elif not finished:
            for _ in range(want - n_active):
                await self._create_pod(key, job["metadata"]["namespace"], self._pod_body(job), "")
                created += 1
            n_active += created
        await self._write_status(job, n_active, succeeded, failed, active, complete, failing)

    async def _write_status(
        self,
        job: Obj,
        n_active: int,
        succeeded: int,
        failed: int,
        active: list[Obj],
        complete: bool,
        failing: bool,
    ) -> None:
        old = job.get("status") or {}
        status: Obj = dict(old)
        status |= {
            "active": n_active,
            "succeeded": succeeded,
            "failed": failed,
            "ready": sum(1 for p in active if _ready(p)),
        }
        for field in ("active", "succeeded", "failed", "ready"):
            if status[field] == 0 and field not in old:
                del status[field]  # the real controller omits zero counts
        if not status.get("startTime") and not job["spec"].get("suspend"):
            status["startTime"] = _now()
        conditions = list(old.get("conditions") or [])
        have = {c.get("type") for c in conditions}

        def add(kind: str, reason: str, message: str) -> None:
            if kind not in have:
                now = _now()
                conditions.append(
                    {
                        "type": kind,
                        "status": "True",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": now,
                        "lastTransitionTime": now,
                    }
                )

        if complete:
            add(
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            )
            add("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
            if not status.get("completionTime"):
                status["completionTime"] = _now()
        elif failing:
            add(
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
            add("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        if conditions:
            status["conditions"] = conditions
        if status == old:
            return
        body = copy.deepcopy(job)
        body["status"] = status
        md = job["metadata"]
        await call(self._batch.replace_namespaced_job_status, md["name"], md["namespace"], body)
