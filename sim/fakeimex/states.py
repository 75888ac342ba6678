"""The state vocabularies the real tools print, and how the fake derives the domain state.

Daemon states follow DCGM's `DCGM_FI_IMEX_DAEMON_STATUS` enum (what `nvidia-imex-ctl -q`
prints); connection statuses follow the `-N` legend and its JSON spelling.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from types import MappingProxyType


class DaemonState(StrEnum):
    """One daemon's state, in DCGM enum order (`code` is DCGM's number)."""

    INITIALIZING = "INITIALIZING"
    STARTING_AUTH_SERVER = "STARTING_AUTH_SERVER"
    WAITING_FOR_PEERS = "WAITING_FOR_PEERS"
    WAITING_FOR_RECOVERY = "WAITING_FOR_RECOVERY"
    INIT_GPU = "INIT_GPU"
    READY = "READY"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    UNAVAILABLE = "UNAVAILABLE"

    @property
    def code(self) -> int:
        return list(DaemonState).index(self)


class DomainState(StrEnum):
    """`Domain State:` of `-N` and `"status"` of `-N -j` (DCGM_FI_IMEX_DOMAIN_STATUS)."""

    UP = "UP"
    DEGRADED = "DEGRADED"
    DOWN = "DOWN"


class LinkStatus(StrEnum):
    """One cell of the From/To connectivity matrix; `letter` is the text legend's code."""

    INVALID = "INVALID"
    NEVER_CONNECTED = "NEVER_CONNECTED"
    RECOVERING = "RECOVERING"
    DISCONNECTED = "DISCONNECTED"
    AUTHENTICATING = "AUTHENTICATING"
    VERSION_MISMATCH = "VERSION_MISMATCH"
    NODE_MAP_MISMATCH = "NODE_MAP_MISMATCH"
    CONNECTED = "CONNECTED"

    @property
    def letter(self) -> str:
        return _LETTERS[self]


_LETTERS = MappingProxyType(
    {
        LinkStatus.INVALID: "I",
        LinkStatus.NEVER_CONNECTED: "N",
        LinkStatus.RECOVERING: "R",
        LinkStatus.DISCONNECTED: "D",
        LinkStatus.AUTHENTICATING: "A",
        LinkStatus.VERSION_MISMATCH: "!V!",
        LinkStatus.NODE_MAP_MISMATCH: "!M!",
        LinkStatus.CONNECTED: "C",
    }
)

LEGEND = """\
Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Node was reachable at some point, but is no longer reachable. \
Cleanup has been triggered.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""


def domain_state(local: DaemonState, peers: Iterable[tuple[LinkStatus, str | None]]) -> DomainState:
    """The domain as this daemon sees it.

    `peers` holds (link status, reported daemon state) for every *expected* peer: each
    nodes-config entry but ourselves and placeholder slots (unresolved names are expected).
    DOWN while we are not READY; UP when every expected peer is connected and READY (a lone
    node is UP once READY); otherwise DEGRADED - also with no peer connected at all, as the
    real IMEX reports after a 2-node domain loses its peer.
    """
    if local is not DaemonState.READY:
        return DomainState.DOWN
    if all(link is LinkStatus.CONNECTED and state == DaemonState.READY for link, state in peers):
        return DomainState.UP
    return DomainState.DEGRADED
