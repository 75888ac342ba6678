"""The pod printer (printPod in
https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/printers/internalversion/printers.go):
the READY, STATUS and RESTARTS cells `kubectl get pods` shows, from the containers' states.

STATUS is the pod's reason or phase, overridden by the first init container that has not
finished (`Init:0/2`, `Init:CrashLoopBackOff`, `Init:Error`), else by the last app container
that waits or terminated (`ContainerCreating`, `CrashLoopBackOff`, `Completed`, `Error`), and
by deletion (`Terminating`, `Unknown` on a lost node). RESTARTS adds `(5m ago)`, the latest
restart's age. Init containers with `restartPolicy: Always` (sidecars) count as containers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sim.apiserver.printers import (
    NONE,
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

NODE_LOST: Final = "NodeLost"  # k8s.io/kubernetes/pkg/util/node.NodeUnreachablePodReason
SCHEDULING_GATED: Final = "SchedulingGated"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
# The rows' conditions kubectl's `--show-all`-era filters read (podSuccessConditions...).
_COMPLETED: Final = {
    "Succeeded": {"type": "Completed", "status": "True", "reason": "Succeeded",
                  "message": "The pod has completed successfully."},
    "Failed": {"type": "Completed", "status": "True", "reason": "Failed",
               "message": "The pod failed."},
}  # fmt: skip


@dataclass
class PodSummary:
    """What printPod derives from a pod's containers."""

    reason: str
    ready: int
    total: int
    restarts: int
    last_restart: datetime | None

    @property
    def restarts_cell(self) -> str:
        if self.restarts and self.last_restart is not None:
            return f"{self.restarts} ({since(self.last_restart.isoformat())} ago)"
        return str(self.restarts)


def _later(current: datetime | None, container: Obj) -> datetime | None:
    """The later of `current` and the container's last termination."""
    last = ((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
    finished = parse_time(last)
    if finished is None or (current is not None and finished <= current):
        return current
    return finished


def _terminated_reason(terminated: Obj, prefix: str = "") -> str:
    if terminated.get("reason"):
        return prefix + str(terminated["reason"])
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{terminated.get('exitCode', 0)}"


def _condition_true(pod: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in status(pod).get("conditions") or ())  # fmt: skip


def _init_containers(pod: Obj, summary: PodSummary) -> tuple[bool, int, datetime | None]:
    """Walk the init containers' statuses: (initializing, sidecar restarts, their latest)."""
    sidecars = {c.get("name") for c in spec(pod).get("initContainers") or ()
                if c.get("restartPolicy") == "Always"}  # fmt: skip
    total = len(spec(pod).get("initContainers") or ())
    side_restarts, side_last = 0, None
    for i, container in enumerate(status(pod).get("initContainerStatuses") or ()):
        count = int(container.get("restartCount") or 0)
        summary.restarts += count
        summary.last_restart = _later(summary.last_restart, container)
        sidecar = container.get("name") in sidecars
        if sidecar:
            side_restarts += count
            side_last = _later(side_last, container)
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated is not None and int(terminated.get("exitCode") or 0) == 0:
            continue
        if sidecar and container.get("started"):
            summary.ready += bool(container.get("ready"))
            continue
        if terminated is not None:
            summary.reason = _terminated_reason(terminated, "Init:")
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            summary.reason = f"Init:{waiting['reason']}"
        else:
            summary.reason = f"Init:{i}/{total}"
        return True, side_restarts, side_last
    return False, side_restarts, side_last


def _app_containers(pod: Obj, summary: PodSummary) -> None:
    has_running, error_reason = False, ""
    for container in reversed(status(pod).get("containerStatuses") or ()):
        summary.restarts += int(container.get("restartCount") or 0)
        summary.last_restart = _later(summary.last_restart, container)
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting is not None and waiting.get("reason"):
            summary.reason = str(waiting["reason"])
        elif terminated is not None:
            summary.reason = _terminated_reason(terminated)
            if int(terminated.get("exitCode") or 0) != 0:
                error_reason = summary.reason
        elif container.get("ready") and state.get("running") is not None:
            has_running = True
            summary.ready += 1
    if summary.reason == "Completed":
        if has_running and _condition_true(pod, "Ready"):
            summary.reason = "Running"
        elif error_reason:
            summary.reason = error_reason
        elif has_running:
            summary.reason = "NotReady"


def summarize(pod: Obj) -> PodSummary:
    """printPod's READY, STATUS and RESTARTS."""
    st = status(pod)
    inits = spec(pod).get("initContainers") or ()
    sidecars = sum(c.get("restartPolicy") == "Always" for c in inits)
    summary = PodSummary(
        reason=str(st.get("reason") or st.get("phase") or ""),
        ready=0,
        total=len(spec(pod).get("containers") or ()) + sidecars,
        restarts=0,
        last_restart=None,
    )
    if any(c.get("type") == "PodScheduled" and c.get("reason") == SCHEDULING_GATED
           for c in st.get("conditions") or ()):  # fmt: skip
        summary.reason = SCHEDULING_GATED
    initializing, side_restarts, side_last = _init_containers(pod, summary)
    if not initializing or _condition_true(pod, "Initialized"):
        summary.restarts, summary.last_restart = side_restarts, side_last
        _app_containers(pod, summary)
    deleting = bool(meta(pod).get("deletionTimestamp"))
    if deleting and st.get("reason") == NODE_LOST:
        summary.reason = "Unknown"
    elif deleting and st.get("phase") not in TERMINAL_PHASES:
        summary.reason = "Terminating"
    return summary


def _pod_ip(pod: Obj) -> str:
    ips = status(pod).get("podIPs") or ()
    first = ips[0].get("ip") if ips and isinstance(ips[0], dict) else None
    return str(first or status(pod).get("podIP") or NONE)


def _readiness_gates(pod: Obj) -> str:
    gates = spec(pod).get("readinessGates") or ()
    if not gates:
        return NONE
    conditions = status(pod).get("conditions") or ()
    true = 0
    for gate in gates:
        first = next((c for c in conditions if c.get("type") == gate.get("conditionType")), None)
        true += first is not None and first.get("status") == "True"
    return f"{true}/{len(gates)}"


def pod_columns() -> list[Column]:
    res = "pods"
    return [
        name_column(),
        column(res, "Ready", lambda p: f"{summarize(p).ready}/{summarize(p).total}"),
        column(res, "Status", lambda p: summarize(p).reason),
        column(res, "Restarts", lambda p: summarize(p).restarts_cell),
        age_column(),
        column(res, "IP", _pod_ip, priority=1),
        column(res, "Node", lambda p: spec(p).get("nodeName") or NONE, priority=1),
        column(res, "Nominated Node",
               lambda p: status(p).get("nominatedNodeName") or NONE, priority=1),
        column(res, "Readiness Gates", _readiness_gates, priority=1),
    ]  # fmt: skip


def row_conditions(pod: Obj) -> list[dict[str, Any]] | None:
    """The row's `Completed` condition of a pod that succeeded or failed."""
    done = _COMPLETED.get(str(status(pod).get("phase")))
    return [dict(done)] if done else None
