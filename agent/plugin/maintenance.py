"""The plugin's periodic clean-up (reference kubelet-plugin §6): claims whose Prepare
started but whose ResourceClaim is gone are unprepared, expired tombstones and orphaned
CDI files dropped, and the directories of deleted ComputeDomains removed."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

from agent.plugin.driver import Driver
from agent.plugin.grpcserver import ClaimRef

log = logging.getLogger(__name__)


class Maintenance:
    def __init__(self, driver: Driver, claim_exists: Callable[[ClaimRef], Awaitable[bool]],
                 domain_exists: Callable[[str], bool], domains_dir: Path) -> None:
        self._driver = driver
        self._claim_exists = claim_exists
        self._domain_exists = domain_exists
        self._domains_dir = domains_dir

    async def run_once(self) -> dict[str, int]:
        stale = []
        for ref in self._driver.stale_started():
            try:
                if not await self._claim_exists(ref):
                    stale.append(ref)
            except Exception as err:  # API trouble: try again next time
                log.info("cleanup: cannot check claim %s: %s", ref, err)
        if stale:
            await self._driver.unprepare(stale)
        tombstones, orphans = await self._driver.sweep()
        removed_domains = 0
        if self._domains_dir.is_dir():
            for child in self._domains_dir.iterdir():
                if child.is_dir() and not self._domain_exists(child.name):
                    await asyncio.to_thread(shutil.rmtree, child, True)
                    removed_domains += 1
        counts = {"stale": len(stale), "tombstones": tombstones, "orphans": orphans,
                  "domains": removed_domains}
        if any(counts.values()):
            log.info("cleanup: %s", counts)
        return counts
