"""Driver version checks: DNS-named IMEX peers need driver >= 570.158.01."""

from __future__ import annotations

import logging
import re
from typing import Final

from agent.discovery.discovery_error import DiscoveryError
from api import featuregates, names

log = logging.getLogger(__name__)

# Dotted decimal segments, leading zeros allowed ("570.158.01" == "570.158.1"), optional "v".
_VERSION: Final = re.compile(r"v?([0-9]{1,18}(?:\.[0-9]{1,18})*)")


def parse_version(text: str) -> tuple[int, ...]:
    """Numeric segments of a dotted version; DiscoveryError for anything else."""
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise DiscoveryError(
            f"cannot parse NVIDIA driver version {str(text)[:60]!r}: expected dotted numbers "
            f"such as 570.158.01; check the driver installation with nvidia-smi"
        )
    return tuple(int(part) for part in match.group(1).split("."))


def version_at_least(version: str, minimum: str) -> bool:
    """`version >= minimum`, missing trailing segments counting as 0 (570.158 == 570.158.0)."""
    have, need = parse_version(version), parse_version(minimum)
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


def require_dns_names_driver(version: str) -> None:
    """Startup check when not host-managed and IMEXDaemonsWithDNSNames is on."""
    minimum = names.MIN_DRIVER_VERSION_DNS_NAMES
    gate = featuregates.IMEX_DAEMONS_WITH_DNS_NAMES
    # The reference's lines around this check (its device_state.go), which its tests grep.
    log.info("Starting driver version validation for %s feature...", gate)
    log.info("Minimum required version: %s", minimum)
    if not version_at_least(version, minimum):
        log.error("%s feature requires GPU driver version >= %s, but found %s", gate, minimum,
                  version)
        # The reference's hint forgets that ComputeDomainCliques needs this gate (the gate
        # check then refuses the setting): ours says so.
        log.error("If installed via helm, set featureGates.%s=false to disable (and "
                  "featureGates.%s=false, which needs it)", gate,
                  featuregates.COMPUTE_DOMAIN_CLIQUES)
        raise DiscoveryError(
            f"minimum version not satisfied for {featuregates.IMEX_DAEMONS_WITH_DNS_NAMES} "
            f"feature: driver {version} is older than {minimum}; upgrade the NVIDIA driver, or "
            f"set {featuregates.IMEX_DAEMONS_WITH_DNS_NAMES}=false together with "
            f"{featuregates.COMPUTE_DOMAIN_CLIQUES}=false"
        )
    log.info("Driver version validation passed: %s >= %s", version, minimum)
