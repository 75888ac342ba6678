"""The driver on the real kubelet: `compute-domain-sim up --control-plane kubernetes
--kubelet upstream`, the chart installed by the real helm as the reference's own suite
installs its chart, checked with kubectl the way an admin checks a cluster.

What only the real kubelet shows: its DRA manager's pod status and Event while a Prepare
fails, its plugin watcher re-registering a restarted agent (and not unpreparing anything),
NodeUnprepareResources on pod deletion, `kubectl logs` read by the kubelet from the CRI
log files, `kubectl exec`, `attach` and `port-forward` proxied by kube-apiserver and the
kubelet to the runtime's streaming server (SPDY/3.1, sim/cri/streaming.py). The agent
runs at verbosity 6, where it logs every gRPC request it receives (the reference's
GRPCVerbosity), so the calls the kubelet made are in its log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from eventually import eventually
from kubelet_scenario import (
    BAD_CONFIG,
    CONTROLLER,
    KUBELET_PREFIX,
    NS,
    PLUGINS,
    agent_log,
    calls,
    claim_uid,
    install_chart,
    node_of,
    plugin_pod,
    prepare_failures,
)
from sim_up import DEMO, SIM, Up

from sim.cluster.sandbox import can_sandbox
from sim.controlplane.binaries import available

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(bool(can_sandbox()), reason=can_sandbox() or "root")]

POD = "imex-channel-injection"


def _require_components() -> None:
    built, why = available()
    if not built:
        pytest.fail(f"--kubelet upstream: {why}")


@pytest.fixture(scope="module")
def up(kubectl_bin: Path, helm_bin: Path,
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    _require_components()
    cluster = Up(kubectl_bin, tmp_path_factory.mktemp("upstream-kubelet"), "--no-driver",
                 "--control-plane", "kubernetes", "--kubelet", "upstream")
    try:
        install_chart(cluster, helm_bin)
        yield cluster
    finally:
        cluster.close()


def test_nodes_are_real_kubelets_and_driver_pods_are_theirs(up: Up) -> None:
    nodes = json.loads(up.ok("get", "nodes", "-o", "json"))["items"]
    assert len(nodes) == 2
    for node in nodes:
        info = node["status"]["nodeInfo"]
        assert info["containerRuntimeVersion"].startswith("compute-domain-sim://")
        server = json.loads(up.ok("version", "-o", "json"))["serverVersion"]["gitVersion"]
        assert info["kubeletVersion"] == server
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert not addresses["InternalIP"].startswith("127."), addresses
    log = up.ok("logs", "-n", NS, "-l", PLUGINS, "-c", "compute-domains", "--tail", "-1")
    assert "registered with kubelet" in log, log
    assert "compute-domain kubelet plugin ready on node" in log, log
    up.ok("wait", "--for=condition=Ready", "pods", "-n", NS, "-l", CONTROLLER, "--timeout=60s")


def test_reference_demo_ready_then_deletion_unprepares(up: Up) -> None:
    up.ok("apply", "-f", str(DEMO / "channel-injection.yaml"))
    up.ok("wait", "--for=condition=Ready", f"pod/{POD}", "--timeout=120s")
    listing = up.logs_holding(POD, ("channel0",))
    assert "channel0" in listing.split(), listing
    # kubectl exec the real way: kubectl -> kube-apiserver -> kubelet -> the runtime's
    # streaming server, into the container the runtime made from the kubelet's CDI devices.
    up.ok("exec", POD, "--", "test", "-c", "/dev/nvidia-caps-imex-channels/channel0")
    assert up.ok("exec", POD, "--", "ls", "/dev/nvidia-caps-imex-channels").split() == [
        "channel0"]
    node, uid = node_of(up, POD), claim_uid(up, POD)
    assert calls(agent_log(up, node), "NodePrepareResources", uid) >= 1

    # An agent killed while the pod runs: the kubelet restarts its container, its plugin
    # watcher registers the new agent, and nothing is unprepared.
    restarts = _restarts(up, node)
    _kill_agent(node)
    # (The kubelet restarts a crashed container after its back-off, 10 s the first time;
    # under load its status update can take a while longer.)
    eventually(lambda: _restarts(up, node) > restarts, "the agent restarted", timeout=120)
    eventually(lambda: "registered with kubelet" in agent_log(up, node),
               "the restarted agent registered with the kubelet", timeout=60)
    previous = agent_log(up, node, previous=True)
    assert calls(previous + agent_log(up, node), "NodeUnprepareResources", uid) == 0
    assert up.ok("get", "pod", POD, "-o", "jsonpath={.status.phase}") == "Running"

    # Deleting the pod: the kubelet's DRA manager calls NodeUnprepareResources for its claim.
    up.ok("delete", "pod", POD, "--wait", "--timeout=90s")
    eventually(lambda: calls(agent_log(up, node), "NodeUnprepareResources", uid) == 1,
               "NodeUnprepareResources from the kubelet", timeout=60)
    up.ok("delete", "-f", str(DEMO / "channel-injection.yaml"), "--ignore-not-found", "--wait",
          "--timeout=120s")


def test_permanent_prepare_error_shows_as_the_kubelet_reports_it(up: Up) -> None:
    up.ok("apply", "-f", "-", stdin=BAD_CONFIG)
    try:
        eventually(lambda: bool(prepare_failures(up, "bad-config")),
                   "a FailedPrepareDynamicResources Event", timeout=90)
        message = prepare_failures(up, "bad-config")[0]
        # The kubelet's words, then the reference driver's, then the cause.
        driver = KUBELET_PREFIX.sub("", message)
        assert driver != message, message
        uid = up.ok("get", "resourceclaim", "bad-config", "-o", "jsonpath={.metadata.uid}")
        assert driver.startswith(f"error preparing devices for claim 'default/bad-config:{uid}': "
                                 'error decoding config parameters: strict decoding error: '
                                 'unknown field "unknown"'), message
        waiting = up.ok("get", "pod", "bad-config", "-o",
                        "jsonpath={.status.containerStatuses[0].state.waiting.reason}")
        assert waiting == "ContainerCreating"
        node = node_of(up, "bad-config")
        log = agent_log(up, node)
        assert 'strict decoding error: unknown field "unknown"' in log, log[-3000:]
    finally:
        up.ok("delete", "-f", "-", "--wait", "--timeout=90s", stdin=BAD_CONFIG)


def _restarts(up: Up, node: str) -> int:
    return int(up.ok("get", "pod", "-n", NS, plugin_pod(up, node), "-o",
                     'jsonpath={.status.containerStatuses[?(@.name=="compute-domains")]'
                     '.restartCount}') or 0)


def _kill_agent(node: str) -> None:
    """SIGKILL the node's agent process (a crash), found as an operator finds it."""
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or ()
        if not argv or argv[-1] != "plugin" or "compute-domain-agent" not in " ".join(argv):
            continue
        try:
            if proc.environ().get("NODE_NAME") == node:
                proc.send_signal(signal.SIGKILL)
                return
        except psutil.Error:
            continue
    raise AssertionError(f"no agent process of {node} found")


