"""A DRA-aware kube-scheduler for the simulated cluster.

Pods without `spec.nodeName` are placed on the first node (by name; with preferred pod
anti-affinity on hostname, the least matched weight first) that passes the node filters
(nodeSelector, required node affinity, taints) and on which every request
of every claim the pod uses can get a free device matching its DeviceClass. Allocations
and reservations go through `resourceclaims/status` as the real scheduler writes them, so
the driver's node agent sees exactly what it would see in a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from runtime.draclient import DraApi
from runtime.informer import Informer
from runtime.kubecall import call
from runtime.nodematch import node_selector_matches, pod_spec_matches_node, untolerated_taint
from sim.cluster.cel import SelectorEvaluator
from sim.cluster.podaffinity import anti_affinity_penalty, has_preferred_anti_affinity

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
_MERGE_PATCH = "application/merge-patch+json"
_REASON_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
_REASON_CLAIMS = "node(s) cannot allocate all claims"
_REASON_ALLOCATED = "node(s) unavailable for allocated claim"
_REASON_PODS = "Too many pods"  # NodeResourcesFit: allocatable pods used up (or none)

Obj = dict[str, Any]
DeviceId = tuple[str, str, str]  # driver, pool, device


def _key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    return f"{ns}/{md.get('name', '')}" if ns else md.get("name", "")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class UnschedulableError(Exception):
    """The pod cannot be placed right now; the message is what kube-scheduler reports."""


class NotReadyError(Exception):
    """The pod waits for something another actor does (e.g. its claim being created)."""


# --- node filters ----------------------------------------------------------------------


def _allocatable_pods(node: Mapping[str, Any]) -> int:
    """How many pods the node takes: a Node without allocatable (no kubelet reported it)
    takes none."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get("pods")
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _taint_reason(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    shown = f"{taint.get('key')}: {value}" if value else taint.get("key")
    return f"node(s) had untolerated taint {{{shown}}}"


def _message(total: int, reasons: Iterable[str]) -> str:
    """kube-scheduler's `0/N nodes are available: ...` with per-reason node counts."""
    counts = Counter(reasons)
    parts = sorted(f"{n} {reason}" for reason, n in counts.items())
    return f"0/{total} nodes are available: {', '.join(parts)}."


def _allocated_devices(claim: Mapping[str, Any]) -> list[DeviceId]:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return [(r.get("driver", ""), r.get("pool", ""), r.get("device", "")) for r in results]


def _request_class(request: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The exact request body (v1 `exactly`, or the older flat form) and its class name."""
    body = request.get("exactly") if isinstance(request.get("exactly"), Mapping) else request
    return body, body.get("deviceClassName", "")


# --- the scheduler -----------------------------------------------------------------------


class Scheduler:
    """Event-driven scheduling loop with a periodic retry for pending pods."""

    def __init__(self, api_client: client.ApiClient, retry_seconds: float = 1.0,
                 resource_version: str = "v1") -> None:  # fmt: skip
        self._api = api_client
        self._core = client.CoreV1Api(api_client)
        self._dra = DraApi(api_client, resource_version)
        self._retry = retry_seconds
        self._cel = SelectorEvaluator()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._informers: dict[str, Informer] = {}
        # Claims we wrote, used until the claim cache catches up (the "assume cache").
        self._assumed: dict[str, Obj] = {}
        # pod uid -> last FailedScheduling message, so each distinct message is sent once.
        self._reported: dict[str, str] = {}
        # pod key -> node the scheduler placed it on (written even if the bind is refused).
        self.assigned: dict[str, str] = {}
        # pod keys whose binding the API refused (logged once each).
        self.bind_refused: set[str] = set()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        to_dict = self._api.sanitize_for_serialization
        # name -> (list call, conversion of each object to the shapes this code reads)
        dra = {"slices": "resourceslices", "claims": "resourceclaims", "classes": "deviceclasses"}
        sources: dict[str, tuple[Any, Any]] = {
            "pods": (self._core.list_pod_for_all_namespaces, None),
            "nodes": (self._core.list_node, None),
            **{n: (self._dra.lister(p), self._dra.to_v1(p)) for n, p in dra.items()},
        }
        for name, (list_fn, convert) in sources.items():
            informer = Informer(
                loop,
                list_fn,
                _key,
                f"scheduler-{name}",
                to_dict=to_dict,
                on_change=self._claim_changed if name == "claims" else self._changed,
                convert=convert,
            )
            self._informers[name] = informer
            informer.start()
        self._task = loop.create_task(self._run(), name="scheduler")

    def _changed(self, _obj: Obj) -> None:
        self._wake.set()

    def _claim_changed(self, claim: Obj) -> None:
        """A deleted claim must not live on in the assume cache, holding its devices."""
        key = _key(claim)
        if key not in self._items("claims"):
            self._assumed.pop(key, None)
        self._wake.set()

    async def stop(self) -> None:
        for informer in self._informers.values():
            informer.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _items(self, name: str) -> dict[str, Obj]:
        return self._informers[name].items

    async def _run(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self._informers.values()))
        while True:
            self._wake.clear()
            try:
                await self.schedule_pending()
            except Exception:
                log.exception("scheduling round failed; retrying")
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that races
                # the event being set, and this loop would never stop.
                async with asyncio.timeout(self._retry):
                    await self._wake.wait()

    async def schedule_pending(self) -> None:
        """One pass over pending pods, in name order."""
        pods = self._items("pods")
        live = {p["metadata"].get("uid") for p in pods.values()}
        for uid in [u for u in self._reported if u not in live]:
            del self._reported[uid]
        for key in [k for k in self.assigned if k not in pods]:
            self.assigned.pop(key, None)
            self.bind_refused.discard(key)
        for key in sorted(pods):
            pod = pods[key]
            spec = pod.get("spec") or {}
            if spec.get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            if (spec.get("schedulerName") or SCHEDULER_NAME) != SCHEDULER_NAME:
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            try:
                await self._schedule(pod)
            except NotReadyError as why:
                log.debug("pod %s waits: %s", key, why)
            except UnschedulableError as why:
                await self._report_unschedulable(pod, str(why))
            except ApiException as err:
                # Most often a conflict with a concurrent writer: the next round retries.
                log.info("pod %s: scheduling write failed (%s %s)", key, err.status, err.reason)

    # --- claims ----------------------------------------------------------------------------

    def _claim(self, key: str) -> Obj | None:
        cached = self._items("claims").get(key)
        assumed = self._assumed.get(key)
        if assumed is None:
            return cached
        if cached is not None and _newer_or_same(cached, assumed):
            del self._assumed[key]
            return cached
        return assumed

    def _all_claims(self) -> dict[str, Obj]:
        keys = set(self._items("claims")) | set(self._assumed)
        return {k: c for k in keys if (c := self._claim(k)) is not None}

    def _pod_claims(self, pod: Mapping[str, Any]) -> list[Obj]:
        ns = pod["metadata"]["namespace"]
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        out = []
        for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
            if ref.get("resourceClaimName"):
                name = ref["resourceClaimName"]
            elif ref.get("resourceClaimTemplateName"):
                if ref["name"] not in statuses:
                    raise NotReadyError(f"claim for {ref['name']!r} not created yet")
                name = statuses[ref["name"]]
                if not name:
                    continue  # the controller decided no claim is needed
            else:
                continue
            claim = self._claim(f"{ns}/{name}")
            if claim is None:
                # Usually the claim cache lagging behind the pod's status: wait for it.
                raise NotReadyError(f"resourceclaim {name!r} not found")
            if claim["metadata"].get("deletionTimestamp"):
                raise UnschedulableError(
                    f"0/{len(self._items('nodes'))} nodes are available: "
                    f'resourceclaim "{name}" is being deleted.'
                )
            out.append(claim)
        return out

    # --- devices ---------------------------------------------------------------------------

    def _node_devices(self, node: str) -> list[tuple[str, str, Obj]]:
        """(driver, pool, device) of the current pool generation on this node."""
        slices = [
            s
            for s in self._items("slices").values()
            if (s.get("spec") or {}).get("nodeName") == node
        ]
        newest: dict[tuple[str, str], int] = {}
        for s in slices:
            spec = s["spec"]
            pool = spec.get("pool") or {}
            pk = (spec.get("driver", ""), pool.get("name", ""))
            newest[pk] = max(newest.get(pk, 0), int(pool.get("generation", 0)))
        out = []
        for s in sorted(slices, key=lambda s: s["metadata"]["name"]):
            spec = s["spec"]
            pool = spec.get("pool") or {}
            pk = (spec.get("driver", ""), pool.get("name", ""))
            if int(pool.get("generation", 0)) != newest[pk]:
                continue
            out += [(pk[0], pk[1], d) for d in spec.get("devices") or []]
        return out

    def _device_fits(self, driver: str, device: Obj, cls: Obj, request: Mapping[str, Any]) -> bool:
        selectors = [
            *((cls.get("spec") or {}).get("selectors") or []),
            *(request.get("selectors") or []),
        ]
        for sel in selectors:
            expr = (sel.get("cel") or {}).get("expression")
            if expr and not self._cel.selector_matches(expr, driver, device):
                return False
        return True

    def _allocate_on(
        self, node: str, claims: list[Obj], in_use: set[DeviceId]
    ) -> dict[str, list[Obj]] | None:
        """claim key -> allocation results on `node`, or None if any request cannot be met."""
        devices = self._node_devices(node)
        taken = set(in_use)
        plan: dict[str, list[Obj]] = {}
        for claim in claims:
            results = []
            for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                body, class_name = _request_class(request)
                cls = self._items("classes")[class_name]  # checked beforehand
                if (body.get("allocationMode") or "ExactCount") != "ExactCount":
                    return None  # allocationMode All is not simulated
                for _ in range(int(body.get("count") or 1)):
                    pick = next(
                        (
                            (drv, pool, dev)
                            for drv, pool, dev in devices
                            if (drv, pool, dev.get("name", "")) not in taken
                            and self._device_fits(drv, dev, cls, body)
                        ),
                        None,
                    )
                    if pick is None:
                        return None
                    drv, pool, dev = pick
                    taken.add((drv, pool, dev["name"]))
                    results.append(
                        {
                            "request": request["name"],
                            "driver": drv,
                            "pool": pool,
                            "device": dev["name"],
                        }
                    )
            plan[_key(claim)] = results
        return plan

    # --- one pod ---------------------------------------------------------------------------

    async def _schedule(self, pod: Obj) -> None:
        claims = self._pod_claims(pod)
        nodes = [self._items("nodes")[k] for k in sorted(self._items("nodes"))]
        allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
        pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        classes = self._items("classes")
        for claim in pending:
            for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                _, class_name = _request_class(request)
                if class_name not in classes:
                    raise UnschedulableError(
                        f"0/{len(nodes)} nodes are available: claim {claim['metadata']['name']}, "
                        f"request {request.get('name')}: device class {class_name} does not "
                        "exist."
                    )
        if not nodes:
            raise UnschedulableError("0/0 nodes are available.")
        pending_keys = {_key(c) for c in pending}
        in_use = {
            dev
            for key, claim in self._all_claims().items()
            if key not in pending_keys
            for dev in _allocated_devices(claim)
        }
        reasons: list[str] = []
        bound: dict[str, int] = {}
        for other in self._items("pods").values():
            where = (other.get("spec") or {}).get("nodeName")
            if where:
                bound[where] = bound.get(where, 0) + 1
        if has_preferred_anti_affinity(pod):
            placed = self._placed(pod)
            nodes.sort(key=lambda n: anti_affinity_penalty(pod, n["metadata"]["name"], placed))
        for node in nodes:
            name = node["metadata"]["name"]
            if not pod_spec_matches_node(pod.get("spec") or {}, node):
                reasons.append(_REASON_SELECTOR)
                continue
            if bound.get(name, 0) >= _allocatable_pods(node):
                reasons.append(_REASON_PODS)
                continue
            taint = untolerated_taint((pod.get("spec") or {}).get("tolerations") or [], node)
            if taint is not None:
                reasons.append(_taint_reason(taint))
                continue
            if not all(
                node_selector_matches(c["status"]["allocation"].get("nodeSelector"), node)
                for c in allocated
            ):
                reasons.append(_REASON_ALLOCATED)
                continue
            plan = self._allocate_on(name, pending, in_use)
            if plan is None:
                reasons.append(_REASON_CLAIMS)
                continue
            await self._commit(pod, name, claims, plan)
            return
        raise UnschedulableError(_message(len(nodes), reasons))

    def _placed(self, pod: Obj) -> list[tuple[Obj, str]]:
        """Live pods other than `pod` with their nodes, this scheduler's own placements
        included before the pod cache shows them (as kube-scheduler's assumed pods)."""
        placed = []
        for key, other in self._items("pods").items():
            where = (other.get("spec") or {}).get("nodeName") or self.assigned.get(key)
            if (where and other["metadata"].get("uid") != pod["metadata"].get("uid")
                    and (other.get("status") or {}).get("phase") not in ("Succeeded", "Failed")):
                placed.append((other, where))
        return placed

    def _allocation(self, claim: Obj, node: str, results: list[Obj]) -> Obj:
        config: list[Obj] = []
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            _, class_name = _request_class(request)
            for entry in (self._items("classes")[class_name].get("spec") or {}).get("config") or []:
                config.append({**entry, "source": "FromClass", "requests": [request["name"]]})
        for entry in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
            config.append({**entry, "source": "FromClaim"})
        devices: Obj = {"results": results}
        if config:
            devices["config"] = config
        return {
            "devices": devices,
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }

    async def _commit(
        self, pod: Obj, node: str, claims: list[Obj], plan: dict[str, list[Obj]]
    ) -> None:
        md = pod["metadata"]
        consumer = {"resource": "pods", "name": md["name"], "uid": md["uid"]}
        for claim in claims:
            key = _key(claim)
            status = dict(claim.get("status") or {})
            reserved = list(status.get("reservedFor") or [])
            if key in plan:
                status["allocation"] = self._allocation(claim, node, plan[key])
            if not any(r.get("uid") == md["uid"] for r in reserved):
                reserved.append(consumer)
            elif key not in plan:
                continue  # already allocated and reserved for this pod
            status["reservedFor"] = reserved
            written = await call(
                self._dra.replace_status,
                "resourceclaims",
                claim["metadata"]["name"],
                claim["metadata"]["namespace"],
                {**claim, "status": status},
            )
            self._assumed[key] = written
        self.assigned[_key(pod)] = node
        await self._bind(pod, node)

    async def _bind(self, pod: Obj, node: str) -> None:
        """pods/binding as kube-scheduler does; a spec.nodeName patch where that is missing."""
        md = pod["metadata"]
        key = _key(pod)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": md["name"], "namespace": md["namespace"], "uid": md["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        errors = []
        try:
            await call(
                self._core.create_namespaced_pod_binding,
                md["name"],
                md["namespace"],
                binding,
                _preload_content=False,
            )
            log.info("bound pod %s to %s", key, node)
            return
        except ApiException as err:
            if err.status != 404:
                raise
            errors.append(f"pods/binding: {err.status}")
        try:
            await call(
                self._core.patch_namespaced_pod,
                md["name"],
                md["namespace"],
                {
                    "metadata": {"resourceVersion": md["resourceVersion"]},
                    "spec": {"nodeName": node},
                },
                _content_type=_MERGE_PATCH,
            )
            log.info("bound pod %s to %s (spec.nodeName)", key, node)
            return
        except ApiException as err:
            if err.status not in (400, 403, 422):
                raise
            errors.append(f"spec.nodeName patch: {err.status} {err.reason}")
        if key not in self.bind_refused:
            self.bind_refused.add(key)
            log.warning(
                "pod %s: the API refuses to bind it to %s (%s)", key, node, "; ".join(errors)
            )

    async def _report_unschedulable(self, pod: Obj, message: str) -> None:
        md = pod["metadata"]
        conditions = list((pod.get("status") or {}).get("conditions") or [])
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if not (
            current
            and current.get("status") == "False"
            and current.get("reason") == "Unschedulable"
            and current.get("message") == message
        ):
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": _now(),
            }
            conditions = [c for c in conditions if c.get("type") != "PodScheduled"] + [condition]
            await call(
                self._core.patch_namespaced_pod_status,
                md["name"],
                md["namespace"],
                {
                    "metadata": {"resourceVersion": md["resourceVersion"]},
                    "status": {"conditions": conditions},
                },
                _content_type=_MERGE_PATCH,
            )
        if self._reported.get(md["uid"]) == message:
            return
        now = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            # Named as client-go's recorder names events: <object>.<unique hex>.
            "metadata": {"name": f"{md['name']}.{time.time_ns():x}", "namespace": md["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": md["name"],
                "namespace": md["namespace"],
                "uid": md["uid"],
                "resourceVersion": md.get("resourceVersion"),
            },
            "reason": "FailedScheduling",
            "message": message,
            "type": "Warning",
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": SCHEDULER_NAME},
            "reportingComponent": SCHEDULER_NAME,
            "reportingInstance": SCHEDULER_NAME,
        }
        await call(self._core.create_namespaced_event, md["namespace"], event)
        self._reported[md["uid"]] = message
        log.info("pod %s unschedulable: %s", _key(pod), message)


def _newer_or_same(cached: Obj, assumed: Obj) -> bool:
    """Whether the cache has caught up with an object we wrote."""
    a = cached["metadata"].get("resourceVersion", "")
    b = assumed["metadata"].get("resourceVersion", "")
    try:
        return int(a) >= int(b)
    except ValueError:
        return a == b
