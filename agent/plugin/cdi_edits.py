"""The plugin's CDI side: container edits per prepared device, claim spec files, base spec.

Wraps agent.cdispecs with this node's facts (channel major, capability device, driver
roots, CDI root), so the driver's state machine only says what to inject.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agent import cdispecs
from agent.cdispecs.transform import RootTransform
from agent.discovery.channels import ImexChannels
from agent.discovery.devnode import CharDevice
from agent.discovery.discovery_error import DiscoveryError
from agent.discovery.findfile import dev_root
from agent.hostimex.probe import HostImexProbe
from agent.plugin.claim_errors import PermanentError, RetryableError
from agent.plugin.config import PluginConfig
from api import names
from api.computedomain import StoredComputeDomain
from cdi import ContainerEdits

log = logging.getLogger(__name__)


class CdiEdits:
    def __init__(
        self, config: PluginConfig, channels: ImexChannels, cap_reader: Callable[[], CharDevice]
    ) -> None:
        self._cfg = config
        self._channels = channels
        self._cap_reader = cap_reader
        self._transform = RootTransform(
            str(config.container_driver_root), str(config.host_driver_root)
        )

    def channel_edits(self, channels: range | list[int]) -> ContainerEdits:
        return cdispecs.channel_edits(self._channels.major, channels)

    def daemon_edits(self, cd: StoredComputeDomain | None, clique_id: str) -> ContainerEdits:
        """`cd` None (not known): its identity is left empty."""
        uid, name, namespace = (cd.uid, cd.name, cd.namespace) if cd is not None else ("", "", "")
        cap = None
        if clique_id:
            try:
                cap = self._cap_reader()
            except DiscoveryError as err:
                raise RetryableError(str(err)) from None
        return cdispecs.daemon_edits(
            clique_id,
            uid,
            name,
            namespace,
            self._cfg.domains_dir / uid,
            cap,
        )

    def write_claim_spec(self, claim_uid: str, devices: list[tuple[str, Any]]) -> bool:
        spec = cdispecs.claim_spec(claim_uid, devices, transform=self._transform)
        if spec is None:
            return False
        cdispecs.write_claim_spec(self._cfg.cdi_root, claim_uid, spec)
        return True

    def remove_claim_spec(self, claim_uid: str) -> None:
        cdispecs.remove_claim_spec(self._cfg.cdi_root, claim_uid)

    def claim_cdi_ids(
        self, claim_uid: str, device: str, has_edits: bool, daemon: bool
    ) -> list[str]:
        return cdispecs.claim_cdi_ids(claim_uid, device, has_edits, daemon)

    def spec_intact(self, claim_uid: str, devices: list[Any]) -> bool:
        """A prepared claim that names a claim CDI device must still have its spec file."""
        wants_spec = any(
            i.startswith(f"{names.CDI_KIND_CLAIM}=") for d in devices for i in d.cdi_device_ids
        )
        return not wants_spec or cdispecs.claim_spec_path(self._cfg.cdi_root, claim_uid).exists()

    def remove_orphaned_specs(self, known_uids: set[str]) -> list[Path]:
        """Claim specs of claims we no longer track, and temp files of writes cut short by
        a crash (called under the node lock, so no write of ours is in flight)."""
        orphans = cdispecs.orphaned_claim_specs(self._cfg.cdi_root, known_uids)
        orphans += sorted(self._cfg.cdi_root.glob(f".{names.CDI_VENDOR}-*.tmp"))
        orphans += sorted(self._cfg.plugin_dir.glob(f".{names.CHECKPOINT_FILE}.*"))
        for path in orphans:
            path.unlink(missing_ok=True)
        return orphans

    @staticmethod
    def check_claim_uid(claim_uid: str) -> None:
        try:
            cdispecs.check_claim_uid(claim_uid)
        except ValueError as err:
            raise PermanentError(f"refusing claim UID {claim_uid!r}: {err}") from None

    def write_base_spec(self) -> None:
        result = cdispecs.write_base_spec(
            self._cfg.cdi_root,
            container_driver_root=str(self._cfg.container_driver_root),
            host_driver_root=str(self._cfg.host_driver_root),
            hook_path=self._cfg.nvidia_cdi_hook_path,
        )
        if result.ctk_error:
            log.warning(
                "nvidia-ctk could not generate the base CDI spec (%s); built it from "
                "the driver root instead",
                result.ctk_error,
            )
        if result.missing:
            log.warning(
                "base CDI spec: not found under the driver root: %s", ", ".join(result.missing)
            )
        log.info("wrote base CDI spec %s (%s)", result.path, result.source)

    def host_probe(self) -> Callable[[], Awaitable[None]]:
        probe = HostImexProbe(
            dev_root(self._cfg.container_driver_root),
            self._cfg.imex_host_socket_path,
            use_chroot=self._cfg.imex_ctl_chroot,
        )
        return probe.check
