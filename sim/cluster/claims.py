"""The ResourceClaim controller of kube-controller-manager, for the simulated cluster.

Pods that name a ResourceClaimTemplate get a claim generated from it (owned by the pod,
so the emulator's GC removes it with the pod) and recorded in the pod's
`status.resourceClaimStatuses`, which is where the scheduler and kubelet look it up.
Reservations held by pods that are gone are dropped so the devices can be reused.

As upstream, it reads its informer caches, not the API: the claims a pod owns come from an
owner index over the claim cache plus the claims this controller created and the cache has
not shown yet (upstream's mutation cache), so a claim is never created twice; a reserving
pod missing from the pod cache is looked up live before its reservation goes. Several
workers sync different keys in parallel, one key never twice at once (`WorkQueue`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

from runtime.draclient import DraApi
from runtime.informer import Informer
from runtime.kubecall import call, error_text

log = logging.getLogger(__name__)

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_MERGE_PATCH = "application/merge-patch+json"

CLAIMS = "resourceclaims"
# The workers kube-controller-manager starts for its resourceclaim controller.
WORKERS = 10
RETRY_AFTER = 0.5

K = TypeVar("K", bound=Hashable)
Obj = dict[str, Any]


def _key(obj: dict[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


def _owner(claim: Obj) -> tuple[str, str] | None:
    """(pod uid, pod claim name) of a claim generated for a pod, else None."""
    md = claim.get("metadata") or {}
    pod_claim = (md.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION)
    if not pod_claim:
        return None
    for ref in md.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            return str(ref["uid"]), str(pod_claim)
    return None


def _drop(index: dict[str, dict[str, str]], uid: str, pod_claim: str) -> None:
    mine = index.get(uid)
    if mine is not None:
        mine.pop(pod_claim, None)
        if not mine:
            del index[uid]


class WorkQueue(Generic[K]):
    """client-go's workqueue semantics: an item queued twice is processed once, and an item
    added while a worker has it is processed again after `done`, never concurrently."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()

    def add(self, item: K) -> None:
        if item in self._dirty:
            return
        self._dirty.add(item)
        if item not in self._processing:
            self._queue.put_nowait(item)

    async def get(self) -> K:
        item = await self._queue.get()
        self._dirty.discard(item)
        self._processing.add(item)
        return item

    def done(self, item: K) -> None:
        self._processing.discard(item)
        if item in self._dirty:
            self._queue.put_nowait(item)

    def __len__(self) -> int:
        return len(self._dirty)


