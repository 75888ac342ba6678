"""The objects the printer tests create on both servers, each reaching one cell value.

Pods get their statuses by hand (a merge patch of pods/status, as a kubelet would write
them), one pod per STATUS kubectl users see. Past times are whole days or hours ago, so
their ages (`3d`, `20h`) read the same on both servers however long a test runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

Obj = dict[str, Any]
NODE = "print-node-a"


def ago(now: datetime, **delta: float) -> str:
    return (now - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def nodes(now: datetime) -> list[tuple[Obj, Obj | None]]:
    """(node, status): a ready worker with every wide cell, a cordoned NotReady one, one
    whose Ready condition is Unknown, and one that never reported (`Unknown`)."""
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "kubelet is posting ready status", "lastHeartbeatTime": ago(now),
             "lastTransitionTime": ago(now, days=3)}  # fmt: skip
    info = {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.8.0-45",
            "osImage": "Ubuntu 24.04.1 LTS", "containerRuntimeVersion": "containerd://2.0.0",
            "kubeletVersion": "v1.37.2", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": "arm64"}  # fmt: skip
    labels = {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/gpu": "",
              "kubernetes.io/role": "imex", "printing": "yes"}  # fmt: skip
    return [
        ({"metadata": {"name": NODE, "labels": labels}},
         {"conditions": [ready], "nodeInfo": info,
          "addresses": [{"type": "InternalIP", "address": "10.0.0.11"},
                        {"type": "ExternalIP", "address": "203.0.113.11"},
                        {"type": "Hostname", "address": NODE}]}),
        ({"metadata": {"name": "print-node-b", "labels": {"printing": "yes"}},
          "spec": {"unschedulable": True}},
         {"conditions": [ready | {"status": "False", "reason": "KubeletNotReady"}],
          "nodeInfo": info | {"architecture": "", "kernelVersion": "", "osImage": ""},
          "addresses": [{"type": "Hostname", "address": "print-node-b"}]}),
        ({"metadata": {"name": "print-node-c", "labels": {"printing": "yes"}}},
         {"conditions": [ready | {"status": "Unknown", "reason": "NodeStatusUnknown"}]}),
        ({"metadata": {"name": "print-node-d", "labels": {"printing": "yes",
                                                          "kubernetes.io/role": ""}}}, None),
    ]  # fmt: skip


def _container(name: str, **state: Any) -> Obj:
    status: Obj = {"name": name, "image": "busybox:1.36", "imageID": "", "ready": False,
                   "restartCount": 0, "state": state or {"waiting": {}}}  # fmt: skip
    return status


def _running(name: str, now: datetime, **extra: Any) -> Obj:
    return _container(name, running={"startedAt": ago(now, days=3)}) | {
        "ready": True, "started": True, **extra}


def _terminated(name: str, now: datetime, code: int, reason: str | None = None,
                **extra: Any) -> Obj:  # fmt: skip
    terminated: Obj = {"exitCode": code, "startedAt": ago(now, days=3),
                       "finishedAt": ago(now, days=3)}  # fmt: skip
    if reason:
        terminated["reason"] = reason
    terminated.update(extra)
    return _container(name, terminated=terminated)


def _restarted(status: Obj, count: int, finished: str) -> Obj:
    last = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": finished,
                           "finishedAt": finished}}  # fmt: skip
    return status | {"restartCount": count, "lastState": last}


def _conditions(*true: str, false: tuple[str, ...] = ()) -> list[Obj]:
    return ([{"type": t, "status": "True"} for t in true]
            + [{"type": t, "status": "False"} for t in false])  # fmt: skip


def pods(now: datetime) -> list[tuple[str, Obj, Obj | None]]:
    """(name, spec, status) of the pods, one STATUS each; None keeps the server's status."""
    one = {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    two = {"containers": [{"name": "a", "image": "busybox:1.36"},
                          {"name": "b", "image": "busybox:1.36"}]}  # fmt: skip
    inits = one | {"initContainers": [{"name": "i1", "image": "busybox:1.36"},
                                      {"name": "i2", "image": "busybox:1.36"}]}  # fmt: skip
    sidecar = one | {"initContainers": [{"name": "s", "image": "busybox:1.36",
                                         "restartPolicy": "Always"}]}  # fmt: skip
    never = {"restartPolicy": "Never"}
    three_days = ago(now, days=3)
    return [
        ("pending", one, None),
        ("creating", one, {"phase": "Pending", "containerStatuses": [
            _container("c", waiting={"reason": "ContainerCreating"})]}),
        ("running", one | {"readinessGates": [{"conditionType": "example.com/gate"}]},
         {"phase": "Running", "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}],
          "conditions": _conditions("Ready", "example.com/gate"),
          "containerStatuses": [_running("c", now)]}),
        ("completed", one | never, {"phase": "Succeeded", "containerStatuses": [
            _terminated("c", now, 0, "Completed")]}),
        ("error", one | never, {"phase": "Failed", "containerStatuses": [
            _terminated("c", now, 1, "Error")]}),
        ("exit-code", one | never, {"phase": "Failed", "containerStatuses": [
            _terminated("c", now, 137)]}),
        ("signal", one | never, {"phase": "Failed", "containerStatuses": [
            _terminated("c", now, 0, signal=9)]}),
        ("crashloop", one, {"phase": "Running", "containerStatuses": [_restarted(
            _container("c", waiting={"reason": "CrashLoopBackOff", "message": "back-off"}),
            4, three_days)]}),
        ("not-ready", two, {"phase": "Running", "conditions": _conditions(false=("Ready",)),
                            "containerStatuses": [_running("a", now),
                                                  _terminated("b", now, 0, "Completed")]}),
        ("ready-again", two, {"phase": "Running", "conditions": _conditions("Ready"),
                              "containerStatuses": [_running("a", now),
                                                    _terminated("b", now, 0, "Completed")]}),
        ("one-failed", two, {"phase": "Running", "containerStatuses": [
            _terminated("a", now, 2, "Error"), _terminated("b", now, 0, "Completed")]}),
        ("init-waiting", inits, {"phase": "Pending", "initContainerStatuses": [
            _terminated("i1", now, 0, "Completed"), _running("i2", now, ready=False)],
            "containerStatuses": [_container("c", waiting={"reason": "PodInitializing"})]}),
        ("init-crashloop", inits, {"phase": "Pending", "initContainerStatuses": [_restarted(
            _container("i1", waiting={"reason": "CrashLoopBackOff"}), 2, three_days),
            _container("i2", waiting={"reason": "PodInitializing"})]}),
        ("init-error", inits | never, {"phase": "Failed", "initContainerStatuses": [
            _terminated("i1", now, 3, "Error"), _container("i2")]}),
        ("init-signal", inits, {"phase": "Pending", "initContainerStatuses": [
            _terminated("i1", now, 1, signal=15), _container("i2")]}),
        ("sidecar", sidecar, {"phase": "Running", "conditions": _conditions(
            "Ready", "Initialized"), "initContainerStatuses": [
            _restarted(_running("s", now), 1, ago(now, hours=20))],
            "containerStatuses": [_restarted(_running("c", now), 2, three_days)]}),
        ("terminating", one, {"phase": "Running", "containerStatuses": [_running("c", now)]}),
        ("lost", one, {"phase": "Running", "reason": "NodeLost", "message": "node lost",
                       "containerStatuses": [_running("c", now)]}),
        ("evicted", one, {"phase": "Failed", "reason": "Evicted",
                          "message": "The node was low on resource: memory."}),
    ]  # fmt: skip


DELETED_PODS = ("terminating", "lost")


def events(now: datetime, namespace: str) -> list[Obj]:
    """Events as kubelets, controllers and the driver write them: legacy (first/last
    timestamps, count, source), new-style (eventTime, series, reporting*), about pods,
    a node (in `default`, as a kubelet writes it) and a whole kind."""
    pod = {"kind": "Pod", "namespace": namespace, "name": "running", "apiVersion": "v1"}
    return [
        {"metadata": {"name": "e1"}, "involvedObject": pod | {"fieldPath": "spec.containers{c}"},
         "reason": "Pulled", "message": "Container image pulled  \n", "type": "Normal",
         "source": {"component": "kubelet", "host": NODE}, "count": 3,
         "firstTimestamp": ago(now, days=3), "lastTimestamp": ago(now, hours=20)},
        {"metadata": {"name": "e2"}, "involvedObject": pod, "reason": "BackOff",
         "message": "Back-off restarting failed container", "type": "Warning",
         "source": {"component": "kubelet"}, "firstTimestamp": ago(now, days=40)},
        {"metadata": {"name": "e3"}, "involvedObject": pod, "reason": "Scheduled",
         "message": "Successfully assigned", "type": "Normal", "action": "Binding",
         "eventTime": ago(now, days=5).replace("Z", ".000001Z"),
         "reportingComponent": "default-scheduler", "reportingInstance": "sched-1"},
        {"metadata": {"name": "e4"}, "involvedObject": pod, "reason": "Unhealthy",
         "message": "Readiness probe failed", "type": "Warning", "action": "Probe",
         "eventTime": ago(now, days=6).replace("Z", ".000001Z"),
         "series": {"count": 7, "lastObservedTime": ago(now, hours=20).replace(
             "Z", ".000001Z")},
         "reportingComponent": "kubelet", "reportingInstance": NODE},
        {"metadata": {"name": "print-e5", "namespace": "default"},
         "involvedObject": {"kind": "Node", "name": NODE, "uid": NODE},
         "reason": "NodeReady", "message": "Node is ready", "type": "Normal",
         "source": {"component": "kubelet", "host": NODE},
         "firstTimestamp": ago(now, days=2), "lastTimestamp": ago(now, days=2), "count": 1},
        {"metadata": {"name": "e6"},
         "involvedObject": {"kind": "ComputeDomain", "namespace": namespace},
         "reason": "Bare", "message": "no name", "type": "Normal"},
    ]  # fmt: skip
