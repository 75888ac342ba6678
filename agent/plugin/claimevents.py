"""Why a claim's Prepare waits, failed or what it gave the pod, as Events on the pods that
reserved the claim (`status.reservedFor`), so `kubectl describe pod` and `diagnose` show it
in the agent's own words next to kubelet's generic FailedPrepareDynamicResources.

Writes go through `runtime.events.EventRecorder`: fire and forget, rate-limited per pod and
reason, an API error (a 403 included) only logged. Which Event for which outcome is decided
here; when (once per call, only on a fresh Prepare) is the driver's business.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from agent.plugin.claim_errors import HostNotReadyError, NotReadyError
from api import names
from api.resourceclaim import ResourceClaim
from runtime.events import TYPE_NORMAL, TYPE_WARNING, EventRecorder, pod_ref

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChannelOutcome:
    """What one channel config of a freshly prepared claim gave the pod."""

    domain_id: str
    channels: str  # "channel 0", "all 2048 channels"
    cdi_ids: tuple[str, ...]  # empty: no channel device injected (no NVLink clique)


def wait_reason(err: BaseException) -> str | None:
    """The Event reason when `err` means "waiting for IMEX", else None."""
    if isinstance(err, NotReadyError):
        return names.EVENT_CHANNEL_WAITING
    if isinstance(err, HostNotReadyError):
        return names.EVENT_HOST_IMEX_NOT_READY
    return None


def reserving_pods(claim: ResourceClaim) -> list[dict[str, str]]:
    """involvedObjects for the pods in the claim's status.reservedFor."""
    return [pod_ref(c.name, claim.namespace, c.uid or "") for c in claim.reserved_for
            if c.resource == "pods" and not c.api_group and c.name]


class ClaimEvents:
    def __init__(self, recorder: EventRecorder, node_name: str) -> None:
        self._recorder = recorder
        self._node = node_name

    def waiting(self, claim: ResourceClaim, err: BaseException) -> None:
        """A workload claim waits for IMEX (this node's daemon, or the host's).

        Waiting for this node's daemon is part of every bring-up (the daemon is scheduled
        by the label this Prepare sets), so it is a Normal Event; if it lasts, kubelet's
        Warning follows with the same reason. A host daemon is meant to be up already."""
        reason = wait_reason(err)
        if reason is not None:
            normal = reason == names.EVENT_CHANNEL_WAITING
            self._record(claim, reason, str(err), TYPE_NORMAL if normal else TYPE_WARNING)

    def failed(self, claim: ResourceClaim, error: str) -> None:
        """The error that goes back to kubelet (permanent, or retryable and still failing)."""
        self._record(claim, names.EVENT_PREPARE_FAILED, error, TYPE_WARNING)

    def prepared(self, claim: ResourceClaim, outcomes: Iterable[ChannelOutcome]) -> None:
        """A channel claim's first successful Prepare: what it gave the pod, or that it
        gave none (the reference succeeds silently there)."""
        outcomes = list(outcomes)
        uid = claim.uid
        with_channel = [o for o in outcomes if o.cdi_ids]
        without = [o for o in outcomes if not o.cdi_ids]
        if with_channel:
            what = "; ".join(
                f"{o.channels} of ComputeDomain {o.domain_id}, CDI devices "
                f"{', '.join(o.cdi_ids)}" for o in with_channel)
            message = f"prepared on node {self._node}: {what}"
            self._record(claim, names.EVENT_CHANNEL_PREPARED, message, TYPE_NORMAL, key=uid)
        if without:
            domains = ", ".join(sorted({o.domain_id for o in without}))
            message = (f"prepared on node {self._node}, which has no NVLink clique ID: no IMEX "
                       f"channel device was injected for ComputeDomain {domains}; the pod runs "
                       "without Multi-Node NVLink (MNNVL)")
            self._record(claim, names.EVENT_NO_CHANNEL, message, TYPE_WARNING, key=uid)

    def _record(self, claim: ResourceClaim, reason: str, message: str, type_: str, *,
                key: str = "") -> None:
        pods = reserving_pods(claim)
        if not pods:
            log.debug("no pod reserves claim %s: no %s event",
                      claim.metadata.name, reason)
        for pod in pods:
            self._recorder.record(pod, reason, message, type_, key=key)
