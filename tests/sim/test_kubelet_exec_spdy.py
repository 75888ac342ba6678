"""`kubectl exec` on the upstream control plane with the simulated kubelet.

kube-apiserver translates kubectl's WebSocket into SPDY/3.1 towards the kubelet (issue 39:
the simulated kubelet used to refuse it); the same kubectl commands as on the emulator must
give the same output and exit codes, through real kubectl and the real kube-apiserver.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_up import Up

from sim.cluster.sandbox import can_sandbox
from sim.controlplane.binaries import available

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(bool(can_sandbox()), reason=can_sandbox() or "root")]

NS = "dra-driver-nvidia-gpu"


@pytest.fixture(scope="module")
def up(kubectl_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    built, why = available()
    if not built:
        pytest.fail(f"--control-plane kubernetes: {why}")
    cluster = Up(kubectl_bin, tmp_path_factory.mktemp("exec-spdy"), "--control-plane",
                 "kubernetes")
    try:
        yield cluster
    finally:
        cluster.close()


def _controller(up: Up) -> str:
    up.ok("wait", "-n", NS, "--for=condition=Ready", "pods",
          "-l", "dra-driver-nvidia-gpu-component=controller", "--timeout=60s")
    return up.ok("get", "pods", "-n", NS, "-l", "dra-driver-nvidia-gpu-component=controller",
                 "-o", "jsonpath={.items[0].metadata.name}")


def test_exec_through_kube_apiserver_output_exit_codes_and_stdin(up: Up) -> None:
    pod = _controller(up)
    assert up.ok("exec", "-n", NS, pod, "--", "id", "-u") == "65532\n"
    failed = up.run("exec", "-n", NS, pod, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert failed.returncode == 7, failed.stderr
    assert failed.stdout == "out\n"
    assert failed.stderr.startswith("err\n"), failed.stderr
    assert up.ok("exec", "-i", "-n", NS, pod, "--", "cat", stdin="via stdin\n") == "via stdin\n"
    missing = up.run("exec", "-n", NS, pod, "--", "no-such-command")
    assert missing.returncode == 1
    assert 'exec: "no-such-command": executable file not found' in missing.stderr
