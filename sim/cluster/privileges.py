"""What a container may do beyond its uid: capabilities, `privileged` and
`allowPrivilegeEscalation`, by the rules containerd's CRI plugin applies to a pod's
`securityContext` (https://github.com/containerd/containerd/blob/main/internal/cri/opts/spec_linux.go).

A root container that is not privileged gets the runtime's default capability set, not
every capability: a manifest that needs more (or `privileged`) and does not ask for it
fails here as on a node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Linux capability numbers (include/uapi/linux/capability.h).
CAPABILITIES = {
    name: number
    for number, name in enumerate(
        (
            "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
            "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST",
            "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO",
            "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
            "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE",
            "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
            "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
        )
    )
}

# containerd's default set for a container that is not privileged.
DEFAULT_CAPABILITIES = frozenset(
    {
        "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
        "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
    }
)


@dataclass(frozen=True)
class Privileges:
    """`capabilities` None: every capability (privileged)."""

    capabilities: frozenset[str] | None = DEFAULT_CAPABILITIES
    privileged: bool = False
    no_new_privs: bool = False

    def numbers(self) -> list[int] | None:
        """The capability numbers to keep, for the sandbox; None keeps them all."""
        if self.capabilities is None:
            return None
        return sorted(CAPABILITIES[c] for c in self.capabilities)


def _names(values: Any) -> list[str]:
    """`NET_ADMIN` or `CAP_NET_ADMIN`, any case, as the runtime reads them."""
    return [str(v).upper().removeprefix("CAP_") for v in values or ()]


def privileges(container: Mapping[str, Any]) -> Privileges:
    ctx = container.get("securityContext") or {}
    if ctx.get("privileged"):
        return Privileges(capabilities=None, privileged=True)
    caps = ctx.get("capabilities") or {}
    add, drop = _names(caps.get("add")), _names(caps.get("drop"))
    # Drop ALL first (so `drop: [ALL], add: [X]` leaves X), then add, then drop the rest.
    kept = set() if "ALL" in drop else set(DEFAULT_CAPABILITIES)
    kept |= set(CAPABILITIES) if "ALL" in add else set(add)
    kept -= set(drop)
    # Unknown names are ignored, as runc ignores them.
    no_new_privs = ctx.get("allowPrivilegeEscalation") is False
    return Privileges(frozenset(kept & set(CAPABILITIES)), no_new_privs=no_new_privs)
