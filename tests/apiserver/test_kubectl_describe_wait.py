"""`kubectl describe` and `kubectl wait` against the emulator, through the pinned kubectl.

describe lists the object's Events by field selector (involvedObject.name, .namespace,
.uid, and .kind for a node, whose kubelet events carry the node's name as uid); wait opens
a watch list (`sendInitialEvents=true`, fieldSelector metadata.name) and needs the
bookmark that ends its initial events (sim/apiserver/list_options.py).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sim.apiserver.runner import ServerThread

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
NODE = "describe-node"


@pytest.fixture
def kubectl(apiserver: ServerThread, tmp_path: Path, kubectl_bin: Path) -> Kubectl:
    config = apiserver.write_kubeconfig(tmp_path / "kubeconfig")

    def run(*args: str, stdin: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        done = subprocess.run(
            [str(kubectl_bin), "--kubeconfig", str(config), *args], input=stdin,
            capture_output=True, text=True, timeout=60,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}:\n{done.stdout}\n{done.stderr}")
        return done

    return run


def _create(kubectl: Kubectl, obj: dict[str, Any]) -> dict[str, Any]:
    done = kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(obj))
    return dict(json.loads(done.stdout))


def _status(kubectl: Kubectl, kind: str, name: str, status: dict[str, Any]) -> None:
    kubectl("patch", kind, name, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}))  # fmt: skip


def _event(name: str, involved: dict[str, Any], reason: str, namespace: str = "default"
           ) -> dict[str, Any]:  # fmt: skip
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace}, "involvedObject": involved,
            "reason": reason, "message": f"{reason} happened", "type": "Normal",
            "source": {"component": "kubelet", "host": NODE},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
            "count": 1}  # fmt: skip


def _node_and_pod(kubectl: Kubectl, pod: str = "p") -> dict[str, Any]:
    _create(kubectl, {"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": NODE, "labels": {"node-role.kubernetes.io/gpu": ""}}})
    _status(kubectl, "node", NODE, {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "lastHeartbeatTime": "2026-01-01T00:00:00Z",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]})  # fmt: skip
    return _create(kubectl, {"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": pod, "namespace": "default"},
                             "spec": {"nodeName": NODE, "containers": [
                                 {"name": "c", "image": "busybox:1.36"}]}})  # fmt: skip


def _ready(kubectl: Kubectl, pod: str) -> None:
    _status(kubectl, "pod", pod, {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}], "containerStatuses": [
        {"name": "c", "image": "busybox:1.36", "imageID": "", "ready": True, "restartCount": 0,
         "started": True, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]})


def test_describe_pod_lists_only_its_own_events(kubectl: Kubectl) -> None:
    pod = _node_and_pod(kubectl)
    involved = {"kind": "Pod", "namespace": "default", "name": "p", "apiVersion": "v1",
                "uid": pod["metadata"]["uid"]}  # fmt: skip
    _create(kubectl, _event("mine", involved, "Pulled"))
    _create(kubectl, _event("stale", involved | {"uid": "another-uid"}, "FromAnEarlierPod"))
    _ready(kubectl, "p")
    out = kubectl("describe", "pod", "p").stdout
    assert "Status:           Running" in out
    assert f"Node:             {NODE}/" in out
    assert "Normal  Pulled" in out and "Pulled happened" in out
    assert "FromAnEarlierPod" not in out


def test_describe_node_shows_its_pods_slices_and_kubelet_events(kubectl: Kubectl) -> None:
    _node_and_pod(kubectl)
    # A kubelet's events name the node's name as its uid (kubelet.go's nodeRef).
    node_ref = {"kind": "Node", "name": NODE, "uid": NODE}
    _create(kubectl, _event("node-ready", node_ref, "NodeReady"))
    _create(kubectl, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                      "metadata": {"name": "s"},
                      "spec": {"driver": "compute-domain.nvidia.com", "nodeName": NODE,
                               "pool": {"name": NODE, "generation": 1,
                                        "resourceSliceCount": 1},
                               "devices": [{"name": "channel-0"}]}})  # fmt: skip
    out = kubectl("describe", "node", NODE).stdout
    assert "Roles:              gpu" in out
    assert "Non-terminated Pods:          (1 in total)" in out
    assert "compute-domain.nvidia.com" in out
    assert "Normal  NodeReady" in out


def test_describe_claim_and_daemonset(kubectl: Kubectl) -> None:
    pod = _node_and_pod(kubectl)
    _create(kubectl, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                      "metadata": {"name": "c", "namespace": "default"},
                      "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                          "deviceClassName": "compute-domain-default-channel.nvidia.com"}}]}}})
    result = {"request": "r", "driver": "compute-domain.nvidia.com", "pool": NODE,
              "device": "channel-0"}
    _status(kubectl, "resourceclaim", "c", {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": pod["metadata"]["uid"]}]})
    claim = kubectl("describe", "resourceclaim", "c").stdout
    assert "Reserved For:" in claim and "channel-0" in claim
    table = kubectl("get", "resourceclaim", "c").stdout
    assert table.split("\n")[1].split()[:2] == ["c", "allocated,reserved"]
    _create(kubectl, {"apiVersion": "apps/v1", "kind": "DaemonSet",
                      "metadata": {"name": "imex", "namespace": "default"},
                      "spec": {"selector": {"matchLabels": {"app": "imex"}},
                               "template": {"metadata": {"labels": {"app": "imex"}},
                                            "spec": {"nodeSelector": {"imex": "none"},
                                                     "containers": [{"name": "imex",
                                                                     "image": "imex:1"}]}}}})
    daemons = kubectl("describe", "daemonset", "imex").stdout
    assert "Selector:       app=imex" in daemons and "Node-Selector:  imex=none" in daemons
    assert "Pods Status:" in daemons and "Events:" in daemons


def test_wait_for_ready_sees_a_later_change(kubectl: Kubectl) -> None:
    _node_and_pod(kubectl)
    timer = threading.Timer(1.0, _ready, (kubectl, "p"))
    timer.start()
    try:
        started = time.monotonic()
        done = kubectl("wait", "--for=condition=Ready", "pod/p", "--timeout=30s")
    finally:
        timer.join()
    assert done.stdout.strip() == "pod/p condition met"
    assert time.monotonic() - started < 20


def test_wait_for_ready_of_a_ready_pod_and_its_timeout(kubectl: Kubectl) -> None:
    _node_and_pod(kubectl, "ready")
    _ready(kubectl, "ready")
    _create(kubectl, {"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": "waiting", "namespace": "default"},
                      "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x"}]}})
    assert kubectl("wait", "--for=condition=Ready", "pod/ready", "--timeout=10s").stdout \
        .strip() == "pod/ready condition met"  # fmt: skip
    late = kubectl("wait", "--for=condition=Ready", "pod/waiting", "--timeout=2s", check=False)
    assert late.returncode == 1
    assert late.stderr.strip() == "error: timed out waiting for the condition on pods/waiting"
    phase = kubectl("wait", "--for=jsonpath={.status.phase}=Running", "pod/ready",
                    "--timeout=10s")  # fmt: skip
    assert phase.stdout.strip() == "pod/ready condition met"


def test_wait_for_delete(kubectl: Kubectl) -> None:
    _node_and_pod(kubectl)
    kubectl("delete", "pod", "p", "--wait=false")  # bound: it stays, Terminating
    assert kubectl("get", "pod", "p").stdout.split("\n")[1].split()[2] == "Terminating"
    timer = threading.Timer(1.0, kubectl, ("delete", "pod", "p", "--grace-period=0", "--force"))
    timer.start()
    try:
        done = kubectl("wait", "--for=delete", "pod/p", "--timeout=30s")
    finally:
        timer.join()
    assert done.stdout.strip() == "pod/p condition met"
    gone = kubectl("wait", "--for=delete", "pod/never-was", "--timeout=5s")
    assert gone.returncode == 0
