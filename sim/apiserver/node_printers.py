"""The node and event printers (printNode, printEvent in
https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/printers/internalversion/printers.go):
`kubectl get nodes` and `kubectl get events`, the two an admin reads first when a node's
devices do not show up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.apiserver.printers import (
    NONE,
    UNKNOWN,
    Column,
    Obj,
    age_column,
    column,
    meta,
    name_column,
    parse_time,
    since,
    spec,
    status,
)

_ROLE_PREFIX = "node-role.kubernetes.io/"
_ROLE_LABEL = "kubernetes.io/role"


def _node_status(node: Obj) -> str:
    """Only the Ready condition counts: `Ready`, `NotReady` (False or Unknown), `Unknown`
    without one; `,SchedulingDisabled` when cordoned."""
    ready = None
    for condition in status(node).get("conditions") or ():
        if condition.get("type") == "Ready":
            ready = condition  # a later duplicate wins, as in the printer's map
    states = ["Unknown" if ready is None else
              "Ready" if ready.get("status") == "True" else "NotReady"]  # fmt: skip
    if spec(node).get("unschedulable"):
        states.append("SchedulingDisabled")
    return ",".join(states)


def _roles(node: Obj) -> str:
    roles = set()
    for key, value in (meta(node).get("labels") or {}).items():
        if key.startswith(_ROLE_PREFIX) and key[len(_ROLE_PREFIX) :]:
            roles.add(key[len(_ROLE_PREFIX) :])
        elif key == _ROLE_LABEL and value:
            roles.add(value)
    return ",".join(sorted(roles)) or NONE


def _address(kind: str) -> Callable[[Obj], str]:
    def cell(node: Obj) -> str:
        for address in status(node).get("addresses") or ():
            if address.get("type") == kind:
                return str(address.get("address") or "")
        return NONE

    return cell


def _info(key: str) -> Callable[[Obj], str]:
    return lambda n: str((status(n).get("nodeInfo") or {}).get(key) or UNKNOWN)


def _kernel(node: Obj) -> str:
    info = status(node).get("nodeInfo") or {}
    kernel = str(info.get("kernelVersion") or UNKNOWN)
    return f"{kernel} ({info['architecture']})" if info.get("architecture") else kernel


def node_columns() -> list[Column]:
    res = "nodes"
    version = lambda n: str((status(n).get("nodeInfo") or {}).get("kubeletVersion") or "")  # noqa: E731
    return [
        name_column(),
        column(res, "Status", _node_status),
        column(res, "Roles", _roles),
        age_column(),
        column(res, "Version", version),
        column(res, "Internal-IP", _address("InternalIP"), priority=1),
        column(res, "External-IP", _address("ExternalIP"), priority=1),
        column(res, "OS-Image", _info("osImage"), priority=1),
        column(res, "Kernel-Version", _kernel, priority=1),
        column(res, "Container-Runtime", _info("containerRuntimeVersion"), priority=1),
    ]


# --- events ----------------------------------------------------------------------------------


def _first_seen(event: Obj) -> str:
    if parse_time(event.get("firstTimestamp")) is not None:
        return since(event.get("firstTimestamp"))
    return since(event.get("eventTime"))


def _last_seen(event: Obj) -> str:
    """The series' last observation, else lastTimestamp, else when it was first seen."""
    if event.get("series") is not None:
        return since(event["series"].get("lastObservedTime"))
    if parse_time(event.get("lastTimestamp")) is not None:
        return since(event.get("lastTimestamp"))
    return _first_seen(event)


def _count(event: Obj) -> int:
    if event.get("series") is not None:
        return int(event["series"].get("count") or 0)
    return int(event.get("count") or 0) or 1  # singleton events of the new API have none


def _target(event: Obj) -> str:
    involved = event.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    return f"{kind}/{involved['name']}" if involved.get("name") else kind


def _source(event: Obj) -> str:
    """formatEventSource: `component, host`, from reportingController/Instance when the
    legacy source is empty."""
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    host = source.get("host") or event.get("reportingInstance") or ""
    return f"{component}, {host}" if host else str(component)


def _text(key: str) -> Callable[[Obj], Any]:
    return lambda e: str(e.get(key) or "")


def event_columns() -> list[Column]:
    res = "events"
    field_path = lambda e: str((e.get("involvedObject") or {}).get("fieldPath") or "")  # noqa: E731
    return [
        column(res, "Last Seen", _last_seen),
        column(res, "Type", _text("type")),
        column(res, "Reason", _text("reason")),
        column(res, "Object", _target),
        column(res, "Subobject", field_path, priority=1),
        column(res, "Source", _source, priority=1),
        column(res, "Message", lambda e: str(e.get("message") or "").strip()),
        column(res, "First Seen", _first_seen, priority=1),
        column(res, "Count", _count, priority=1),
        name_column(priority=1),
    ]
