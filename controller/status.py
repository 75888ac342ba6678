"""ComputeDomain status aggregation, as pure functions: from the parsed cliques, daemon pods
and status entries to the API JSON of the status to write.

The controller's 2-second sync feeds these with what its caches hold (CDs, daemon pods,
cliques) and writes back only what changed. The reference's is cdstatus.go and
`calculateGlobalStatus` in computedomain.go of
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/tree/main/cmd/compute-domain-controller.
Per-node readiness comes from the daemons (through their clique entries, or directly in CD
status when the cliques gate is off) and, for non-fabric nodes, from the daemon pod's Ready
condition, which the daemon's readiness probe drives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeVar

from api import names
from api.clique import ComputeDomainClique, ComputeDomainDaemonInfo, settled_indices
from api.computedomain import ComputeDomainNode
from api.objects import K8sObject
from api.pod import Pod

NON_FABRIC_INDEX: Final = -1
NODE_FIELDS: Final = ("name", "ipAddress", "cliqueID", "index", "status")
T = TypeVar("T", bound=K8sObject)


def global_status(nodes: Iterable[Any], num_nodes: int | None, *, host_managed: bool) -> str:
    """`status.status` of a CD (the reference's calculateGlobalStatus).

    hostManaged is Ready once reconciled: the host's IMEX is not ours to watch. Otherwise
    Ready needs at least numNodes entries, none of them explicitly NotReady; an entry
    without a status does not count against readiness.
    """
    if host_managed:
        return names.STATUS_READY
    nodes = list(nodes)
    if len(nodes) < (num_nodes or 0):
        return names.STATUS_NOT_READY
    if any(isinstance(n, Mapping) and n.get("status") == names.STATUS_NOT_READY for n in nodes):
        return names.STATUS_NOT_READY
    return names.STATUS_READY


def status_body(
    nodes: list[dict[str, Any]], num_nodes: int | None, *, host_managed: bool
) -> dict[str, Any]:
    """The `status` object to write: the recomputed global status, and `nodes` only when
    non-empty (Go's omitempty, so a cleared list makes the key disappear)."""
    body: dict[str, Any] = {"status": global_status(nodes, num_nodes, host_managed=host_managed)}
    if nodes:
        body["nodes"] = nodes
    return body


# --- pods ---------------------------------------------------------------------------------


def is_non_fabric_pod(pod: Pod) -> bool:
    """A daemon on a node without NVLink fabric: the daemon set its clique label to "".

    A pod without the label is still starting and counts as fabric, as in the reference.
    """
    return pod.label(names.LABEL_CLIQUE_ID) == ""


def split_pods(pods: Iterable[Pod]) -> tuple[list[Pod], list[Pod]]:
    """(fabric, non-fabric) daemon pods, by the clique label rule of `is_non_fabric_pod`."""
    fabric: list[Pod] = []
    non_fabric: list[Pod] = []
    for pod in pods:
        (non_fabric if is_non_fabric_pod(pod) else fabric).append(pod)
    return fabric, non_fabric


def pod_node_names(pods: Iterable[Pod]) -> set[str]:
    """The nodes that run one of these pods (input of `prune_clique_daemons`)."""
    return {n for p in pods if (n := p.node_name)}


def group_by_cd(objs: Iterable[T]) -> dict[str, list[T]]:
    """Objects (pods, cliques) grouped by their CD label value; unlabeled/empty skipped."""
    groups: dict[str, list[T]] = {}
    for obj in objs:
        if uid := obj.label(names.LABEL_COMPUTE_DOMAIN):
            groups.setdefault(uid, []).append(obj)
    return groups


# --- status.nodes -------------------------------------------------------------------------


def _non_fabric_entries(pods: Iterable[Pod]) -> list[dict[str, Any]]:
    """One entry per node with a non-fabric daemon pod that is scheduled and has an IP.

    When a node has several (a replaced pod still terminating), the live, ready one wins,
    so the list never holds the same name twice (the API refuses duplicate map keys).
    """

    def preference(pod: Pod) -> tuple[bool, bool, str]:
        return pod.deleting, not pod.ready, pod.name

    best: dict[str, Pod] = {}
    for pod in pods:
        node = pod.node_name
        if not node or not pod.ip:
            continue
        if node not in best or preference(pod) < preference(best[node]):
            best[node] = pod
    return [
        {
            "name": node,
            "ipAddress": pod.ip,
            "cliqueID": "",
            "index": NON_FABRIC_INDEX,
            "status": names.STATUS_READY if pod.ready else names.STATUS_NOT_READY,
        }
        for node, pod in sorted(best.items())
    ]


def _unique_names(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """First entry per name: `status.nodes` is a list map keyed by name."""
    seen: set[str] = set()
    out = []
    for entry in entries:
        if entry["name"] not in seen:
            seen.add(entry["name"])
            out.append(entry)
    return out


def _clique_entry(daemon: ComputeDomainDaemonInfo, index: int) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": daemon.node_name,
        "ipAddress": daemon.ip_address,
        "cliqueID": daemon.clique_id,
        "index": index,
    }
    if daemon.status:  # omitempty, as the reference serializes it
        entry["status"] = daemon.status
    return entry


def nodes_from_cliques(
    cliques: Iterable[ComputeDomainClique], daemon_pods: Iterable[Pod]
) -> list[dict[str, Any]]:
    """`status.nodes` of one CD with the cliques gate on.

    Every daemon of the CD's cliques, with the index it holds (api/clique.py
    `settled_indices`: a daemon that appended at the same time as another writes its own
    with its next write), then the non-fabric daemon pods (which have no clique). The
    reference's order is map order, i.e. random; ours is sorted so that equal inputs give
    equal lists.
    """
    from_cliques = sorted(
        (_clique_entry(d, index) for c in cliques
         for d, index in zip(c.daemons or (), settled_indices([d.index for d in c.daemons or ()]),
                             strict=True) if d.node_name),
        key=lambda e: (e["cliqueID"], e["index"], e["name"]),
    )
    _, non_fabric = split_pods(daemon_pods)
    return _unique_names([*from_cliques, *_non_fabric_entries(non_fabric)])


def nodes_legacy(
    existing: Iterable[ComputeDomainNode], daemon_pods: Iterable[Pod]
) -> list[dict[str, Any]]:
    """`status.nodes` of one CD with the cliques gate off.

    The daemons write their own fabric entries into CD status; the controller only drops
    those whose IP no fabric daemon pod of the CD holds any more (the pod is gone or was
    replaced), and rebuilds the non-fabric entries from the pods. A kept entry is written
    back as it was read.
    """
    fabric, non_fabric = split_pods(daemon_pods)
    fabric_ips = {ip for p in fabric if (ip := p.ip)}
    kept = [n.as_read() for n in existing if n.name and n.clique_id and n.ip_address in fabric_ips]
    return _unique_names([*kept, *_non_fabric_entries(non_fabric)])


def nodes_legacy_agents(
    existing: Iterable[ComputeDomainNode], labeled_nodes: set[str]
) -> list[dict[str, Any]]:
    """`status.nodes` with the cliques gate off in agent placement: the agents write their
    entries; the controller drops those of nodes that no longer carry the domain's label
    (there are no daemon pods to go by, and no non-fabric entries: a node without NVLink
    runs no IMEX)."""
    kept = [n.as_read() for n in existing
            if n.name and n.clique_id and n.name in labeled_nodes]
    return _unique_names(kept)


def _comparable(entry: ComputeDomainNode | Mapping[str, Any]) -> tuple[Any, ...]:
    # Go zero values: a missing index is 0, a missing string is "".
    if isinstance(entry, ComputeDomainNode):
        return (entry.name, entry.ip_address, entry.clique_id, entry.index, entry.status or "")
    get = entry.get  # NODE_FIELDS, spelled out: this runs for every entry of every reconcile
    return (get("name") or "", get("ipAddress") or "", get("cliqueID") or "",
            get("index") or 0, get("status") or "")


def nodes_equal(
    a: Iterable[ComputeDomainNode | Mapping[str, Any]],
    b: Iterable[ComputeDomainNode | Mapping[str, Any]],
) -> bool:
    """Whether two `status.nodes` lists, each as read (parsed) or as about to be written
    (JSON), say the same thing: compared as maps by name over all five fields, ignoring
    order (a duplicate name: the last one wins)."""

    def by_name(
        nodes: Iterable[ComputeDomainNode | Mapping[str, Any]],
    ) -> dict[Any, tuple[Any, ...]]:
        return {(c := _comparable(n))[0]: c for n in nodes}

    return by_name(a) == by_name(b)


def nodes_changed(
    a: Iterable[ComputeDomainNode | Mapping[str, Any]],
    b: Iterable[ComputeDomainNode | Mapping[str, Any]],
) -> int:
    """How many names `nodes_equal` finds different between two `status.nodes` lists:
    added, removed, or with any field changed (0: equal)."""
    old = {(c := _comparable(n))[0]: c for n in a}
    new = {(c := _comparable(n))[0]: c for n in b}
    return sum(1 for name in old.keys() | new.keys() if old.get(name) != new.get(name))


# --- cliques ------------------------------------------------------------------------------


def prune_clique_daemons(
    clique: ComputeDomainClique, nodes_with_daemon_pods: set[str]
) -> list[dict[str, Any]] | None:
    """The clique's `daemons` (as read) without entries for nodes that run no daemon pod,
    or None when nothing would change (so no update is sent).

    Stricter than the reference: the caller passes the nodes running a daemon pod *of this
    clique's CD*, where the reference keeps an entry while any CD's daemon runs on the node.
    A node carries at most one CD label, so once it moved to another CD, the old CD's entry
    for it would otherwise linger in the old CD's status and IMEX peer list for good.
    """
    daemons = clique.daemons or []
    kept = [d for d in daemons if d.node_name in nodes_with_daemon_pods]
    if len(kept) == len(daemons):
        return None
    return [d.as_read() for d in kept]
