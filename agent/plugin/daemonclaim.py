"""What makes a daemon claim legitimate: it grants the fabric management device, a
read-write mount of the domain's `/imexd` and the domain's identity, so only the IMEX
daemon pod of that ComputeDomain's DaemonSet on this node may have it.

A claim is checked before anything is written: it must live in the driver namespace (where
tenants cannot create pods or claims) and be reserved for exactly that pod, which must be
bound to this node, carry the domain's label and be controlled by the domain's DaemonSet
(`computedomain-daemon-<uid>`). Anything else is refused with a per-claim error that says
what was wrong; a team-b claim naming team-a's domain gets nothing, and team-a's own daemon
keeps the node's `daemon-0`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from kubernetes.client.exceptions import ApiException

from agent.plugin.claim_errors import PermanentError, RetryableError
from agent.plugin.grpcserver import ClaimRef
from agent.plugin.nodeops import forbidden
from api import names
from api.pod import Pod
from api.resourceclaim import ResourceClaim
from runtime.kubecall import error_text

# (namespace, name) -> the pod; raises ApiException.
PodReader = Callable[[str, str], Awaitable[Pod]]


def _refuse(ref: ClaimRef, why: str) -> PermanentError:
    return PermanentError(f"refusing ComputeDomain daemon claim {ref.namespace}/{ref.name}: "
                          f"{why}")


def check_pod(pod: Pod, *, uid: str, cd_uid: str, node: str) -> str | None:
    """Why `pod` may not hold the daemon claim of `cd_uid` on `node` (None: it may)."""
    name = pod.metadata.name
    if pod.metadata.uid != uid:
        return f"pod {name} is not the one the claim is reserved for"
    where = pod.spec.node_name if pod.spec is not None else None
    if where != node:
        return f"pod {name} runs on node {where!r}, not on this node {node}"
    label = pod.label(names.LABEL_COMPUTE_DOMAIN)
    if label != cd_uid:
        return f"pod {name} is labeled for ComputeDomain {label!r}, not for {cd_uid}"
    owner = pod.controller
    expected = names.daemon_object_name(cd_uid)
    if owner is None or owner.kind != "DaemonSet" or owner.name != expected:
        found = f"{owner.kind} {owner.name}" if owner else "nothing"
        return (f"pod {name} is controlled by {found}, not by the domain's "
                f"DaemonSet {expected}")
    return None


async def check_daemon_claim(ref: ClaimRef, claim: ResourceClaim, cd_uid: str, *,
                             driver_namespace: str, node: str, read_pod: PodReader) -> None:
    """PermanentError naming the problem unless the claim belongs to the domain's daemon pod
    on this node; RetryableError while that cannot be told yet."""
    if ref.namespace != driver_namespace:
        raise _refuse(ref, f"daemon claims are prepared only in the driver namespace "
                           f"{driver_namespace}, where the controller's DaemonSet creates "
                           "them; a workload gets its IMEX channel from the ComputeDomain's "
                           "ResourceClaimTemplate")
    reserved = [r for r in claim.reserved_for if r.resource == "pods"]
    if len(reserved) != 1:
        raise _refuse(ref, f"it is reserved for {len(reserved)} pods; a daemon claim belongs "
                           "to exactly one IMEX daemon pod")
    [pod_ref] = reserved
    try:
        pod = await read_pod(driver_namespace, pod_ref.name or "")
    except ApiException as err:
        if err.status == 403:
            raise forbidden(f"read pod {driver_namespace}/{pod_ref.name}", err) from None
        if err.status == 404:
            raise _refuse(ref, f"its pod {pod_ref.name} does not exist") from None
        raise RetryableError(f"read pod {driver_namespace}/{pod_ref.name}: "
                             f"{error_text(err)}") from None
    why = check_pod(pod, uid=pod_ref.uid or "", cd_uid=cd_uid, node=node)
    if why is not None:
        raise _refuse(ref, why)
