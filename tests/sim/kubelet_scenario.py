"""What the kubelet tests share: the chart installed as the reference's suite installs it
(at verbosity 6, where the agent logs every gRPC request it receives, the reference's
GRPCVerbosity), a claim whose Prepare fails permanently, and readings of what the kubelet
and the agent did, through kubectl only."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sim_up import Up

from sim.cluster import manifests

NS = RELEASE = manifests.RELEASE
PLUGINS = f"{RELEASE}-component=kubelet-plugin"
CONTROLLER = f"{RELEASE}-component=controller"
# The kubelet's words before the driver's in a FailedPrepareDynamicResources Event
# (pkg/kubelet/cm/dra/manager.go of the pinned release).
KUBELET_PREFIX = re.compile(r"^Failed to prepare dynamic resources: prepare dynamic resources: "
                            r"NodePrepareResources failed for ResourceClaim [^:]+: ")

BAD_CONFIG = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: bad-config
spec:
  devices:
    requests:
    - name: channel
      exactly:
        deviceClassName: compute-domain-default-channel.nvidia.com
    config:
    - requests: [channel]
      opaque:
        driver: compute-domain.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: ComputeDomainChannelConfig
          domainID: x
          unknown: field
---
apiVersion: v1
kind: Pod
metadata:
  name: bad-config
spec:
  containers:
  - name: ctr
    image: ubuntu:22.04
    command: ["sleep", "9999"]
    resources:
      claims:
      - name: channel
  resourceClaims:
  - name: channel
    resourceClaimName: bad-config
"""


def install_chart(up: Up, helm_bin: Path) -> None:
    done = manifests.run_helm(helm_bin, [
        "upgrade", "--install", RELEASE, str(manifests.CHART_DIR), "--namespace", NS,
        "--create-namespace", "--kubeconfig", str(up.kubeconfig),
        "--set", "logVerbosity=6", "--wait", "--timeout", "3m"], check=False)
    assert done.returncode == 0, done.stderr


def plugin_pod(up: Up, node: str) -> str:
    return up.ok("get", "pods", "-n", NS, "-l", PLUGINS, "--field-selector",
                 f"spec.nodeName={node}", "-o", "jsonpath={.items[0].metadata.name}")


def agent_log(up: Up, node: str, *, previous: bool = False) -> str:
    args = ["logs", "-n", NS, plugin_pod(up, node), "-c", "compute-domains"]
    return up.ok(*args, *(["--previous"] if previous else []))


def calls(log: str, method: str, uid: str) -> int:
    """How many `method` requests for claim `uid` the agent's log holds."""
    pattern = re.compile(rf"gRPC request \d+ {method}: .*uid: \"{re.escape(uid)}\"")
    return len(pattern.findall(log))


def node_of(up: Up, pod: str) -> str:
    return up.ok("get", "pod", pod, "-o", "jsonpath={.spec.nodeName}")


def claim_uid(up: Up, pod: str) -> str:
    claim = up.ok("get", "pod", pod, "-o", "jsonpath={.status.resourceClaimStatuses[0]"
                  ".resourceClaimName}")
    return up.ok("get", "resourceclaim", claim, "-o", "jsonpath={.metadata.uid}")


def pod_events(up: Up, pod: str) -> list[dict[str, Any]]:
    listed = json.loads(up.ok("get", "events", "--field-selector",
                              f"involvedObject.name={pod}", "-o", "json"))
    return list(listed["items"])


def prepare_failures(up: Up, pod: str) -> list[str]:
    return [e["message"] for e in pod_events(up, pod)
            if e["reason"] == "FailedPrepareDynamicResources"]
