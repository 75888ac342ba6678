"""IMEX lifecycle mode and isolation, validated with the reference's messages.

Changing either while ComputeDomains exist is unsupported (remove the CDs first), so a
bad value must stop the process at start, not surface later as a stuck claim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from api.validation_error import ValidationError

MODE_DRIVER_MANAGED: Final = "driverManaged"
MODE_HOST_MANAGED: Final = "hostManaged"
ISOLATION_DOMAIN: Final = "domain"
ISOLATION_CHANNEL: Final = "channel"


class ImexMode(StrEnum):
    DRIVER_MANAGED = MODE_DRIVER_MANAGED
    HOST_MANAGED = MODE_HOST_MANAGED


def _q(value: str) -> str:
    """Double-quoted like the reference's messages (Go `%q`)."""
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class ImexConfig:
    """`--imex-mode` / `--imex-isolation`. An empty mode means the default, driverManaged."""

    mode: str = MODE_DRIVER_MANAGED
    isolation: str = ISOLATION_DOMAIN

    @property
    def host_managed(self) -> bool:
        return self.mode == MODE_HOST_MANAGED

    @property
    def effective_mode(self) -> ImexMode:
        return ImexMode.HOST_MANAGED if self.host_managed else ImexMode.DRIVER_MANAGED

    def problem(self, *, host_managed_gate: bool) -> str | None:
        """The reference's message for an invalid combination, or None when it is valid."""
        if self.mode not in ("", MODE_DRIVER_MANAGED, MODE_HOST_MANAGED):
            return f"unknown imex.mode {_q(self.mode)}"
        if self.host_managed and not host_managed_gate:
            return (
                f'imex.mode="{MODE_HOST_MANAGED}" requires the HostManagedIMEXDaemon '
                "feature gate to be enabled"
            )
        if self.isolation in ("", ISOLATION_DOMAIN):
            return None
        if self.isolation == ISOLATION_CHANNEL:
            return (
                f'imex.isolation="{ISOLATION_CHANNEL}" is not supported yet: '
                "per-workload IMEX channel allocation is not implemented"
            )
        return (
            f"unknown imex.isolation {_q(self.isolation)}: "
            f'must be "{ISOLATION_DOMAIN}" or "{ISOLATION_CHANNEL}"'
        )

    def validate(self, *, host_managed_gate: bool) -> None:
        problem = self.problem(host_managed_gate=host_managed_gate)
        if problem:
            raise ValidationError(f"imex configuration validation failed: {problem}")
