"""The ReplicaSet printer (printReplicaSet in
https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/printers/internalversion/printers.go):
what `kubectl get rs` shows of a Deployment's ReplicaSets, desired against current and ready.

Registered in sim/apiserver/table.py's `_PRINTERS` as `("apps", "ReplicaSet")`. The column
descriptions are the field docs upstream gives them (k8s.io/api apps/v1
types_swagger_doc_generated.go), kept here until printer_docs.py carries `replicasets`.
"""

from __future__ import annotations

from typing import Final

from sim.apiserver.printers import (
    Cell,
    Column,
    Obj,
    age_column,
    definition,
    format_label_selector,
    name_column,
    spec,
    status,
)

DESCRIPTIONS: Final = {
    "Desired": (
        "Replicas is the number of desired pods. This is a pointer to distinguish between "
        "explicit zero and unspecified. Defaults to 1. More info: "
        "https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"
    ),
    "Current": (
        "Replicas is the most recently observed number of non-terminating pods. More info: "
        "https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"
    ),
    "Ready": (
        "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition."
    ),
    "Containers": "Names of each container in the template.",
    "Images": "Images referenced by each container in the template.",
    "Selector": (
        "Selector is a label query over pods that should match the replica count. Label keys "
        "and values that must match in order to be controlled by this replica set. It must "
        "match the pod template's labels. More info: "
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"
    ),
}


def _containers(rs: Obj) -> list[Obj]:
    return list(((spec(rs).get("template") or {}).get("spec") or {}).get("containers") or ())


def _desired(rs: Obj) -> int:
    """`spec.replicas`, which kube-apiserver defaults to 1 (the emulator may store none)."""
    value = spec(rs).get("replicas")
    return 1 if value is None else int(value)


def _names(rs: Obj) -> str:
    """layoutContainerCells: the template's container names, comma-joined."""
    return ",".join(str(c.get("name", "")) for c in _containers(rs))


def _images(rs: Obj) -> str:
    return ",".join(str(c.get("image", "")) for c in _containers(rs))


def replica_set_columns() -> list[Column]:
    def col(name: str, cell: Cell, type_: str = "string", priority: int = 0) -> Column:
        return definition(name, DESCRIPTIONS[name], type_=type_, priority=priority), cell

    return [
        name_column(),
        col("Desired", _desired, "integer"),
        col("Current", lambda o: int(status(o).get("replicas") or 0), "integer"),
        col("Ready", lambda o: int(status(o).get("readyReplicas") or 0), "integer"),
        age_column(),
        col("Containers", _names, priority=1),
        col("Images", _images, priority=1),
        col("Selector", lambda o: format_label_selector(spec(o).get("selector")), priority=1),
    ]
