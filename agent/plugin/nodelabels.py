"""Keeps this node's driver labels what its prepared claims need, whoever changed them.

The `resource.nvidia.com/computeDomain` label is what makes a domain's DaemonSet run an
IMEX daemon here; Prepare of a channel claim sets it and the last Unprepare removes it. An
admin's `kubectl label node <n> resource.nvidia.com/computeDomain-`, a node-feature tool or
a stale automation can remove or change it at any time, and then the DaemonSet takes the
daemon away while the workload keeps its channel. The keeper watches the Node (one object,
by field selector) and puts back, within a watch round trip, the label of the domain whose
channel claims the checkpoint holds as prepared (while that domain exists and is not being
deleted), and `nvidia.com/gpu.clique` when the agent owns it. It also runs at start, so a
restarted agent repairs what changed while it was down.

It never removes a label: a Prepare that is still waiting for its daemon has set the
label before its checkpoint entry completes, and it re-adds the label on every attempt
anyway. Each repair takes the node lock, so it cannot interleave with an Unprepare that is
removing the label of its last claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from agent.checkpoint.model import Checkpoint, ClaimState
from api import names
from api.objects import K8sObject, ParsedCache
from runtime.informer import Informer
from runtime.kubecall import error_text

log = logging.getLogger(__name__)
RESYNC_S = 30.0  # a repair that failed (API down) is tried again after this at the latest


class LabelWriter(Protocol):
    async def ensure_cd_label(self, cd_uid: str) -> None: ...
    async def set_clique_label(self, clique_id: str | None) -> None: ...


def channel_domains(checkpoint: Checkpoint) -> set[str]:
    """The domains of this node's prepared channel claims."""
    return {
        group.domain_id
        for entry in checkpoint.claims.values()
        if entry.state == ClaimState.PREPARE_COMPLETED
        for group in entry.prepared or ()
        if group.config_type == names.DEVICE_TYPE_CHANNEL and group.domain_id
    }


def needed_domain(checkpoint: Checkpoint, live: Callable[[str], bool]) -> str | None:
    """The domain whose label this node needs: the one of its prepared channel claims, if
    that ComputeDomain still exists and is not being deleted (the controller removes a
    deleted domain's labels while its workloads may still run; putting them back would
    fight it). A node serves one domain at a time, so more than one is left alone."""
    domains = {uid for uid in channel_domains(checkpoint) if live(uid)}
    if len(domains) > 1:
        log.warning("prepared channel claims of %d ComputeDomains on one node (%s): "
                    "not repairing the %s label", len(domains), ", ".join(sorted(domains)),
                    names.LABEL_COMPUTE_DOMAIN)
        return None
    return next(iter(domains), None)


class NodeLabelKeeper:
    def __init__(
        self,
        writer: LabelWriter,
        node: Informer,
        node_name: str,
        lock: Callable[[], AbstractAsyncContextManager[None]],
        checkpoint: Callable[[], Checkpoint],
        live: Callable[[str], bool],
        *,
        refresh_live: Callable[[Iterable[str]], Awaitable[None]] | None = None,
        host_managed: bool,
        clique_id: Callable[[], str] | None,
        resync_s: float = RESYNC_S,
    ) -> None:
        self._writer = writer
        self._node = node
        self._node_name = node_name
        self._lock = lock
        self._checkpoint = checkpoint
        self._live = live
        self._refresh_live = refresh_live
        self._host_managed = host_managed
        self._clique_id = clique_id
        self._resync_s = resync_s
        self.repairs = 0  # labels put back (tests and logs)
        self._parsed = ParsedCache(K8sObject)

    def _labels(self) -> Mapping[str, str]:
        node = self._parsed.get(self._node.items, self._node_name)
        labels = node.metadata.labels if node is not None else None
        return labels or {}

    def _wanted(self) -> dict[str, str]:
        wanted: dict[str, str] = {}
        if not self._host_managed:
            domain = needed_domain(self._checkpoint(), self._live)
            if domain:
                wanted[names.LABEL_COMPUTE_DOMAIN] = domain
        if self._clique_id is not None and self._clique_id():
            wanted[names.LABEL_GPU_CLIQUE] = self._clique_id()
        return wanted

    def drifted(self) -> dict[str, str]:
        """The wanted labels the watched Node does not carry (as the watch last saw it)."""
        labels = self._labels()
        return {k: v for k, v in self._wanted().items() if labels.get(k) != v}

    async def repair(self) -> None:
        """Put back every drifted label (under the node lock; each write re-reads the Node,
        so a watch that lags our own write costs one GET, never a wrong label)."""
        if not self.drifted():
            return
        if self._refresh_live is not None and not self._host_managed:
            # Liveness as read now, not as last read: a domain deleted since must not get
            # its label back (the controller removes it and the two would fight).
            await self._refresh_live(channel_domains(self._checkpoint()))
            if not self.drifted():
                return
        async with self._lock():
            for key, value in self.drifted().items():
                log.warning("node %s: label %s is %r, its prepared claims need %r: restoring",
                            self._node_name, key, self._labels().get(key), value)
                if key == names.LABEL_COMPUTE_DOMAIN:
                    await self._writer.ensure_cd_label(value)
                else:
                    await self._writer.set_clique_label(value)
                self.repairs += 1

    async def run(self) -> None:
        """Repair now, then after every change of the Node (and every `resync_s`)."""
        await self._node.synced.wait()
        while True:
            since = self._node.version
            try:
                await self.repair()
            except Exception as err:  # the API may be down: the next change or resync retries
                log.warning("node %s: repairing driver labels failed (will retry): %s",
                            self._node_name, error_text(err))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._resync_s):
                    await self._node.changed(since)