class ClaimController:
    """Generates claims from templates and prunes stale reservations; `workers` in parallel."""

    def __init__(
        self, api_client: client.ApiClient, resource_version: str = "v1", workers: int = WORKERS
    ) -> None:
        self._api = api_client
        self._core = client.CoreV1Api(api_client)
        self._dra = DraApi(api_client, resource_version)
        self._queue: WorkQueue[tuple[str, str]] = WorkQueue()
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self.pods: Informer | None = None
        self.claims: Informer | None = None
        # Owner index of the claim cache: pod uid -> pod claim name -> claim name, and the
        # entry each cached claim holds there (to drop it when the claim changes or goes).
        self._owned: dict[str, dict[str, str]] = {}
        self._owner_of: dict[str, tuple[str, str]] = {}
        # Claims this controller created that the cache does not show yet, in the index's
        # shape: consulted with it until the claim's creation is seen.
        self._created: dict[str, dict[str, str]] = {}

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        to_dict = self._api.sanitize_for_serialization
        self.pods = Informer(
            loop,
            self._core.list_pod_for_all_namespaces,
            _key,
            "claims-pods",
            to_dict=to_dict,
            on_change=self._pod_changed,
        )
        self.claims = Informer(
            loop,
            self._dra.lister(CLAIMS),
            _key,
            "claims-claims",
            convert=self._dra.to_v1(CLAIMS),
            on_change=self._claim_changed,
        )
        self.pods.start()
        self.claims.start()
        self._tasks = [
            loop.create_task(self._work(), name=f"claim-controller-{i}")
            for i in range(self._workers)
        ]

    async def stop(self) -> None:
        for informer in (self.pods, self.claims):
            if informer is not None:
                informer.stop()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _pod_changed(self, pod: dict[str, Any]) -> None:
        """A pod event; when the pod is gone, the claims it held need their reservation pruned."""
        key = _key(pod)
        self._queue.add(("pod", key))
        if self.pods is None or self.claims is None or key in self.pods.items:
            return
        uid = (pod.get("metadata") or {}).get("uid")
        self._created.pop(uid or "", None)
        for claim_key, claim in self.claims.items.items():
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if any(r.get("uid") == uid for r in reserved):
                self._queue.add(("claim", claim_key))

    def _claim_changed(self, claim: dict[str, Any]) -> None:
        """Keep the owner index in step with the cache, then sync the claim."""
        assert self.claims is not None
        key = _key(claim)
        old = self._owner_of.pop(key, None)
        if old is not None:
            _drop(self._owned, *old)
        cached = self.claims.items.get(key)
        owner = _owner(cached) if cached is not None else None
        if cached is not None and owner is not None:
            self._owner_of[key] = owner
            self._owned.setdefault(owner[0], {})[owner[1]] = cached["metadata"]["name"]
            _drop(self._created, *owner)  # the cache shows it now
        self._queue.add(("claim", key))

    async def _work(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in (self.pods, self.claims) if i is not None))
        loop = asyncio.get_running_loop()
        while True:
            item = await self._queue.get()
            kind, key = item
            try:
                if kind == "pod":
                    await self._sync_pod(key)
                else:
                    await self._sync_claim(key)
            except Exception as err:
                # Retry later, as a rate-limited workqueue would.
                log.info("claim controller: %s %s: %s; retrying", kind, key, error_text(err))
                loop.call_later(RETRY_AFTER, self._queue.add, item)
            finally:
                self._queue.done(item)

    # --- pods: claims from templates ------------------------------------------------------

    async def _sync_pod(self, key: str) -> None:
        assert self.pods is not None
        pod = self.pods.items.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        md = pod["metadata"]
        namespace, name, uid = md["namespace"], md["name"], md["uid"]
        wanted = [
            c
            for c in (pod.get("spec") or {}).get("resourceClaims") or []
            if c.get("resourceClaimTemplateName")
        ]
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        recorded = {s.get("name") for s in statuses}
        missing = [c for c in wanted if c["name"] not in recorded]
        if not missing:
            return
        owned = self._owned_by(uid)
        for pod_claim in missing:
            claim_name = owned.get(pod_claim["name"])
            if claim_name is None:
                claim_name = await self._create_claim(pod, pod_claim)
                if pod_claim["name"] not in self._owned.get(uid, {}):
                    self._created.setdefault(uid, {})[pod_claim["name"]] = claim_name
            statuses.append({"name": pod_claim["name"], "resourceClaimName": claim_name})
        body = {
            "metadata": {"resourceVersion": md["resourceVersion"]},
            "status": {"resourceClaimStatuses": statuses},
        }
        await call(
            self._core.patch_namespaced_pod_status,
            name,
            namespace,
            body,
            _content_type=_MERGE_PATCH,
        )

    def _owned_by(self, uid: str) -> dict[str, str]:
        """Pod claim name -> name of the claim generated for it, for the pod `uid`: from the
        cache, and the claims created here that the cache does not show yet."""
        return {**self._created.get(uid, {}), **self._owned.get(uid, {})}

    async def _create_claim(self, pod: dict[str, Any], pod_claim: dict[str, Any]) -> str:
        md = pod["metadata"]
        template = await call(
            self._dra.read,
            "resourceclaimtemplates",
            pod_claim["resourceClaimTemplateName"],
            md["namespace"],
        )
        tmd = (template.get("spec") or {}).get("metadata") or {}
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{md['name']}-{pod_claim['name']}-",
                "namespace": md["namespace"],
                "labels": dict(tmd.get("labels") or {}),
                "annotations": {
                    **(tmd.get("annotations") or {}),
                    POD_CLAIM_NAME_ANNOTATION: pod_claim["name"],
                },
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": md["name"],
                        "uid": md["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": (template.get("spec") or {}).get("spec") or {},
        }
        created = await call(self._dra.create, CLAIMS, claim, md["namespace"])
        log.info(
            "created ResourceClaim %s/%s for pod %s",
            md["namespace"],
            created["metadata"]["name"],
            md["name"],
        )
        return created["metadata"]["name"]

    # --- claims: stale reservations ---------------------------------------------------------

    async def _sync_claim(self, key: str) -> None:
        assert self.claims is not None
        claim = self.claims.items.get(key)
        if claim is None:
            return
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        namespace = claim["metadata"]["namespace"]
        valid = []
        for ref in reserved:
            is_pod = ref.get("resource") == "pods" and not ref.get("apiGroup")
            if not is_pod or await self._pod_exists(
                namespace, ref.get("name", ""), ref.get("uid", "")
            ):
                valid.append(ref)
        if len(valid) == len(reserved):
            return
        new_status = {k: v for k, v in status.items() if k != "reservedFor"}
        if valid:
            new_status["reservedFor"] = valid
        else:
            # The last consumer is gone: the devices go back to the pool, as upstream
            # deallocates on the transition from used to unused.
            new_status.pop("allocation", None)
        # A full replace carrying resourceVersion: fails if the claim changed meanwhile.
        body = {**claim, "status": new_status}
        await call(
            self._dra.replace_status,
            CLAIMS,
            claim["metadata"]["name"],
            namespace,
            body,
        )
        log.info("claim %s: removed reservations of deleted pods", key)

    async def _pod_exists(self, namespace: str, name: str, uid: str) -> bool:
        """The pod cache first; a pod it lacks is read live (the cache may lag behind the
        claim that names it: dropping the reservation of a pod being scheduled is wrong)."""
        assert self.pods is not None
        cached = self.pods.items.get(f"{namespace}/{name}")
        if cached is not None and cached["metadata"].get("uid") == uid:
            return True
        try:
            pod = await call(self._core.read_namespaced_pod, name, namespace)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return bool(pod.metadata.uid == uid)
