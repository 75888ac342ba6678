"""Who this daemon is: the CDI-injected ComputeDomain identity plus the downward-API pod identity.

Everything is validated once at startup so a misconfigured DaemonSet or a runtime without CDI
fails with one line naming the variable, instead of a confusing error deep in the IMEX loop.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from api import names
from api.validation import validate_domain_id
from api.validation_error import ValidationError

MAX_NODES_LIMIT: Final = 1000

CDI_NOT_APPLIED: Final = (
    "CDI container edits did not apply -- is CDI enabled in your container runtime?"
)
_CDI_HINT: Final = (
    f"({names.ENV_COMPUTE_DOMAIN_UUID} is injected by the kubelet plugin's CDI spec for the "
    "daemon claim; enable CDI in containerd/CRI-O and check the daemon claim was prepared)"
)

# Downward-API variables every daemon pod needs, and the pod field each comes from.
_DOWNWARD: Final = (
    (names.ENV_NODE_NAME, "spec.nodeName"),
    (names.ENV_POD_IP, "status.podIP"),
    (names.ENV_POD_NAME, "metadata.name"),
    (names.ENV_POD_NAMESPACE, "metadata.namespace"),
)


class IdentityError(ValueError):
    """The daemon's environment is incomplete or invalid; the message is one line."""


@dataclass(frozen=True)
class DaemonIdentity:
    clique_id: str
    cd_uid: str
    cd_name: str
    cd_namespace: str
    node_name: str
    pod_ip: str
    pod_uid: str
    pod_name: str
    pod_namespace: str
    max_nodes: int

    @property
    def non_fabric(self) -> bool:
        """An empty clique ID means a node without NVLink fabric: no IMEX, no peers."""
        return self.clique_id == ""


def is_peer_address(text: str) -> bool:
    """An IP address IMEX can listen on and peers can be given. A zone ID
    (`fe80::1%<anything>`, newlines included) never is: the address ends up in every peer's
    hosts file and nodes config."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return not (isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None)


def _downward(env: Mapping[str, str], var: str, field: str) -> str:
    value = env.get(var, "").strip()
    if not value:
        raise IdentityError(
            f"{var} is not set: it comes from the downward API ({field}) in the daemon "
            "DaemonSet's container env"
        )
    return value


def _max_nodes(raw: str | None) -> int:
    var = names.ENV_MAX_NODES_PER_IMEX_DOMAIN
    if raw is None or raw.strip() == "":
        return names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    try:
        value = int(raw.strip())
    except ValueError:
        raise IdentityError(f"{var}={raw!r} is not an integer") from None
    if not 1 <= value <= MAX_NODES_LIMIT:
        raise IdentityError(f"{var}={value} is out of range: must be 1..{MAX_NODES_LIMIT}")
    return value


def identity_from(
    env: Mapping[str, str], overrides: dict[str, str] | None = None
) -> DaemonIdentity:
    """Build and validate the identity from `env` (usually os.environ).

    `overrides` (keyed by env var name, e.g. from CLI flags) take precedence over `env`.
    An unset MAX_NODES_PER_IMEX_DOMAIN falls back to the controller's default of 18.
    """
    merged: dict[str, str] = dict(env)
    if overrides:
        merged.update(overrides)

    cd_uid = merged.get(names.ENV_COMPUTE_DOMAIN_UUID, "").strip()
    if not cd_uid:
        raise IdentityError(f"{CDI_NOT_APPLIED} {_CDI_HINT}")
    try:
        validate_domain_id(cd_uid, field=names.ENV_COMPUTE_DOMAIN_UUID)
        names.dns_name(cd_uid, 0)  # the peer names must still fit one DNS label
    except (ValidationError, ValueError) as err:
        raise IdentityError(f"{names.ENV_COMPUTE_DOMAIN_UUID}: {err}") from None

    node_name, pod_ip, pod_name, pod_namespace = (
        _downward(merged, var, field) for var, field in _DOWNWARD
    )
    if not is_peer_address(pod_ip):
        raise IdentityError(
            f"{names.ENV_POD_IP}={pod_ip!r} is not an IP address: it comes from the downward API "
            "(status.podIP) in the daemon DaemonSet's container env"
        )

    return DaemonIdentity(
        clique_id=merged.get(names.ENV_CLIQUE_ID, "").strip(),
        cd_uid=cd_uid,
        cd_name=merged.get(names.ENV_COMPUTE_DOMAIN_NAME, ""),
        cd_namespace=merged.get(names.ENV_COMPUTE_DOMAIN_NAMESPACE, "") or "default",
        node_name=node_name,
        pod_ip=pod_ip,
        pod_uid=merged.get(names.ENV_POD_UID, ""),
        pod_name=pod_name,
        pod_namespace=pod_namespace,
        max_nodes=_max_nodes(merged.get(names.ENV_MAX_NODES_PER_IMEX_DOMAIN)),
    )
