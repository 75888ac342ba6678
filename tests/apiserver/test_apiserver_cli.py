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


def test_control_endpoints_inject_faults_over_http(tmp_path):
    import json
    import urllib.request

    proc, kubeconfig = start(tmp_path, tmp_path / "state.json")
    try:
        api = config.new_client_from_config(str(kubeconfig))
        base = api.configuration.host

        def post(path: str, body: dict) -> dict:
            req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                         method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read())

        core = client.CoreV1Api(api)
        post("/_sim/faults", {"errorRate": 1.0, "errorCode": 500})
        try:
            core.list_namespace()
            raise AssertionError("the injected 500 did not happen")
        except client.ApiException as err:
            assert err.status == 500
        post("/_sim/faults", {})
        assert len(core.list_namespace().items) == 4
        assert post("/_sim/compact", {})["compactedTo"] > 0
        with urllib.request.urlopen(base + "/_sim/stats", timeout=10) as resp:
            stats = json.loads(resp.read())
        assert stats["requests"]["list"] >= 1
    finally:
        stop(proc)
