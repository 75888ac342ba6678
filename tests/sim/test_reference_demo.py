"""`compute-domain-sim up` checked the way an admin checks a cluster, with kubectl only.

The reference driver's channel-injection demos (tests/data/reference-demo/) are applied
unchanged and checked the way an admin checks a workload: `kubectl wait`, `kubectl logs`,
`kubectl exec ... test -c /dev/nvidia-caps-imex-channels/channel0`. A Running pod alone
proves nothing; these prove the channel device is really in the container. The driver
itself runs from its manifests (its pods, their users, their logs), and workload pods run as
kubelet runs them (env from ConfigMaps and Secrets made with the `kubectl create`
generators, restart policies, crash loops, `kubectl logs --previous`, Jobs that complete).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from eventually import eventually
from sim_up import DEMO, Up

from sim.cluster.sandbox import can_sandbox

pytestmark = pytest.mark.skipif(bool(can_sandbox()), reason=can_sandbox() or "root")


@pytest.fixture(scope="module")
def up(kubectl_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    cluster = Up(kubectl_bin, tmp_path_factory.mktemp("up"))
    try:
        yield cluster
    finally:
        cluster.close()


CHANNELS = "/dev/nvidia-caps-imex-channels"


def test_channel_injection_demos_inject_real_channel_devices(up: Up) -> None:
    up.ok("apply", "-f", str(DEMO / "channel-injection.yaml"))
    up.ok("wait", "--for=condition=Ready", "pod/imex-channel-injection", "--timeout=120s")
    listing = up.logs_holding("imex-channel-injection", ("channel0",))
    assert "channel0" in listing and listing.lstrip().startswith("total")
    pod = "imex-channel-injection"
    assert up.run("exec", pod, "--", "test", "-c", f"{CHANNELS}/channel0").returncode == 0
    # No channel was injected but channel0: the container's /dev holds exactly its devices.
    assert up.run("exec", pod, "--", "test", "-e", f"{CHANNELS}/channel1").returncode == 1
    failed = up.run("exec", "imex-channel-injection", "--", "sh", "-c", "exit 7")
    assert failed.returncode == 7
    assert up.ok("exec", "-i", "imex-channel-injection", "--", "cat", stdin="via stdin\n") == (
        "via stdin\n"
    )

    up.ok("apply", "-f", str(DEMO / "channel-injection-all.yaml"))
    up.ok("wait", "--for=condition=Ready", "pod/imex-channel-injection-all", "--timeout=120s")
    listing = up.logs_holding("imex-channel-injection-all",
                              ("channel0", "channel222", "channel2047"))
    for channel in ("channel0", "channel222", "channel2047"):
        assert channel in listing.split(), listing
    all_pod = "imex-channel-injection-all"
    assert up.run("exec", all_pod, "--", "test", "-c", f"{CHANNELS}/channel2047").returncode == 0

    up.ok("delete", "-f", str(DEMO / "channel-injection.yaml"), "--wait=true", "--timeout=120s")
    up.ok("delete", "-f", str(DEMO / "channel-injection-all.yaml"), "--wait=true", "--timeout=120s")


PLUGIN_SELECTOR = "dra-driver-nvidia-gpu-component=kubelet-plugin"


def _pods(up: Up, namespace: str, selector: str) -> list[str]:
    out = up.ok("get", "pods", "-n", namespace, "-l", selector, "-o", "name")
    return [line.split("/", 1)[1] for line in out.split()]


def test_the_driver_runs_from_its_manifests(up: Up) -> None:
    # The reference's namespace, labels and container names: its runbooks' selectors work.
    ns = "dra-driver-nvidia-gpu"
    listing = up.ok("get", "pods", "-A", "-o", "wide")
    plugins = _pods(up, ns, PLUGIN_SELECTOR)
    [controller] = _pods(up, ns, "dra-driver-nvidia-gpu-component=controller")
    assert len(plugins) == 2, listing
    for pod in [*plugins, controller]:
        up.ok("wait", "-n", ns, "--for=condition=Ready", f"pod/{pod}", "--timeout=60s")
    nodes = up.ok("get", "pods", "-n", ns, "-l", PLUGIN_SELECTOR,
                  "-o", "jsonpath={.items[*].spec.nodeName}").split()  # fmt: skip
    assert sorted(nodes) == ["node-01", "node-02"]
    log = up.ok("logs", "-n", ns, plugins[0])
    assert "kubelet plugin ready on node" in log
    assert "registered with kubelet" in log
    # The image's user is 65532; the manifests make the plugin root and keep the controller not.
    assert up.ok("exec", "-n", ns, plugins[0], "--", "id", "-u").strip() == "0"
    assert up.ok("exec", "-n", ns, controller, "--", "id", "-u").strip() == "65532"
    for verb in (["logs"], ["exec"]):
        missing = up.run(*verb, "no-such-pod", *(["--", "true"] if verb == ["exec"] else []))
        assert missing.returncode == 1
        assert 'pods "no-such-pod" not found' in missing.stderr, missing.stderr
    prefixed = up.ok("logs", "-n", ns, "-l", PLUGIN_SELECTOR, "-c", "compute-domains",
                     "--prefix", "--tail", "3")  # fmt: skip
    assert {line.split(" ", 1)[0] for line in prefixed.splitlines()} == {
        f"[pod/{pod}/compute-domains]" for pod in plugins
    }


WORKLOADS = """
apiVersion: v1
kind: Pod
metadata: {name: env-check}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: busybox
    command: ["sh", "-c", "echo cm=$FROM_CM secret=$FROM_SECRET mem=$MEM_MI node=$NODE"]
    resources: {limits: {memory: 64Mi}}
    env:
    - {name: FROM_CM, valueFrom: {configMapKeyRef: {name: settings, key: mode}}}
    - {name: FROM_SECRET, valueFrom: {secretKeyRef: {name: creds, key: token}}}
    - name: MEM_MI
      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}
    - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
