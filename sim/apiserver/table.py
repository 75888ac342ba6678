"""Server-side printing (`Accept: ...;as=Table`): the columns `kubectl get` shows.

Custom resources print their CRD's additionalPrinterColumns, which is how
`kubectl get computedomains` shows STATUS and AGE.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sim.apiserver import printers
from sim.apiserver.printers import Column
from sim.apiserver.resources import ResourceInfo

Cell = str | None | Callable[[dict[str, Any]], Any]

_NAME = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "priority": 0,
    "description": "Name must be unique within a namespace.",
}
_AGE = {
    "name": "Age",
    "type": "date",
    "format": "",
    "priority": 0,
    "description": "CreationTimestamp is a timestamp representing the server time when "
    "this object was created.",
}


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def human_duration(since: str | None, now: datetime | None = None) -> str:
    """`5s`, `3m`, `2h`, `4d` like kubectl's age column; `<unknown>` without a timestamp."""
    if not since:
        return "<unknown>"
    try:
        then = datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


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


def _age(obj: dict[str, Any]) -> str:
    return human_duration((obj.get("metadata") or {}).get("creationTimestamp"))


# Built-in kinds with a printer of their own (the rest print Name and Age).
_PRINTERS: dict[tuple[str, str], Callable[[Callable[[dict[str, Any]], str]], list[Column]]] = {
    ("", "Pod"): printers.pod_columns,
    ("", "Node"): printers.node_columns,
    ("resource.k8s.io", "ResourceClaim"): printers.claim_columns,
    ("resource.k8s.io", "ResourceSlice"): printers.slice_columns,
}


def columns(info: ResourceInfo) -> list[tuple[dict[str, Any], Cell]]:
    """(definition, JSONPath or function of the object) pairs; Age's path is None
    (computed from creationTimestamp)."""
    out: list[tuple[dict[str, Any], Cell]] = [(_NAME, ".metadata.name")]
    if info.builtin:
        printer = _PRINTERS.get((info.group, info.kind))
        if printer is not None:
            return out + list(printer(_age))
        out.append((_AGE, None))
        return out
    custom = list(info.printer_columns)
    for col in custom:
        definition = {
            "name": col.get("name", ""),
            "type": col.get("type", "string"),
            "format": col.get("format", ""),
            "priority": col.get("priority", 0),
            "description": col.get("description", ""),
        }
        out.append((definition, col.get("jsonPath", "")))
    if not custom:
        out.append((_AGE, None))
    return out


def _cell(definition: dict[str, Any], path: Cell, obj: dict[str, Any]) -> Any:
    if callable(path):
        return path(obj)
    if path is None:
        return human_duration(obj.get("metadata", {}).get("creationTimestamp"))
    value = _json_path(obj, path)
    if definition["type"] == "date":
        return human_duration(value if isinstance(value, str) else None)
    if value is None:
        return None
    if isinstance(value, dict | list):
        return str(value)
    return value


def table(
    info: ResourceInfo, objects: list[dict[str, Any]], list_meta: dict[str, Any]
) -> dict[str, Any]:
    cols = columns(info)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [d for d, _ in cols],
        "rows": [
            {
                "cells": [_cell(d, p, obj) for d, p in cols],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata", {}),
                },
            }
            for obj in objects
        ],
    }
