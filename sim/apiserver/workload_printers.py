"""The DaemonSet, Deployment and Job printers (printDaemonSet, printDeployment, printJob in
https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/printers/internalversion/printers.go):
what `kubectl get ds,deploy,jobs` shows of the driver's IMEX daemons and its controller.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from sim.apiserver.label_selectors import SelectorError, label_selector_from_dict
from sim.apiserver.printers import (
    Column,
    Obj,
    age_column,
    column,
    format_label_selector,
    format_labels,
    human_duration,
    meta,
    name_column,
    parse_time,
    spec,
    status,
)


def _pod_spec(obj: Obj) -> Obj:
    return (spec(obj).get("template") or {}).get("spec") or {}


def _containers(obj: Obj) -> str:
    """layoutContainerCells: the template's container names, comma-joined."""
    return ",".join(str(c.get("name", "")) for c in _pod_spec(obj).get("containers") or ())


def _images(obj: Obj) -> str:
    return ",".join(str(c.get("image", "")) for c in _pod_spec(obj).get("containers") or ())


def _template_columns(resource: str, selector: Callable[[Obj], str]) -> list[Column]:
    return [
        column(resource, "Containers", _containers, priority=1),
        column(resource, "Images", _images, priority=1),
        column(resource, "Selector", selector, priority=1),
    ]


def _number(key: str) -> Callable[[Obj], int]:
    return lambda o: int(status(o).get(key) or 0)


def _selector(obj: Obj) -> str:
    return format_label_selector(spec(obj).get("selector"))


def daemon_set_columns() -> list[Column]:
    res = "daemonsets"
    node_selector = lambda o: format_labels(_pod_spec(o).get("nodeSelector"))  # noqa: E731
    return [
        name_column(),
        column(res, "Desired", _number("desiredNumberScheduled"), type_="integer"),
        column(res, "Current", _number("currentNumberScheduled"), type_="integer"),
        column(res, "Ready", _number("numberReady"), type_="integer"),
        column(res, "Up-to-date", _number("updatedNumberScheduled"), type_="integer"),
        column(res, "Available", _number("numberAvailable"), type_="integer"),
        column(res, "Node Selector", node_selector),
        age_column(),
        *_template_columns(res, _selector),
    ]


def _deployment_selector(obj: Obj) -> str:
    """The selector's String(), without printDaemonSet's `<none>` for an empty one."""
    try:
        return str(label_selector_from_dict(spec(obj).get("selector")))
    except SelectorError:
        return "<invalid>"


def deployment_columns() -> list[Column]:
    res = "deployments"
    ready = lambda o: f"{_number('readyReplicas')(o)}/{int(spec(o).get('replicas') or 0)}"  # noqa: E731
    return [
        name_column(),
        column(res, "Ready", ready),
        column(res, "Up-to-date", _number("updatedReplicas")),
        column(res, "Available", _number("availableReplicas")),
        age_column(),
        *_template_columns(res, _deployment_selector),
    ]


def _completions(job: Obj) -> str:
    succeeded = int(status(job).get("succeeded") or 0)
    if spec(job).get("completions") is not None:
        return f"{succeeded}/{spec(job)['completions']}"
    parallelism = int(spec(job).get("parallelism") or 0)
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def _duration(job: Obj) -> str:
    start = parse_time(status(job).get("startTime"))
    if start is None:
        return ""
    end = parse_time(status(job).get("completionTime")) or datetime.now(UTC)
    return human_duration((end - start).total_seconds())


# The conditions that name the job's STATUS, before and after deletion (`Terminating`).
_FINISHED = ("Complete", "Failed")
_PROGRESS = ("Suspended", "FailureTarget", "SuccessCriteriaMet")


def _job_condition(job: Obj, kind: str) -> bool:
    """hasJobCondition: the first condition of `kind` decides."""
    for condition in status(job).get("conditions") or ():
        if condition.get("type") == kind:
            return condition.get("status") == "True"
    return False


def _job_status(job: Obj) -> str:
    for kind in _FINISHED:
        if _job_condition(job, kind):
            return kind
    if meta(job).get("deletionTimestamp"):
        return "Terminating"
    return next((kind for kind in _PROGRESS if _job_condition(job, kind)), "Running")


def job_columns() -> list[Column]:
    res = "jobs"
    return [
        name_column(),
        column(res, "Status", _job_status),
        column(res, "Completions", _completions),
        column(res, "Duration", _duration),
        age_column(),
        *_template_columns(res, _selector),
    ]
