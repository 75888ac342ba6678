"""The Helm chart installed, upgraded and uninstalled by the real helm (`make helm`) into
`compute-domain-sim up --no-driver`, on both control planes, and checked the way an admin
coming from the reference driver checks it: its runbook's label selectors and container
names, `kubectl logs`, the reference's demo manifests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_up import DEMO, Up

from sim.cluster import manifests
from sim.cluster.sandbox import can_sandbox
from sim.controlplane.binaries import available

pytestmark = pytest.mark.skipif(bool(can_sandbox()), reason=can_sandbox() or "root")

NS = RELEASE = "dra-driver-nvidia-gpu"
PLUGINS = "dra-driver-nvidia-gpu-component=kubelet-plugin"
CONTROLLER = "dra-driver-nvidia-gpu-component=controller"


class Helm:
    """helm against the cluster of `up`, in a throwaway home."""

    def __init__(self, helm_bin: Path, up: Up) -> None:
        self.bin, self.up = helm_bin, up

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [*args, "--kubeconfig", str(self.up.kubeconfig), "--namespace", NS]
        return manifests.run_helm(self.bin, argv, check=False)

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
        return done.stdout


# (control plane, resource.k8s.io versions served): "v1beta1" is a Kubernetes 1.32 API.
PLANES = {"emulator": ("emulator", "v1"), "kubernetes": ("kubernetes", "v1"),
          "emulator-1.32": ("emulator", "v1beta1")}


@pytest.fixture(scope="module", params=list(PLANES))
def up(request: pytest.FixtureRequest, kubectl_bin: Path,
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    plane, versions = PLANES[request.param]
    if plane == "kubernetes" and not available()[0]:
        pytest.fail(f"--control-plane kubernetes: {available()[1]}")
    cluster = Up(kubectl_bin, tmp_path_factory.mktemp("helm"), "--no-driver",
                 "--control-plane", plane, "--resource-api", versions)
    cluster.resource_api = f"resource.k8s.io/{versions}"
    try:
        yield cluster
    finally:
        cluster.close()


def test_install_upgrade_and_uninstall_as_the_reference_runbook_does(
        up: Up, helm_bin: Path) -> None:  # fmt: skip
    helm = Helm(helm_bin, up)
    assert "dra-driver-nvidia-gpu" not in up.ok("get", "pods", "-A")
    assert "helm upgrade --install dra-driver-nvidia-gpu" in up.log_path.read_text()
    helm.ok("upgrade", "--install", RELEASE, str(manifests.CHART_DIR), "--create-namespace",
            "--wait", "--timeout", "3m")
    for selector in (PLUGINS, CONTROLLER):
        up.ok("wait", "--for=condition=READY", "pods", "-A", "-l", selector, "--timeout=90s")
    assert len(up.ok("get", "pods", "-n", NS, "-l", PLUGINS, "-o", "name").split()) == 2
    log = up.ok("logs", "-n", NS, "-l", PLUGINS, "-c", "compute-domains")
    assert "compute-domain kubelet plugin ready on node" in log, log
    # The chart and the driver found the cluster's resource.k8s.io version by themselves.
    assert f"speaking {up.resource_api}" in log, log
    assert up.ok("get", "deviceclass", "compute-domain-default-channel.nvidia.com", "-o",
                 "jsonpath={.apiVersion}") == up.resource_api

    # The reference's demo runs on the helm-installed driver.
    up.ok("apply", "-f", str(DEMO / "channel-injection.yaml"))
    up.ok("wait", "--for=condition=Ready", "pod/imex-channel-injection", "--timeout=120s")
    listing = up.logs_holding("imex-channel-injection", ("channel0",))
    assert "channel0" in listing.split(), listing

    # A mode or placement change under a running ComputeDomain is refused, and changes
    # nothing.
    refused = helm.run("upgrade", RELEASE, str(manifests.CHART_DIR), "--set",
                       "resources.computeDomains.imex.mode=hostManaged",
                       "--set", "featureGates.HostManagedIMEXDaemon=true")
    assert refused.returncode == 1
    assert ("changing mode driverManaged -> hostManaged is refused while 1 ComputeDomain(s) "
            "exist (default/imex-channel-injection)") in refused.stderr, refused.stderr
    refused = helm.run("upgrade", RELEASE, str(manifests.CHART_DIR), "--set",
                       "resources.computeDomains.imex.placement=agent")
    assert refused.returncode == 1
    assert ("changing placement pod -> agent is refused while 1 ComputeDomain(s) exist "
            "(default/imex-channel-injection)") in refused.stderr, refused.stderr
    # Any other upgrade goes through (helm patches the Deployment and the DaemonSet with
    # three-way strategic merge patches).
    helm.ok("upgrade", RELEASE, str(manifests.CHART_DIR), "--set", "logVerbosity=6", "--wait",
            "--timeout", "3m")
    env = up.ok("get", "daemonset", "-n", NS, "dra-driver-nvidia-gpu-kubelet-plugin", "-o",
                'jsonpath={.spec.template.spec.containers[0].env[?(@.name=="LOG_VERBOSITY")]'
                '.value}{" "}{.spec.template.spec.containers[0].env[?(@.name=="IMEX_MODE")]'
                '.value}')  # fmt: skip
    assert env == "6 driverManaged"
    history = helm.ok("history", RELEASE)
    assert "Upgrade complete" in history and "Install complete" in history, history
    for workload in ("daemonset/dra-driver-nvidia-gpu-kubelet-plugin",
                     "deployment/dra-driver-nvidia-gpu-controller"):
        up.ok("rollout", "status", "-n", NS, workload, "--timeout=120s")

    up.ok("delete", "-f", str(DEMO / "channel-injection.yaml"), "--wait", "--timeout=120s")
    helm.ok("uninstall", RELEASE, "--wait", "--timeout", "2m")
    assert helm.ok("list", "-q") == ""
    left = up.ok("get", "deployments,daemonsets,serviceaccounts,roles", "-n", NS, "-o", "name")
    assert left.split() == ["serviceaccount/default"], left
    cluster_wide = up.ok("get", "clusterroles,clusterrolebindings,deviceclasses", "-o", "name")
    assert "dra-driver-nvidia-gpu" not in cluster_wide
    assert "compute-domain" not in cluster_wide
