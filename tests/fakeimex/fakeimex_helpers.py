"""Fake IMEX daemons as real processes on loopback addresses 127.0.1.N (test helpers).

Every test gets its own SERVER_PORT and IMEX_CMD_PORT (free ports, shared by all daemons of the
test like real IMEX shares 50000/50005 across nodes), its own hosts and nodes files, and a
teardown that kills whatever it started.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from eventually import eventually


def free_port() -> int:
    """A port nobody listens on, on any address (a wildcard bind conflicts with all of them)."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def ip(n: int) -> str:
    return f"127.0.1.{n}"


class Domain:
    """Files and processes of one test's IMEX domain."""

    def __init__(self, root: Path, bins: dict[str, Path]) -> None:
        self.root = root
        self.bins = bins
        self.hosts = root / "hosts"
        self.nodes = root / "nodes.cfg"
        self.server_port = free_port()
        self.cmd_port = free_port()
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.write_hosts({})

    def write_hosts(self, names: dict[str, str]) -> None:
        lines = ["127.0.0.1\tlocalhost", *(f"{a}\t{n}" for n, a in names.items())]
        self.hosts.write_text("\n".join(lines) + "\n")

    def write_nodes(self, names: list[str]) -> None:
        self.nodes.write_text("".join(f"{n}\n" for n in names))

    def config(self, name: str, address: str = "", **overrides: object) -> Path:
        """A config shaped like the driver's template
        (agent/templates/compute-domain-daemon-config.tmpl.cfg)."""
        values: dict[str, object] = {
            "LOG_LEVEL": 4,
            "LOG_FILE_NAME": "",
            "DAEMONIZE": 0,
            "BIND_INTERFACE_IP": "",
            "SERVER_PORT": self.server_port,
            "IMEX_NODE_CONFIG_FILE": self.nodes,
            "NETWORK_INTERFACE": "",
            "IMEX_WAIT_FOR_QUORUM": "RECOVERY",
            "IMEX_ENABLE_AUTH_ENCRYPTION": 0,
            "IMEX_CMD_ENABLED": 1,
            "IMEX_CMD_BIND_INTERFACE_IP": address,
            "IMEX_CMD_PORT": self.cmd_port,
            "IMEX_CMD_UNIX_DOMAIN_PATH": "",
            "IMEX_NODE_DISCONNECTED_GRACE_TIME": -1,
            **overrides,
        }
        path = self.root / f"{name}.cfg"
        body = "".join(f"{k}={v}\n" for k, v in values.items())
        path.write_text(f"# IMEX config of {name}\n\n{body}")
        return path

    def env(self, name: str, **knobs: object) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_IMEX_")}
        env.update(
            FAKE_IMEX_HOSTS_FILE=str(self.hosts),
            FAKE_IMEX_STATE_FILE=str(self.state_path(name)),
            FAKE_IMEX_HEARTBEAT="0.1",
        )
        env.update({k: str(v) for k, v in knobs.items()})
        return env

    def start(
        self, name: str, config: Path, *, args: tuple[str, ...] = (), **knobs: object
    ) -> subprocess.Popen[str]:
        log = (self.root / f"{name}.log").open("w")
        proc = subprocess.Popen(
            [str(self.bins["nvidia-imex"]), "-c", str(config), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env(name, **knobs),
            text=True,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def state_path(self, name: str) -> Path:
        return self.root / f"{name}.state.json"

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text()

    def state(self, name: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_path(name).read_text())
        except (OSError, ValueError):
            return None

    def wait(
        self, name: str, check: Callable[[dict[str, Any]], bool], timeout: float = 5.0
    ) -> dict[str, Any]:
        """Poll the daemon's state file until `check` holds."""

        def holds() -> dict[str, Any] | None:
            state = self.state(name)
            try:
                if state is not None and check(state):
                    return state
            except KeyError:  # not there yet, e.g. peers before the node config was read
                pass
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{self.log(name)}")
            return None

        try:
            return eventually(holds, f"{name}'s state", timeout=timeout)
        except AssertionError:
            pytest.fail(f"{name}: condition not met in {timeout}s; state {self.state(name)}")

    def wait_ready(self, name: str, domain: str | None = None) -> dict[str, Any]:
        return self.wait(
            name,
            lambda s: s["state"] == "READY" and (domain is None or s["domain_status"] == domain),
        )

    def ctl(self, *args: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bins["nvidia-imex-ctl"]), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