@pytest.mark.parametrize("mode", ["driverManaged", "hostManaged"])
def test_demo_on_the_real_kubelet(mode: str) -> None:
    _require_components()
    # A short root: the host IMEX's control socket lives under it (108-byte unix paths).
    root = Path(tempfile.mkdtemp(prefix="cdk-", dir="/tmp"))
    try:
        done = subprocess.run(
            [str(SIM), "demo", "--control-plane", "kubernetes", "--kubelet", "upstream",
             "--nodes", "2", "--mode", mode, "--json", "--root", str(root / "r")],
            capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        result = json.loads(done.stdout)
        assert result["ok"] and not result["cleanup"]["leftovers"], result
        assert result["cluster"]["controlPlane"] == "kubernetes"
        # Every workload container saw its channel through the CDI devices the kubelet named.
        steps = {s["step"]: s for s in result["computeDomains"][0]["steps"]}
        assert steps["cdi"]["ok"] and steps["device"]["ok"], steps
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_kubectl_exec_attach_and_port_forward_of_driver_pods(up: Up) -> None:
    exec_ = ("exec", "-n", NS, plugin_pod(up, "node-01"), "-c", "compute-domains")
    status = up.ok(*exec_, "--", "cat", "/proc/self/status")
    assert status.startswith("Name:\tcat\n") and "\nPid:\t" in status, status
    # In that container: its env (the downward API's node name) and its mounts.
    assert up.ok(*exec_, "--", "printenv", "NODE_NAME") == "node-01\n"
    assert "dra.sock" in up.ok(*exec_, "--", "ls", "/var/lib/kubelet/plugins/"
                               "compute-domain.nvidia.com").split()

    # The exit code and what was written before it.
    done = up.run(*exec_, "--", "sh", "-c", "echo partial; echo oops >&2; exit 3")
    assert (done.returncode, done.stdout) == (3, "partial\n"), done.stderr
    assert "oops" in done.stderr and "command terminated with exit code 3" in done.stderr

    # stdin (-i) round trip, larger than one frame.
    text = "line one\nline two\n" * 4000
    assert up.ok(exec_[0], "-i", *exec_[1:], "--", "cat", stdin=text) == text

    # kubectl's own SPDY client, proxied byte for byte (without it kubectl speaks
    # WebSocket v5, which kube-apiserver translates to SPDY toward the kubelet).
    done = subprocess.run([str(up.kubectl), "--kubeconfig", str(up.kubeconfig), *exec_, "-i",
                           "--", "sh", "-c", "cat; exit 4"],
                          input="over spdy\n", capture_output=True, text=True, timeout=60,
                          env={**os.environ, "KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"})
    assert (done.returncode, done.stdout) == (4, "over spdy\n"), done.stderr

    # A command that does not exist: kubectl says so and fails.
    done = up.run(*exec_, "--", "/no/such/command")
    assert done.returncode != 0 and done.stderr, done

    # Port forwarding to the controller's probe endpoint.
    controller = up.ok("get", "pods", "-n", NS, "-l", CONTROLLER,
                       "-o", "jsonpath={.items[0].metadata.name}")
    port = up.ok("get", "pod", "-n", NS, controller, "-o",
                 "jsonpath={.spec.containers[0].ports[0].containerPort}")
    forward = subprocess.Popen(
        [str(up.kubectl), "--kubeconfig", str(up.kubeconfig), "port-forward", "-n", NS,
         f"pod/{controller}", f":{port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()
        found = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> " + port, line)
        assert found, line + (forward.stderr.read() if forward.poll() is not None
                              and forward.stderr else "")
        url = f"http://127.0.0.1:{found.group(1)}/healthz"
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert answer.status == 200
    finally:
        forward.terminate()
        forward.wait(30)


ATTACHED = """
apiVersion: v1
kind: Pod
metadata:
  name: ticker
spec:
  containers:
  - name: ticker
    image: ubuntu:22.04
    command: ["sh", "-c", "while true; do echo tick; sleep 0.3; done"]
"""


def test_kubectl_attach_shows_the_running_containers_output(up: Up) -> None:
    up.ok("apply", "-f", "-", stdin=ATTACHED)
    try:
        up.ok("wait", "--for=condition=Ready", "pod/ticker", "--timeout=60s")
        attach = subprocess.Popen(
            [str(up.kubectl), "--kubeconfig", str(up.kubeconfig), "attach", "pod/ticker"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert attach.stdout is not None
            lines = [attach.stdout.readline() for _ in range(3)]
        finally:
            attach.terminate()
            attach.wait(30)
        assert lines == ["tick\n"] * 3, (lines, attach.stderr.read() if attach.stderr else "")
    finally:
        up.ok("delete", "-f", "-", "--wait", "--timeout=90s", stdin=ATTACHED)
