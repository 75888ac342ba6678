"""Server-side printing (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`): the Table
`kubectl get` prints.

Built-in kinds print their upstream printer's columns (sim/apiserver/printers.py and the
modules it names); the others kube-apiserver's default convertor's Name and Created At
(https://github.com/kubernetes/kubernetes/blob/v1.37.2/staging/src/k8s.io/apiserver/pkg/registry/rest/table.go).
Custom resources print their CRD's additionalPrinterColumns, or Age when it has none
(staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor).
A row carries the object's metadata (`includeObject=Metadata`, the default), the whole
object (`Object`, which `kubectl get --sort-by` asks for) or nothing (`None`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from sim.apiserver import (
    errors,
    node_printers,
    pod_printer,
    printers,
    replicaset_printer,
    workload_printers,
)
from sim.apiserver.go_format import go_quote
from sim.apiserver.printer_docs import CREATION_TIMESTAMP
from sim.apiserver.printer_docs import NAME as NAME_DOC
from sim.apiserver.printers import Column, Obj
from sim.apiserver.resources import ResourceInfo

Cell = str | None | Callable[[Obj], Any]
INCLUDE_OBJECT: Final = ("Object", "Metadata", "None")

# Built-in kinds with a printer of their own, by (group, kind).
_PRINTERS: Final[Mapping[tuple[str, str], Callable[[], list[Column]]]] = {
    ("", "Pod"): pod_printer.pod_columns,
    ("", "Node"): node_printers.node_columns,
    ("", "Event"): node_printers.event_columns,
    ("", "Namespace"): printers.namespace_columns,
    ("", "ConfigMap"): printers.configmap_columns,
    ("", "Secret"): printers.secret_columns,
    ("", "ServiceAccount"): printers.name_and_age,
    ("apps", "DaemonSet"): workload_printers.daemon_set_columns,
    ("apps", "Deployment"): workload_printers.deployment_columns,
    ("apps", "ReplicaSet"): replicaset_printer.replica_set_columns,
    ("batch", "Job"): workload_printers.job_columns,
    ("coordination.k8s.io", "Lease"): printers.lease_columns,
    ("scheduling.k8s.io", "PriorityClass"): printers.priority_class_columns,
    ("rbac.authorization.k8s.io", "RoleBinding"): printers.role_binding_columns("rolebindings"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): printers.role_binding_columns(
        "clusterrolebindings"
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"):
        printers.admission_policy_columns,
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"):
        printers.admission_binding_columns,
    ("resource.k8s.io", "ResourceClaim"): printers.claim_columns,
    ("resource.k8s.io", "ResourceClaimTemplate"): printers.name_and_age,
    ("resource.k8s.io", "ResourceSlice"): printers.slice_columns,
    ("resource.k8s.io", "DeviceClass"): printers.name_and_age,
    ("apiextensions.k8s.io", "CustomResourceDefinition"): printers.crd_columns,
}  # fmt: skip
_NAME: Final = printers.definition("Name", NAME_DOC, fmt="name")


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def include_object(query: Mapping[str, str]) -> str:
    """The `includeObject` parameter of a Table request; a 400 for an unknown value."""
    value = query.get("includeObject") or "Metadata"
    if value not in INCLUDE_OBJECT:
        raise errors.bad_request(f"unrecognized includeObject value: {go_quote(value)}")
    return value


def _custom_columns(info: ResourceInfo) -> list[tuple[dict[str, Any], Cell]]:
    out: list[tuple[dict[str, Any], Cell]] = []
    for col in info.printer_columns or (
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
         "description": CREATION_TIMESTAMP},
    ):  # fmt: skip
        path = col.get("jsonPath", "")
        description = col.get("description") or (
            f"Custom resource definition column (in JSONPath format): {path}"
        )
        definition = printers.definition(
            col.get("name", ""), description, type_=col.get("type", "string"),
            priority=col.get("priority", 0), fmt=col.get("format", ""),
        )  # fmt: skip
        out.append((definition, path))
    return out


def columns(info: ResourceInfo) -> list[tuple[dict[str, Any], Cell]]:
    """(definition, cell function or JSONPath) pairs, the Name column first."""
    if not info.builtin:
        return [(_NAME, ".metadata.name"), *_custom_columns(info)]
    printer = _PRINTERS.get((info.group, info.kind))
    if printer is not None:
        return list(printer())
    created = printers.definition("Created At", CREATION_TIMESTAMP, type_="date")
    return [(_NAME, ".metadata.name"), (created, printers.created_at)]


def _json_path(obj: Any, path: str) -> Any:
    """The simple `.a.b` and `.a[0].b` JSONPaths printer columns use."""
    current = obj
    for part in path.strip().lstrip(".").replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("[") and part.endswith("]"):
            try:
                current = current[int(part[1:-1])]
            except (ValueError, IndexError, KeyError, TypeError):
                return None
        elif isinstance(current, dict):
            current = current.get(part)
        else:
            return None
        if current is None:
            return None
    return current


def _cell(definition: dict[str, Any], path: Cell, obj: Obj) -> Any:
    if callable(path):
        return path(obj)
    if path is None:
        return None
    value = _json_path(obj, path)
    if definition["type"] == "date":
        if not isinstance(value, str):
            return None
        parsed = printers.parse_time(value)
        return printers.since(value) if parsed else "<invalid>"
    if value is None:
        return None
    if isinstance(value, dict | list):
        return str(value)
    return value


def _row(info: ResourceInfo, cols: list[tuple[dict[str, Any], Cell]], obj: Obj,
         include: str) -> dict[str, Any]:  # fmt: skip
    row: dict[str, Any] = {"cells": [_cell(d, p, obj) for d, p in cols]}
    if info.builtin and (info.group, info.kind) == ("", "Pod"):
        conditions = pod_printer.row_conditions(obj)
        if conditions:
            row["conditions"] = conditions
    if include == "Object":
        row["object"] = obj
    elif include == "Metadata":
        row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                         "metadata": obj.get("metadata", {})}  # fmt: skip
    else:
        row["object"] = None
    return row


def table(
    info: ResourceInfo,
    objects: list[Obj],
    list_meta: dict[str, Any],
    *,
    include: str = "Metadata",
    headers: bool = True,
) -> dict[str, Any]:
    """The Table of `objects`; a watch sends the column definitions with its first event
    only (`headers=False` after it), as kube-apiserver's watch encoder does."""
    cols = columns(info)
    out: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta}
    out["columnDefinitions"] = [d for d, _ in cols] if headers else None
    out["rows"] = [_row(info, cols, obj, include) for obj in objects]
    return out
