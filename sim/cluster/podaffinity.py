"""kube-scheduler's InterPodAffinity score for preferred pod anti-affinity, on the hostname
topology only: what spreads the chart's controller replicas over nodes. Without it both
land on the first node, where the pods share one IP and the second cannot bind its port."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sim.apiserver.label_selectors import SelectorError, label_selector_from_dict

HOSTNAME = "kubernetes.io/hostname"
Obj = Mapping[str, Any]


def has_preferred_anti_affinity(pod: Obj) -> bool:
    return bool(_terms(pod))


def _terms(pod: Obj) -> list[Obj]:
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    anti = affinity.get("podAntiAffinity") or {}
    return list(anti.get("preferredDuringSchedulingIgnoredDuringExecution") or [])


def anti_affinity_penalty(pod: Obj, node: str, placed: Iterable[tuple[Obj, str]]) -> int:
    """Sum of the weights of `pod`'s preferred anti-affinity terms on hostname matched by a
    pod of `placed` (pod, node) on `node`, in the term's namespaces (default: the pod's)."""
    terms = _terms(pod)
    here = [p for p, where in placed if where == node]
    own_ns = (pod.get("metadata") or {}).get("namespace")
    penalty = 0
    for weighted in terms:
        term = weighted.get("podAffinityTerm") or {}
        if term.get("topologyKey") != HOSTNAME or not term.get("labelSelector"):
            continue  # an absent selector selects no pod
        try:
            selector = label_selector_from_dict(term.get("labelSelector"))
        except SelectorError:
            continue
        namespaces = set(term.get("namespaces") or [own_ns])
        if any((p.get("metadata") or {}).get("namespace") in namespaces
               and selector.matches((p.get("metadata") or {}).get("labels")) for p in here):
            penalty += int(weighted.get("weight") or 0)
    return penalty
