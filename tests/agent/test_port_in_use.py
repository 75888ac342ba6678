"""A taken metrics or health port ends `compute-domain-agent plugin` in one log line that
names the flag, the environment variable and the Helm value to change."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from plugin_env import NodeEnv

AGENT = Path(sys.executable).parent / "compute-domain-agent"
# The test holds the port itself: the error names this process.
HOLDER = f"pid {os.getpid()} ({psutil.Process().name()})"


@pytest.mark.parametrize("flag, env, helm", [
    ("--http-endpoint", "HTTP_ENDPOINT", "kubeletPlugin.metrics.computeDomainHttpEndpoint"),
    ("--healthcheck-port", "HEALTHCHECK_PORT",
     "kubeletPlugin.containers.computeDomains.healthcheckPort"),
])  # fmt: skip
def test_a_taken_port_is_one_json_line_naming_the_fix(
        apiserver, cluster, short_dir, tmp_path, flag, env, helm):  # fmt: skip
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::", 0))  # every address, as the chart's ":8081" and the health server
        taken.listen()
        port = taken.getsockname()[1]
        value = f"127.0.0.1:{port}" if flag == "--http-endpoint" else str(port)
        node = NodeEnv(short_dir / "n", extra_args=[flag, value, "--logging-format", "json"])
        out = subprocess.run([AGENT, "plugin", *node.args(apiserver.write_kubeconfig(
            tmp_path / "kc"))], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    errors = [r for r in map(json.loads, out.stderr.splitlines()) if "in use" in r["msg"]]
    assert [e["msg"] for e in errors] == [
        f"{flag} {value}: address already in use by {HOLDER}; choose another "
        f"with {flag}, the {env} environment variable or the Helm value {helm}"], out.stderr
