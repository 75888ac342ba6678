"""Whether a pod may go to a node, as kube-scheduler and the DaemonSet controller decide
it: nodeSelector, required node affinity (NodeSelector terms), taints and tolerations.
One implementation for the simulated cluster's scheduler and DaemonSet controller and for
`diagnose` (which nodes a pending pod waits for), so they can never disagree."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

Obj = dict[str, Any]

BLOCKING_EFFECTS: Final = ("NoSchedule", "NoExecute")


def requirement_matches(expr: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""
    key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    present = key in values_of
    if op == "In":
        return present and values_of[key] in values
    if op == "NotIn":
        return not present or values_of[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(values_of[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selector_matches(selector: Mapping[str, Any] | None, node: Mapping[str, Any]) -> bool:
    """A v1 NodeSelector (None: any node): terms are ORed, a term's expressions and fields
    ANDed, and an empty term matches nothing."""
    if not selector:
        return True
    md = node.get("metadata") or {}
    labels = md.get("labels") or {}
    fields = {"metadata.name": md.get("name", "")}
    for term in selector.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        field_exprs = term.get("matchFields") or []
        if not exprs and not field_exprs:
            continue
        if all(requirement_matches(e, labels) for e in exprs) and all(
            requirement_matches(e, fields) for e in field_exprs
        ):
            return True
    return False


def pod_spec_matches_node(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector and required node affinity of a pod spec."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return node_selector_matches(required or None, node)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Toleration.ToleratesTaint: an empty effect or an `Exists` without key match widely."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (
        taint.get("value") or ""
    )


def untolerated_taint(tolerations: Iterable[Mapping[str, Any]], node: Mapping[str, Any]
                      ) -> Obj | None:
    """The first NoSchedule/NoExecute taint of the node that none of `tolerations` covers."""
    tolerations = list(tolerations)
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in BLOCKING_EFFECTS and not any(
            tolerates(t, taint) for t in tolerations
        ):
            return dict(taint)
    return None
