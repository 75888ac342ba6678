"""kube-apiserver's table printers of Pods, Nodes, ResourceClaims and ResourceSlices
(pkg/printers/internalversion): the columns `kubectl get` shows, `-o wide` adding the
priority-1 ones. Each column is its definition and a function of the object giving the
cell."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

Obj = dict[str, Any]
Column = tuple[dict[str, Any], Callable[[Obj], Any]]
NONE: Final = "<none>"


def _col(name: str, description: str, cell: Callable[[Obj], Any], priority: int = 0) -> Column:
    definition = {"name": name, "type": "string", "format": "", "priority": priority,
                  "description": description}  # fmt: skip
    return definition, cell


def _pod_status(pod: Obj) -> tuple[str, int, int]:
    """(STATUS, ready containers, restarts) as printPod computes them."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    restarts = ready = 0
    running = False
    for container in reversed(status.get("containerStatuses") or ()):
        restarts += int(container.get("restartCount") or 0)
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated and terminated.get("reason"):
            reason = terminated["reason"]
        elif terminated:
            signal = terminated.get("signal")
            reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
        elif container.get("ready") and state.get("running"):
            running = True
            ready += 1
    if reason == "Completed" and running:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
        reason = "Running" if conditions.get("Ready") == "True" else "NotReady"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason, ready, restarts


def _ready(pod: Obj) -> str:
    total = len((pod.get("spec") or {}).get("containers") or ())
    return f"{_pod_status(pod)[1]}/{total}"


def _readiness_gates(pod: Obj) -> str:
    gates = [g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or ()]
    if not gates:
        return NONE
    true = {c.get("type") for c in (pod.get("status") or {}).get("conditions") or ()
            if c.get("status") == "True"}  # fmt: skip
    return f"{sum(g in true for g in gates)}/{len(gates)}"


def pod_columns(age: Callable[[Obj], str]) -> list[Column]:
    return [
        _col("Ready", "The aggregate readiness state of this pod for accepting traffic.", _ready),
        _col("Status", "The aggregate status of the containers in this pod.",
             lambda p: _pod_status(p)[0]),
        _col("Restarts", "The number of times the containers in this pod have been restarted "
             "and when the last container in this pod has restarted.",
             lambda p: str(_pod_status(p)[2])),
        _col("Age", "CreationTimestamp is a timestamp representing the server time when this "
             "object was created.", age),
        _col("IP", "podIP address allocated to the pod.",
             lambda p: (p.get("status") or {}).get("podIP") or NONE, 1),
        _col("Node", "NodeName indicates in which node this pod is scheduled.",
             lambda p: (p.get("spec") or {}).get("nodeName") or NONE, 1),
        _col("Nominated Node", "nominatedNodeName is set when this pod preempts other pods.",
             lambda p: (p.get("status") or {}).get("nominatedNodeName") or NONE, 1),
        _col("Readiness Gates", "If specified, all readiness gates will be evaluated for pod "
             "readiness.", _readiness_gates, 1),
    ]  # fmt: skip


def _node_status(node: Obj) -> str:
    ready = next((c for c in (node.get("status") or {}).get("conditions") or ()
                  if c.get("type") == "Ready"), None)  # fmt: skip
    if ready is None:
        text = "Unknown"
    else:
        text = {"True": "Ready", "False": "NotReady"}.get(ready.get("status"), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _roles(node: Obj) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = {k.removeprefix("node-role.kubernetes.io/") for k in labels
             if k.startswith("node-role.kubernetes.io/")}  # fmt: skip
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    roles.discard("")
    return ",".join(sorted(roles)) or NONE


def _address(kind: str) -> Callable[[Obj], str]:
    def cell(node: Obj) -> str:
        for address in (node.get("status") or {}).get("addresses") or ():
            if address.get("type") == kind:
                return str(address.get("address") or NONE)
        return NONE

    return cell


def _info(key: str, missing: str = "<unknown>") -> Callable[[Obj], str]:
    return lambda n: str(((n.get("status") or {}).get("nodeInfo") or {}).get(key) or missing)


def node_columns(age: Callable[[Obj], str]) -> list[Column]:
    return [
        _col("Status", "The status of the node", _node_status),
        _col("Roles", "The roles of the node", _roles),
        _col("Age", "CreationTimestamp is a timestamp representing the server time when this "
             "object was created.", age),
        _col("Version", "Kubelet Version reported by the node.", _info("kubeletVersion", "")),
        _col("Internal-IP", "List of internal IPs for the node.", _address("InternalIP"), 1),
        _col("External-IP", "List of external IPs for the node.", _address("ExternalIP"), 1),
        _col("OS-Image", "OS image reported by the node.", _info("osImage"), 1),
        _col("Kernel-Version", "Kernel version reported by the node.", _info("kernelVersion"),
             1),
        _col("Container-Runtime", "Container runtime reported by the node.",
             _info("containerRuntimeVersion"), 1),
    ]  # fmt: skip


def _claim_state(claim: Obj) -> str:
    states = []
    deleting = bool((claim.get("metadata") or {}).get("deletionTimestamp"))
    if deleting:
        states.append("deleted")
    status = claim.get("status") or {}
    if not status.get("allocation"):
        if not deleting:
            states.append("pending")
    else:
        states.append("allocated")
        if status.get("reservedFor"):
            states.append("reserved")
    return ",".join(states)


def claim_columns(age: Callable[[Obj], str]) -> list[Column]:
    return [
        _col("State", "A summary of the current state (allocated, pending, reserved, etc.).",
             _claim_state),
        _col("Age", "CreationTimestamp is a timestamp representing the server time when this "
             "object was created.", age),
    ]  # fmt: skip


def slice_columns(age: Callable[[Obj], str]) -> list[Column]:
    spec: Callable[[Obj], Obj] = lambda o: o.get("spec") or {}  # noqa: E731
    return [
        _col("Node", "The node the slice's devices are on.",
             lambda o: str(spec(o).get("nodeName") or "")),
        _col("Driver", "The driver that publishes the slice.",
             lambda o: str(spec(o).get("driver") or "")),
        _col("Pool", "The pool the slice belongs to.",
             lambda o: str((spec(o).get("pool") or {}).get("name") or "")),
        _col("Age", "CreationTimestamp is a timestamp representing the server time when this "
             "object was created.", age),
    ]  # fmt: skip
