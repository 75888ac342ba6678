"""`compute-domain-sim apiserver` as a real process: kubeconfig out, state kept across runs."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from kubernetes import client, config

BIN = Path(sys.executable).parent / "compute-domain-sim"


def start(tmp_path: Path, state: Path) -> tuple[subprocess.Popen, Path]:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [BIN, "apiserver", "--kubeconfig-out", str(kubeconfig), "--state-file", str(state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("serving the Kubernetes API on http://127.0.0.1:"), line
    return proc, kubeconfig


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


def test_standalone_server_keeps_state_across_restarts(tmp_path):
    state = tmp_path / "state.json"
    proc, kubeconfig = start(tmp_path, state)
    try:
        api = config.new_client_from_config(str(kubeconfig))
        client.CoreV1Api(api).create_namespaced_config_map(
            "default", {"metadata": {"name": "kept"}, "data": {"a": "1"}}
        )
        assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
    finally:
        stop(proc)
    assert state.exists()
    proc, kubeconfig = start(tmp_path, state)
    try:
        api = config.new_client_from_config(str(kubeconfig))
        kept = client.CoreV1Api(api).read_namespaced_config_map("kept", "default")
        assert kept.data == {"a": "1"}
    finally:
        stop(proc)


def test_bad_flags_are_clear_errors(tmp_path):
    out = subprocess.run(
        [BIN, "apiserver", "--port", "70000"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 2
    assert "invalid port 70000" in out.stderr
    out = subprocess.run(
        [BIN, "apiserver", "--state-file", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert "is a directory" in out.stderr