---
apiVersion: v1
kind: Pod
metadata: {name: crasher}
spec:
  containers:
  - {name: c, image: busybox, command: ["sh", "-c", "echo run; exit 3"]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: c, image: busybox, command: ["sh", "-c", "echo done"]}
"""


def test_workload_pods_run_as_kubelet_runs_them(up: Up, tmp_path: Path) -> None:
    up.ok("create", "configmap", "settings", "--from-literal=mode=fast")
    up.ok("create", "secret", "generic", "creds", "--from-literal=token=s3cret")
    manifest = tmp_path / "workloads.yaml"
    manifest.write_text(WORKLOADS)
    up.ok("apply", "-f", str(manifest))
    up.ok("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/env-check", "--timeout=60s")
    line = up.ok("logs", "env-check").strip()
    assert line.startswith("cm=fast secret=s3cret mem=64 node=node-0"), line
    up.ok("wait", "--for=condition=Complete", "job/once", "--timeout=60s")
    assert up.ok("logs", "job/once").strip() == "done"

    def crash_looping() -> bool:
        status = up.ok("get", "pod", "crasher", "-o",
                       "jsonpath={.status.containerStatuses[0].restartCount}"
                       " {.status.containerStatuses[0].state.waiting.reason}")  # fmt: skip
        count, _, reason = status.partition(" ")
        return int(count or 0) >= 1 and reason == "CrashLoopBackOff"

    try:
        eventually(crash_looping, "crasher in CrashLoopBackOff", timeout=60, interval=0.5)
    except AssertionError:
        raise AssertionError(up.ok("get", "pod", "crasher", "-o", "yaml")) from None
    assert "CrashLoopBackOff" in up.ok("get", "pod", "crasher")
    assert up.ok("logs", "crasher", "--previous").strip() == "run"
    up.ok("delete", "-f", str(manifest), "--wait=true", "--timeout=60s")


GRACEFUL = """\
apiVersion: v1
kind: Pod
metadata: {name: graceful}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: c
    image: busybox
    command:
    - python3
    - -c
    - |
      import signal, sys, time
      def bye(*_):
          time.sleep(1)
          print("said goodbye", flush=True)
          sys.exit(0)
      signal.signal(signal.SIGTERM, bye)
      print("up", flush=True)
      while True:
          time.sleep(0.1)
"""


def test_a_followed_log_holds_what_a_deleted_pod_says_while_it_stops(up: Up) -> None:
    """`kubectl logs -f` ends when the container exits, not when the deletion starts: the
    reference's tests read a daemon's last line (its removal from the clique) this way."""
    up.ok("apply", "-f", "-", stdin=GRACEFUL)
    up.ok("wait", "--for=condition=Ready", "pod/graceful", "--timeout=60s")
    up.logs_holding("graceful", ("up",))
    follower = subprocess.Popen([str(up.kubectl), "--kubeconfig", str(up.kubeconfig), "logs",
                                 "-f", "graceful"], stdout=subprocess.PIPE, text=True)
    try:
        assert follower.stdout is not None and follower.stdout.readline() == "up\n"
        up.ok("delete", "pod", "graceful", "--wait=true", "--timeout=60s")
        rest, _ = follower.communicate(timeout=60)
    finally:
        follower.kill()
    assert rest.splitlines()[-1:] == ["said goodbye"], rest
