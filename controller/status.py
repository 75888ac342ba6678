"""ComputeDomain status aggregation, as pure functions over API JSON (reference §4).

The controller's 2-second sync feeds these with what its caches hold (CDs, daemon pods,
cliques) and writes back only what changed. Per-node readiness comes from the daemons
(through their clique entries, or directly in CD status when the cliques gate is off)
and, for non-fabric nodes, from the daemon pod's Ready condition, which the daemon's
readiness probe drives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from api import names

NON_FABRIC_INDEX: Final = -1
NODE_FIELDS: Final = ("name", "ipAddress", "cliqueID", "index", "status")


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


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def is_non_fabric_pod(pod: Mapping[str, Any]) -> bool:
    """A daemon on a node without NVLink fabric: the daemon set its clique label to "".

    A pod without the label is still starting and counts as fabric, as in the reference.
    """
    return _labels(pod).get(names.LABEL_CLIQUE_ID, None) == ""


def split_pods(
    pods: Iterable[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(fabric, non-fabric) daemon pods, by the clique label rule of `is_non_fabric_pod`."""
    fabric: list[Mapping[str, Any]] = []
    non_fabric: list[Mapping[str, Any]] = []
    for pod in pods:
        (non_fabric if is_non_fabric_pod(pod) else fabric).append(pod)
    return fabric, non_fabric


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Whether the pod condition Ready is True."""
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def pod_node_name(pod: Mapping[str, Any]) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


def pod_ip(pod: Mapping[str, Any]) -> str:
    return (pod.get("status") or {}).get("podIP") or ""


def pod_node_names(pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """The nodes that run one of these pods (input of `prune_clique_daemons`)."""
    return {n for p in pods if (n := pod_node_name(p))}


def group_by_cd(objs: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Objects (pods, cliques) grouped by their CD label value; unlabeled/empty skipped."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for obj in objs:
        if uid := _labels(obj).get(names.LABEL_COMPUTE_DOMAIN):
            groups.setdefault(uid, []).append(obj)
    return groups


# --- status.nodes -------------------------------------------------------------------------


def _non_fabric_entries(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per node with a non-fabric daemon pod that is scheduled and has an IP.

    When a node has several (a replaced pod still terminating), the live, ready one wins,
    so the list never holds the same name twice (the API refuses duplicate map keys).
    """

    def preference(pod: Mapping[str, Any]) -> tuple[bool, bool, str]:
        terminating = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        name = (pod.get("metadata") or {}).get("name") or ""
        return terminating, not pod_ready(pod), name

    best: dict[str, Mapping[str, Any]] = {}
    for pod in pods:
        node, ip = pod_node_name(pod), pod_ip(pod)
        if not node or not ip:
            continue
        if node not in best or preference(pod) < preference(best[node]):
            best[node] = pod
    return [
        {
            "name": node,
            "ipAddress": pod_ip(pod),
            "cliqueID": "",
            "index": NON_FABRIC_INDEX,
            "status": names.STATUS_READY if pod_ready(pod) else names.STATUS_NOT_READY,
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


def _clique_entry(daemon: Mapping[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": daemon.get("nodeName") or "",
        "ipAddress": daemon.get("ipAddress") or "",
        "cliqueID": daemon.get("cliqueID") or "",
        "index": daemon.get("index") or 0,
    }
    if status := daemon.get("status"):  # omitempty, as the reference serializes it
        entry["status"] = status
    return entry


def nodes_from_cliques(
    cliques: Iterable[Mapping[str, Any]], daemon_pods: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """`status.nodes` of one CD with the cliques gate on.

    Every daemon of the CD's cliques, then the non-fabric daemon pods (which have no
    clique). The reference's order is map order, i.e. random; ours is sorted so that
    equal inputs give equal lists.
    """
    from_cliques = sorted(
        (_clique_entry(d) for c in cliques for d in c.get("daemons") or () if d.get("nodeName")),
        key=lambda e: (e["cliqueID"], e["index"], e["name"]),
    )
    _, non_fabric = split_pods(daemon_pods)
    return _unique_names([*from_cliques, *_non_fabric_entries(non_fabric)])


def nodes_legacy(
    existing: Iterable[Mapping[str, Any]], daemon_pods: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """`status.nodes` of one CD with the cliques gate off.

    The daemons write their own fabric entries into CD status; the controller only drops
    those whose IP no fabric daemon pod of the CD holds any more (the pod is gone or was
    replaced), and rebuilds the non-fabric entries from the pods.
    """
    fabric, non_fabric = split_pods(daemon_pods)
    fabric_ips = {ip for p in fabric if (ip := pod_ip(p))}
    kept = [
        dict(n)
        for n in existing
        if n.get("name") and n.get("cliqueID") and n.get("ipAddress") in fabric_ips
    ]
    return _unique_names([*kept, *_non_fabric_entries(non_fabric)])


def _comparable(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    # Go zero values: a missing index is 0, a missing string is "".
    return tuple(entry.get(f) or (0 if f == "index" else "") for f in NODE_FIELDS)


def nodes_equal(a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]]) -> bool:
    """Whether two `status.nodes` lists say the same thing: compared as maps by name over
    all five fields, ignoring order (a duplicate name: the last one wins)."""

    def by_name(nodes: Iterable[Mapping[str, Any]]) -> dict[Any, tuple[Any, ...]]:
        return {n.get("name"): _comparable(n) for n in nodes}

    return by_name(a) == by_name(b)


# --- cliques ------------------------------------------------------------------------------


def prune_clique_daemons(
    clique: Mapping[str, Any], nodes_with_daemon_pods: set[str]
) -> list[dict[str, Any]] | None:
    """The clique's `daemons` without entries for nodes that run no daemon pod, or None
    when nothing would change (so no update is sent).

    Stricter than the reference: the caller passes the nodes running a daemon pod *of this
    clique's CD*, where the reference keeps an entry while any CD's daemon runs on the node.
    A node carries at most one CD label, so once it moved to another CD, the old CD's entry
    for it would otherwise linger in the old CD's status and IMEX peer list for good.
    """
    daemons = list(clique.get("daemons") or ())
    kept = [dict(d) for d in daemons if d.get("nodeName") in nodes_with_daemon_pods]
    if len(kept) == len(daemons):
        return None
    return kept
