"""What one daemon knows about its peers, and the `-N -j` document built from it.

The daemon owns one `Link` per other nodes-config entry (its outgoing connection); peers
report their own state and links in heartbeats, which fills the other rows of the From/To
matrix. The JSON shape follows real `nvidia-imex-ctl -N -j` output: `nodes` keyed by node ID,
each with `status`, `host`, `connections`, `changed`, `version`, then `timestamp`, `status`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.fakeimex.nodes import NodeEntry
from sim.fakeimex.states import DaemonState, DomainState, LinkStatus, domain_state


@dataclass
class Link:
    """Our outgoing connection to one peer and what that peer last told us."""

    entry: NodeEntry
    address: str | None
    port: int
    expected: bool
    status: LinkStatus = LinkStatus.NEVER_CONNECTED
    peer_state: str | None = None
    peer_version: str = ""
    peer_links: dict[str, str] = field(default_factory=dict)
    connected_count: int = 0
    lost_at: float | None = None
    task: asyncio.Task[None] | None = None

    @property
    def index(self) -> int:
        return self.entry.index


def view_domain_state(local: DaemonState, links: Mapping[int, Link]) -> DomainState:
    return domain_state(local, [(ln.status, ln.peer_state) for ln in links.values() if ln.expected])


def timestamp(now: float | None = None) -> str:
    """`9/4/2026 00:37:39.905`, the real tool's format."""
    now = time.time() if now is None else now
    t = time.localtime(now)
    return (
        f"{t.tm_mon}/{t.tm_mday}/{t.tm_year} "
        f"{time.strftime('%H:%M:%S', t)}.{int(now * 1000) % 1000:03d}"
    )


def nodes_report(
    *,
    entries: Sequence[NodeEntry],
    addresses: Mapping[int, str | None],
    self_index: int,
    local_state: DaemonState,
    version: str,
    links: Mapping[int, Link],
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The `-N -j` document; `changed` flags differences from `previous` (the last report)."""
    hosts = {e.index: addresses.get(e.index) or e.host for e in entries}
    old_nodes: Mapping[str, Any] = (previous or {}).get("nodes", {})

    def connections(statuses: Mapping[int, str], old: Mapping[str, Any]) -> dict[str, Any]:
        cells = {}
        for e in entries:
            status = statuses.get(e.index, LinkStatus.INVALID.value)
            before = old.get(str(e.index), {}).get("status")
            cells[str(e.index)] = {
                "host": hosts[e.index],
                "status": status,
                "changed": before != status,
            }
        return cells

    nodes: dict[str, Any] = {}
    for e in entries:
        key = str(e.index)
        old = old_nodes.get(key, {})
        if e.index == self_index:
            status, node_version = local_state.value, version
            statuses = {k: ln.status.value for k, ln in links.items()}
            statuses[self_index] = LinkStatus.CONNECTED.value
        elif links[e.index].status is LinkStatus.CONNECTED:
            link = links[e.index]
            status = link.peer_state or DaemonState.UNAVAILABLE.value
            node_version = link.peer_version
            statuses = {int(k): v for k, v in link.peer_links.items()}
        else:
            status, node_version, statuses = DaemonState.UNAVAILABLE.value, "", {}
        nodes[key] = {
            "status": status,
            "host": hosts[e.index],
            "hostName": e.host,
            "connections": connections(statuses, old.get("connections", {})),
            "changed": (old.get("status"), old.get("version")) != (status, node_version),
            "version": node_version,
        }
    return {
        "nodes": nodes,
        "timestamp": timestamp(),
        "status": view_domain_state(local_state, links).value,
    }
