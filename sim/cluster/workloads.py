"""The DaemonSet and Job controllers of kube-controller-manager, for the simulated cluster.

The driver's controller renders a per-ComputeDomain daemon DaemonSet and expects pods to
follow node labels; tests and demos run Jobs as workloads. Neither exists in the API
emulator, which only stores objects, so these actors do the controllers' part against it
through the real `kubernetes` client: list+watch informers wake a single reconcile worker
per controller, and a slow resync catches anything an event missed.

Simplifications (on purpose, documented where they matter): no rolling updates (a changed
DaemonSet template applies to new pods only, like `OnDelete`), no pod finalizers for Job
tracking (counts come from the pods that exist), no indexed Jobs, no minReadySeconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client

from api.kube import Informer, call, error_text, status_of
from api.nodematch import pod_spec_matches_node, untolerated_taint

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


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable label value for the template (stands in for the ControllerRevision hash)."""
    blob = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


# --- the shared actor skeleton ---------------------------------------------------------------


class _Controller:
    """Informers that mark keys dirty and one worker that reconciles them one at a time.

    One worker keeps a controller's writes ordered without locks; the resync re-queues every
    owner so that a missed or failed write heals within `resync_seconds`.
    """

    name = "controller"
    owner_kind = ""  # the kind in the controller reference of the pods this one owns

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
        self.pods = self._informer(
            loop, self._core.list_pod_for_all_namespaces, f"{self.name}-pods", self._on_pod
        )
        self._informers = [self.owners, self.pods, *self._extra_informers(loop)]
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

    def _enqueue_all(self) -> None:
        if self.owners is not None:
            for key in self.owners.items:
                self._enqueue(key)

    def _on_pod(self, pod: Obj) -> None:
        self._expected.pop(_key(pod), None)
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

    async def _create_pod(self, owner_key: str, namespace: str, body: Obj, node: str) -> None:
        created = await call(self._core.create_namespaced_pod, namespace, body)
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


class DaemonSetController(_Controller):
    """Keeps exactly one pod of every DaemonSet on each node that should run it.

    As the real controller, it pins each pod to its node with a required node-affinity term
    on `metadata.name` and leaves binding to the scheduler, which is also what allocates the
    pod's ResourceClaims (a pod created with `spec.nodeName` would bypass that).
    Pods whose node stopped matching (a label removed, an untolerated taint) or vanished are
    deleted; a Failed pod is deleted and replaced; a terminating pod blocks its replacement
    until it is gone, as in the real controller.
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
            live = [p for p in pods if not _terminating(p)]
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
            return [
                p for p in by_node.get(node, []) if not _terminating(p) and _phase(p) != "Failed"
            ]

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
