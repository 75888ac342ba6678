"""Our simulated kubelet held to the real one: the same scenario on both, on the upstream
control plane with the chart installed by helm, compared by what an admin sees (pod
status, the pod's Events) and by the calls the agent received (its gRPC request log).

The scenario: the reference's channel-injection demo until Ready, its pod deleted (one
NodeUnprepareResources), then a claim whose Prepare fails permanently (an opaque config
with an unknown field) until the kubelet has reported it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from eventually import eventually
from kubelet_scenario import (
    BAD_CONFIG,
    KUBELET_PREFIX,
    agent_log,
    calls,
    claim_uid,
    install_chart,
    node_of,
    pod_events,
    prepare_failures,
)
from sim_up import DEMO, Up

from sim.cluster.sandbox import can_sandbox
from sim.controlplane.binaries import available

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(bool(can_sandbox()), reason=can_sandbox() or "root")]

POD = "imex-channel-injection"


def scenario(up: Up) -> dict[str, Any]:
    """What the scenario showed, in terms both kubelets must agree on."""
    seen: dict[str, Any] = {}
    up.ok("apply", "-f", str(DEMO / "channel-injection.yaml"))
    up.ok("wait", "--for=condition=Ready", f"pod/{POD}", "--timeout=120s")
    pod = json.loads(up.ok("get", "pod", POD, "-o", "json"))
    seen["ready conditions"] = sorted(c["type"] for c in pod["status"]["conditions"]
                                      if c["status"] == "True")
    seen["ready container state"] = sorted(pod["status"]["containerStatuses"][0]["state"])
    seen["ready phase"] = pod["status"]["phase"]
    # kube-controller-manager's "template not found yet" is the control plane's timing
    # (the demo applies the pod with the ComputeDomain whose template the controller then
    # creates), the same on either kubelet: not what this compares.
    seen["demo events"] = sorted({(e["type"], e["reason"], e["source"].get("component", ""))
                                  for e in pod_events(up, POD)
                                  if e["reason"] != "FailedResourceClaimCreation"})
    node, uid = node_of(up, POD), claim_uid(up, POD)
    seen["prepared"] = calls(agent_log(up, node), "NodePrepareResources", uid) >= 1
    up.ok("delete", "pod", POD, "--wait", "--timeout=90s")
    eventually(lambda: calls(agent_log(up, node), "NodeUnprepareResources", uid) >= 1,
               "NodeUnprepareResources", timeout=60)
    seen["unprepare calls"] = calls(agent_log(up, node), "NodeUnprepareResources", uid)
    up.ok("delete", "-f", str(DEMO / "channel-injection.yaml"), "--ignore-not-found",
          "--wait", "--timeout=120s")

    up.ok("apply", "-f", "-", stdin=BAD_CONFIG)
    eventually(lambda: bool(prepare_failures(up, "bad-config")),
               "a FailedPrepareDynamicResources Event", timeout=90)
    bad = json.loads(up.ok("get", "pod", "bad-config", "-o", "json"))
    state = (bad["status"].get("containerStatuses") or [{}])[0].get("state", {})
    seen["failing phase"] = bad["status"]["phase"]
    seen["failing container state"] = {k: v.get("reason") for k, v in state.items()}
    uid = up.ok("get", "resourceclaim", "bad-config", "-o", "jsonpath={.metadata.uid}")
    message = prepare_failures(up, "bad-config")[0]
    seen["failing event has the kubelet's words"] = bool(KUBELET_PREFIX.match(message))
    seen["failing event, driver's words"] = KUBELET_PREFIX.sub("", message).replace(uid, "UID")
    seen["failing events"] = sorted({(e["type"], e["reason"], e["source"].get("component", ""))
                                     for e in pod_events(up, "bad-config")})
    up.ok("delete", "-f", "-", "--wait", "--timeout=90s", stdin=BAD_CONFIG)
    return seen


def test_simulated_kubelet_matches_the_real_one(kubectl_bin: Path, helm_bin: Path,
                                                tmp_path: Path) -> None:
    built, why = available()
    if not built:
        pytest.fail(f"--kubelet upstream: {why}")
    seen = {}
    for kubelet in ("upstream", "sim"):
        (tmp_path / kubelet).mkdir()
        up = Up(kubectl_bin, tmp_path / kubelet, "--no-driver", "--control-plane",
                "kubernetes", "--kubelet", kubelet)
        try:
            install_chart(up, helm_bin)
            seen[kubelet] = scenario(up)
        finally:
            up.close()
    real, ours = seen["upstream"], seen["sim"]
    differences = {k: (real[k], ours.get(k)) for k in real if real[k] != ours.get(k)}
    assert not differences, json.dumps(differences, indent=1)
