"""The ResourceClaim controller of kube-controller-manager, for the simulated cluster.

Pods that name a ResourceClaimTemplate get a claim generated from it (owned by the pod,
so the emulator's GC removes it with the pod) and recorded in the pod's
`status.resourceClaimStatuses`, which is where the scheduler and kubelet look it up.
Reservations held by pods that are gone are dropped so the devices can be reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from api.draclient import DraApi
from api.kube import Informer, call, error_text

log = logging.getLogger(__name__)

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_MERGE_PATCH = "application/merge-patch+json"


CLAIMS = "resourceclaims"


def _key(obj: dict[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


class ClaimController:
    """Generates claims from templates and prunes stale reservations; one worker queue."""

    def __init__(self, api_client: client.ApiClient, resource_version: str = "v1") -> None:
        self._api = api_client
        self._core = client.CoreV1Api(api_client)
        self._dra = DraApi(api_client, resource_version)
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._queued: set[tuple[str, str]] = set()
        self._task: asyncio.Task[None] | None = None
        self.pods: Informer | None = None
        self.claims: Informer | None = None

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
            on_change=lambda o: self._enqueue("claim", _key(o)),
        )
        self.pods.start()
        self.claims.start()
        self._task = loop.create_task(self._work(), name="claim-controller")

    async def stop(self) -> None:
        for informer in (self.pods, self.claims):
            if informer is not None:
                informer.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _pod_changed(self, pod: dict[str, Any]) -> None:
        """A pod event; when the pod is gone, the claims it held need their reservation pruned."""
        key = _key(pod)
        self._enqueue("pod", key)
        if self.pods is None or self.claims is None or key in self.pods.items:
            return
        uid = (pod.get("metadata") or {}).get("uid")
        for claim_key, claim in self.claims.items.items():
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if any(r.get("uid") == uid for r in reserved):
                self._enqueue("claim", claim_key)

    def _enqueue(self, kind: str, key: str) -> None:
        if (kind, key) not in self._queued:
            self._queued.add((kind, key))
            self._queue.put_nowait((kind, key))

    async def _work(self) -> None:
        while True:
            kind, key = await self._queue.get()
            self._queued.discard((kind, key))
            try:
                if kind == "pod":
                    await self._sync_pod(key)
                else:
                    await self._sync_claim(key)
            except Exception as err:
                # Retry later, as a rate-limited workqueue would.
                log.info("claim controller: %s %s: %s; retrying", kind, key, error_text(err))
                asyncio.get_running_loop().call_later(0.5, self._enqueue, kind, key)

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
        # A fresh listing, not the cache: a claim created just before a crash or a failed
        # status write must be found again, never duplicated.
        existing = await call(self._dra.list, CLAIMS, namespace)
        owned: dict[str, str] = {}
        for claim in existing["items"]:
            cmd = claim["metadata"]
            if any(
                ref.get("uid") == uid and ref.get("controller")
                for ref in cmd.get("ownerReferences") or []
            ):
                pod_claim = (cmd.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION)
                if pod_claim:
                    owned[pod_claim] = cmd["name"]
        for pod_claim in missing:
            claim_name = owned.get(pod_claim["name"]) or await self._create_claim(pod, pod_claim)
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
        """A live read: the pod cache may lag behind the claim that names the pod."""
        try:
            pod = await call(self._core.read_namespaced_pod, name, namespace)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return pod.metadata.uid == uid
