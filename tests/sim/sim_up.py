"""`compute-domain-sim up` as a user runs it, and kubectl against it: for the tests that
check the simulated cluster the way an admin checks a real one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from eventually import eventually

DEMO = Path(__file__).resolve().parents[1] / "data" / "reference-demo"
SIM = Path(sys.executable).parent / "compute-domain-sim"


class Up:
    """`compute-domain-sim up` as a user runs it, and kubectl against it."""

    def __init__(self, kubectl: Path, workdir: Path, *flags: str) -> None:
        self.kubectl = kubectl
        self.resource_api = "resource.k8s.io/v1"  # what its API server serves (newest)
        self.kubeconfig = workdir / "sim-kubeconfig"
        self.log = (workdir / "up.log").open("w")
        self.proc = subprocess.Popen(
            [str(SIM), "up", "--nodes", "2", "--root", str(workdir / "root"),
             "--kubeconfig-out", str(self.kubeconfig), *flags],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.log_path = workdir / "up.log"

        def up() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"sim up failed:\n{self.log_path.read_text()[-3000:]}")
            return "simulated cluster up" in self.log_path.read_text()

        try:
            eventually(up, "the simulated cluster up", timeout=120, interval=0.2)
        except AssertionError:
            raise AssertionError(f"sim up failed:\n{self.log_path.read_text()[-3000:]}") from None

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True, text=True, input=stdin, timeout=180,
        )  # fmt: skip

    def ok(self, *args: str, stdin: str | None = None) -> str:
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def logs_holding(self, pod: str, words: tuple[str, ...], timeout: float = 60.0) -> str:
        """`kubectl logs pod` once it holds every word (or the last try): Ready (started)
        comes before the container's output is written, as on a real cluster."""
        last = ""

        def holding() -> bool:
            nonlocal last
            last = self.ok("logs", pod)
            return set(words) <= set(last.split())

        with contextlib.suppress(AssertionError):  # the caller's assertion shows the logs
            eventually(holding, f"{pod}'s logs holding {words}", timeout=timeout, interval=0.2)
        return last

    def close(self) -> None:
        with_pgid = os.getpgid(self.proc.pid)
        os.killpg(with_pgid, signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(with_pgid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
