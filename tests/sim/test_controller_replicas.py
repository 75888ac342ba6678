"""`controller.replicas=2` from the Helm chart on both control planes: the replicas run on
different nodes (the chart's anti-affinity), one holds the Lease and reconciles while the
other stands by, and deleting the leader hands the work to the other."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from eventually import eventually
from sim_up import Up
from test_helm_install import CONTROLLER, NS, RELEASE, Helm

from sim.cluster import manifests
from sim.cluster.sandbox import can_sandbox
from sim.controlplane.binaries import available

pytestmark = pytest.mark.skipif(bool(can_sandbox()), reason=can_sandbox() or "root")

LEASE = "dra-driver-nvidia-gpu-controller"
# The chart's lease timings (15s, 10s, 2s): a deleted leader releases the Lease, so the
# standby takes over within a retry period; shorter ones lose renewals on a loaded machine.
VALUES = ("controller.replicas=2", "controller.leaderElection.enabled=true")


@pytest.fixture(params=["emulator", "kubernetes"])
def up(request: pytest.FixtureRequest, kubectl_bin: Path, tmp_path: Path) -> Iterator[Up]:
    if request.param == "kubernetes" and not available()[0]:
        pytest.fail(f"--control-plane kubernetes: {available()[1]}")
    cluster = Up(kubectl_bin, tmp_path, "--no-driver", "--control-plane", request.param)
    try:
        yield cluster
    finally:
        cluster.close()


def compute_domain(up: Up, name: str) -> None:
    """A ComputeDomain, reconciled once the controller wrote its channel's claim template."""
    up.ok("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": name}}}}))
    eventually(lambda: up.run("get", "resourceclaimtemplate", name).returncode == 0,
               f"ComputeDomain {name} reconciled", timeout=60, interval=0.5)


def holder(up: Up) -> str:
    return up.ok("get", "lease", "-n", NS, LEASE, "-o", "jsonpath={.spec.holderIdentity}")


def test_two_replicas_on_two_nodes_one_leads_and_the_other_takes_over(
        up: Up, helm_bin: Path) -> None:  # fmt: skip
    helm = Helm(helm_bin, up)
    helm.ok("upgrade", "--install", RELEASE, str(manifests.CHART_DIR), "--create-namespace",
            *(f"--set={v}" for v in VALUES), "--wait", "--timeout", "3m")
    pods = json.loads(up.ok("get", "pods", "-n", NS, "-l", CONTROLLER, "-o", "json"))["items"]
    where = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert len(where) == 2 and len(set(where.values())) == 2, where
    eventually(lambda: holder(up) != "", "a Lease holder", timeout=30, interval=0.5)
    lock_id = holder(up)
    [leader] = [p for p in where if lock_id.startswith(f"{p}-")]
    [standby] = [p for p in where if p != leader]
    compute_domain(up, "cd-first")
    leader_log = up.ok("logs", "-n", NS, leader)
    assert f'"Became leader, starting controller" lockID="{lock_id}"' in leader_log, leader_log
    standby_log = up.ok("logs", "-n", NS, standby)
    assert f'"New leader elected" leader="{lock_id}"' in standby_log, standby_log
    assert "controller running" not in standby_log, standby_log

    # The standby, or the pod the ReplicaSet starts in the leader's place (either may win
    # the race once the Lease is free), takes over; never the deleted leader again.
    up.ok("delete", "pod", "-n", NS, leader, "--wait=false")
    eventually(lambda: holder(up) not in ("", lock_id), "another replica holding the Lease",
               timeout=45, interval=0.5)
    new_id = holder(up)
    assert not new_id.startswith(f"{leader}-"), new_id
    compute_domain(up, "cd-second")
    now = json.loads(up.ok("get", "pods", "-n", NS, "-l", CONTROLLER, "-o", "json"))["items"]
    [successor] = [p["metadata"]["name"] for p in now
                   if new_id.startswith(f"{p['metadata']['name']}-")]
    assert "Became leader, starting controller" in up.ok("logs", "-n", NS, successor)
