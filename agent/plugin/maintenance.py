"""The plugin's periodic clean-up: claims whose Prepare started but whose ResourceClaim is
gone are unprepared, expired tombstones and orphaned CDI files dropped, and the directories
of deleted ComputeDomains removed. The reference's is in cleanup.go and `periodicCleanup`
of computedomain.go, and leaves orphaned claim CDI files in place:
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/tree/main/cmd/compute-domain-kubelet-plugin."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from agent.plugin.driver import Driver
from agent.plugin.grpcserver import ClaimRef
from agent.plugin.imexhost import ImexHost
from runtime.logsetup import vlog

log = logging.getLogger(__name__)


class Maintenance:
    def __init__(self, driver: Driver, claim_exists: Callable[[ClaimRef], Awaitable[bool]],
                 domain_exists: Callable[[str], bool], domains_dir: Path,
                 refresh_domains: Callable[[Iterable[str]], Awaitable[None]] | None = None,
                 imex: ImexHost | None = None) -> None:
        """`refresh_domains(uids)` reads those domains from the API before `domain_exists`
        is asked about them (the agent does not watch every ComputeDomain). `imex` (agent
        placement): the IMEX of domains gone or being deleted is stopped, and any recorded
        nvidia-imex no domain of this node needs, before their directories go."""
        self._imex = imex
        self._driver = driver
        self._claim_exists = claim_exists
        self._domain_exists = domain_exists
        self._domains_dir = domains_dir
        self._refresh_domains = refresh_domains

    async def run_once(self) -> dict[str, int]:
        stale = []
        # The reference's words (its cleanup.go), which its stale-claim test greps.
        for ref in self._driver.stale_started():
            try:
                if not await self._claim_exists(ref):
                    vlog(log, 4, "Checkpointed RC cleanup: partially prepared claim '%s' is "
                         "stale: not found in API server", ref)
                    stale.append(ref)
                else:
                    vlog(log, 4, "Checkpointed RC cleanup: partially prepared claim not "
                         "stale: %s", ref)
            except Exception as err:  # API trouble: try again next time
                log.info("cleanup: cannot check claim %s: %s", ref, err)
        if stale:
            errors = await self._driver.unprepare(stale)
            for ref in stale:
                if not errors.get(ref.uid):
                    log.info("Checkpointed RC cleanup: unprepared stale claim: %s", ref)
        tombstones, orphans = await self._driver.sweep()
        if self._imex is not None:
            try:
                await self._imex.release_unwanted()
                await self._imex.stop_orphans()
            except Exception as err:  # API trouble: try again next time
                log.info("cleanup: cannot check the supervised domains: %s", err)
        removed_domains = await self._remove_deleted_domains()
        counts = {"stale": len(stale), "tombstones": tombstones, "orphans": orphans,
                  "domains": removed_domains}
        if any(counts.values()):
            log.info("cleanup: %s", counts)
        return counts

    async def _remove_deleted_domains(self) -> int:
        """Remove the directories of domains the API server no longer has. If it cannot be
        asked, nothing is removed: a directory lost by mistake breaks a running daemon."""
        if not self._domains_dir.is_dir():
            return 0
        dirs = [child for child in self._domains_dir.iterdir() if child.is_dir()]
        if not dirs:
            return 0
        if self._refresh_domains is not None:
            try:
                await self._refresh_domains([child.name for child in dirs])
            except Exception as err:
                log.info("cleanup: cannot read ComputeDomains (%s); domain directories kept",
                         err)
                return 0
        removed = 0
        for child in dirs:
            if not self._domain_exists(child.name):
                await asyncio.to_thread(shutil.rmtree, child, True)
                removed += 1
        return removed
