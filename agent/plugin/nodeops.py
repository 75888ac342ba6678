"""The API writes the plugin makes about its own node: claims, the CD label, the clique label.

Every write is idempotent, and a 409 re-reads the object and tries again at once (with a
little jitter) instead of backing off on a stale copy. Prepare's label write starts from the
Node as the agent's watch last saw it, conditional on that resourceVersion, instead of a
GET: a ready node's Prepare makes one request to the Node, not two.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.plugin.claim_errors import PermanentError, RetryableError
from agent.plugin.grpcserver import ClaimRef, RpcError
from api import names
from api.objects import K8sObject
from api.pod import Pod
from api.resourceclaim import ResourceClaim
from api.validation_error import ValidationError
from runtime.corev1 import MERGE_PATCH, CoreV1
from runtime.draclient import DraApi
from runtime.kubecall import call, error_text

log = logging.getLogger(__name__)
_CONFLICT_RETRIES = 8
RBAC_HINT = ("the agent's ServiceAccount lacks this permission: grant it in the ClusterRole "
             "dra-driver-nvidia-gpu-clusterrole-kubeletplugin (the Helm chart's "
             "templates/rbac-kubeletplugin.yaml)")


def forbidden(what: str, err: ApiException) -> PermanentError:
    """A 403 does not go away by retrying within the call: say at once which verb on which
    resource the API server refused, and where that permission is granted."""
    return PermanentError(f"{what}: {error_text(err)} ({RBAC_HINT})")


class NodeOps:
    def __init__(self, api: client.ApiClient, dra: DraApi, node_name: str) -> None:
        self._api = api
        self._core = CoreV1(api)
        self._dra = dra
        self.node_name = node_name
        # This Node as the agent's watch last saw it (cluster.py sets it), None if unknown.
        self.watched: Callable[[], K8sObject | None] = lambda: None

    # --- claims ------------------------------------------------------------------------

    async def read_pod(self, namespace: str, name: str) -> Pod:
        """A pod (the daemon claim check reads its owner, node and labels)."""
        return Pod.from_dict(await call(self._core.read_namespaced_pod, name, namespace,
                                        _request_timeout=20))

    async def _read_claim(self, ref: ClaimRef) -> dict[str, Any]:
        """The claim's JSON in v1 shape; its status is the same JSON in every served
        version, and the checkpoint stores it verbatim, so a node can switch back to the
        reference driver."""
        return await call(self._dra.read, "resourceclaims", ref.name, ref.namespace,
                          _request_timeout=20)

    async def fetch_claim(self, ref: ClaimRef) -> ResourceClaim:
        """The claim; RpcError (whole RPC fails) as the reference's helper does."""
        try:
            claim = ResourceClaim.from_dict(await self._read_claim(ref))
        except ApiException as err:
            hint = f" ({RBAC_HINT})" if err.status == 403 else ""
            raise RpcError(f"retrieve claim {ref.namespace}/{ref.name}: "
                           f"{error_text(err)}{hint}") from None
        except Exception as err:  # a ValidationError included: say what is malformed
            raise RpcError(f"retrieve claim {ref.namespace}/{ref.name}: {err}") from None
        if not claim.allocated:
            raise RpcError(f"claim {ref.namespace}/{ref.name} not allocated")
        if claim.metadata.uid != ref.uid:
            raise RpcError(f"claim {ref.namespace}/{ref.name} got replaced")
        return claim

    async def claim_exists(self, ref: ClaimRef) -> bool:
        """False when the claim is gone or replaced (a stale PrepareStarted entry)."""
        try:
            claim = await call(self._dra.read, "resourceclaims", ref.name, ref.namespace,
                               _request_timeout=20)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return K8sObject.from_dict(claim).metadata.uid == ref.uid

    async def claim_status(self, ref: ClaimRef) -> dict[str, Any]:
        """For unprepare of a legacy checkpoint entry without stored allocation: the
        claim's status JSON, as the checkpoint would have stored it."""
        try:
            claim = ResourceClaim.from_dict(await self._read_claim(ref))
        except ApiException as err:
            raise PermanentError(f"retrieve claim {ref}: {err.status} {err.reason}") from None
        except ValidationError as err:
            raise PermanentError(f"retrieve claim {ref}: {err}") from None
        if not claim.allocated:
            raise PermanentError(f"claim {ref} not allocated")
        return claim.status_json

    # --- node labels -------------------------------------------------------------------

    async def _read_node(self) -> K8sObject:
        """This Node as the API server has it now; a refusal says which permission."""
        try:
            return K8sObject.from_dict(
                await call(self._core.read_node, self.node_name, _request_timeout=20))
        except ApiException as err:
            if err.status == 403:
                raise forbidden(f"read node {self.node_name}", err) from None
            raise RetryableError(f"read node {self.node_name}: {error_text(err)}") from None

    def _label_patch(self, node: K8sObject, key: str, want: str | None, *,
                     only_if: str | None, refuse_other: bool) -> dict[str, Any] | None:
        """The patch that takes `node` to `want`, None when it needs none; RetryableError
        when another domain's label is there and `refuse_other`.

        A merge patch of the one label, conditional on the resourceVersion read: as safe
        as a replace against concurrent writers, and it cannot drop Node fields this
        client's model does not know (policies-kubelet-plugin.yaml refuses any change
        beyond the driver's labels)."""
        current = node.label(key)
        if current == want:
            return None
        if want is None and only_if is not None and current != only_if:
            return None
        if refuse_other and current is not None and current != want:
            raise RetryableError(
                f"label already exists for a different ComputeDomain: node "
                f"{self.node_name} has {key}={current}; a workload of that ComputeDomain "
                "still runs here (or its label was left behind)")
        return {"metadata": {"resourceVersion": node.metadata.resource_version,
                             "labels": {key: want}}}

    async def _patch_label(self, body: dict[str, Any]) -> bool:
        """True once written; False on 409 (the Node changed since it was read)."""
        try:
            await call(self._core.patch_node, self.node_name, body,
                       _content_type=MERGE_PATCH, _request_timeout=20)
            return True
        except ApiException as err:
            if err.status == 403:
                raise forbidden(f"update node {self.node_name}", err) from None
            if err.status != 409:
                raise RetryableError(f"update node {self.node_name}: "
                                     f"{error_text(err)}") from None
            return False

    async def _written_as_watched(self, seen: K8sObject, key: str, want: str | None, *,
                                  only_if: str | None, refuse_other: bool) -> bool:
        """Whether the label could be written from `seen` (the watched Node) without a GET.

        Only a write is decided on what the watch saw, and it is conditional on the
        resourceVersion seen, so it lands only on that very Node (else 409: read it). Any
        other outcome (nothing to write, another domain's label) may be the watch lagging
        behind a change, and is decided on a fresh read, as without a watch."""
        if not seen.metadata.resource_version:  # nothing to make the write conditional on
            return False
        try:
            body = self._label_patch(seen, key, want, only_if=only_if,
                                     refuse_other=refuse_other)
        except RetryableError:
            return False
        return body is not None and await self._patch_label(body)

    async def _update_label(self, key: str, want: str | None, *, only_if: str | None = None,
                            refuse_other: bool = False, seen: K8sObject | None = None
                            ) -> None:
        if seen is not None and await self._written_as_watched(
                seen, key, want, only_if=only_if, refuse_other=refuse_other):
            return
        for _ in range(_CONFLICT_RETRIES):
            node = await self._read_node()
            body = self._label_patch(node, key, want, only_if=only_if,
                                     refuse_other=refuse_other)
            if body is None or await self._patch_label(body):
                return
            await asyncio.sleep(random.uniform(0, 0.02))
        raise RetryableError(f"update node {self.node_name}: too many conflicting writers")

    async def add_cd_label(self, cd_uid: str) -> None:
        """The label a channel claim's Prepare sets; from the watched Node (`watched`) when
        it shows the write to make, so a ready node's Prepare makes one request for it,
        not a GET and a PATCH (tests/bench/bench_prepare.py)."""
        await self._update_label(names.LABEL_COMPUTE_DOMAIN, cd_uid, refuse_other=True,
                                 seen=self.watched())

    async def ensure_cd_label(self, cd_uid: str) -> None:
        """The label put back to `cd_uid` whatever it is now (nodelabels.py: what this
        node's prepared claims need wins over what someone else wrote)."""
        await self._update_label(names.LABEL_COMPUTE_DOMAIN, cd_uid)

    async def remove_cd_label(self, cd_uid: str) -> None:
        await self._update_label(names.LABEL_COMPUTE_DOMAIN, None, only_if=cd_uid)

    async def set_clique_label(self, clique_id: str | None) -> None:
        """`nvidia.com/gpu.clique` by merge patch (None removes it), as the reference does."""
        body = {"metadata": {"labels": {names.LABEL_GPU_CLIQUE: clique_id}}}
        await call(self._core.patch_node, self.node_name, body, _content_type=MERGE_PATCH,
                   _request_timeout=20)

    async def node_uid(self) -> str:
        node = await call(self._core.read_node, self.node_name, _request_timeout=20)
        return K8sObject.from_dict(node).uid
