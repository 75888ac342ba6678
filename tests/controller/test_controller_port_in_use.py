"""A taken metrics/health port ends `compute-domain-controller` in one log line that names
the flag, the environment variable and the Helm value to change: what a second replica on
the same node meets."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil

BIN = Path(sys.executable).parent / "compute-domain-controller"
# The test holds the port itself: the error names this process.
HOLDER = f"pid {os.getpid()} ({psutil.Process().name()})"


def test_a_taken_http_endpoint_is_one_json_line_naming_the_fix(apiserver, tmp_path):
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kc")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        endpoint = f"127.0.0.1:{taken.getsockname()[1]}"
        out = subprocess.run(
            [BIN, "--image-name", "img", "--kubeconfig", str(kubeconfig),
             "--http-endpoint", endpoint, "--logging-format", "json"],
            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    records = [json.loads(line) for line in out.stderr.splitlines()]
    [error] = [r for r in records if "address already in use" in r["msg"]]
    assert error["msg"] == (
        f"--http-endpoint {endpoint}: address already in use by {HOLDER}; choose another "
        "with --http-endpoint, the "
        "HTTP_ENDPOINT environment variable or the Helm value controller.metrics.httpEndpoint")
