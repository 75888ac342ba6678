"""Each console script answers `version` as a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from api.version import __version__

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "program", ["compute-domain-agent", "compute-domain-controller", "compute-domain-sim"]
)
@pytest.mark.parametrize("args", [["version"], ["--version"]])
def test_version(program, args):
    out = subprocess.run(
        [BIN / program, *args], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout == f"{program} {__version__}\n"


def test_no_command_prints_usage_and_fails():
    out = subprocess.run([BIN / "compute-domain-agent"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "usage: compute-domain-agent" in out.stderr


def test_subcommands_registered_by_a_program_run_their_handler(capsys):
    from runtime.cli import run_program

    def add(sub):
        hello = sub.add_parser("hello")
        hello.add_argument("--name", default="world")
        hello.set_defaults(handler=lambda args: print(f"hello {args.name}") or 3)

    assert run_program("p", None, ["hello", "--name", "cd"], add) == 3
    assert capsys.readouterr().out == "hello cd\n"
    assert run_program("p", None, ["version"], add) == 0
    assert capsys.readouterr().out == f"p {__version__}\n"


def test_the_daemon_probe_does_not_load_the_kubernetes_client():
    """`daemon check` is the IMEX daemon's exec probe, run every few seconds on every
    node: it must not pay for the Kubernetes client (half a second of CPU a start) that
    only `diagnose` and the long-running commands need."""
    script = (
        "import sys\n"
        "from agent.cli import main\n"
        "code = main(['daemon', 'check'])\n"
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, env={"PATH": "/usr/bin:/bin"}, check=True)  # fmt: skip
    assert out.stdout.splitlines()[-1] == "0 []"


def test_the_agent_help_describes_the_agent_for_an_admin():
    """`compute-domain-agent --help` says what the program is, not how its code is built."""
    proc = subprocess.run([BIN / "compute-domain-agent", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "node agent of the compute-domain.nvidia.com DRA driver" in out
    assert "handlers" not in out and "process-global" not in out


def test_the_host_managed_demo_says_imex_runs_on_the_host():
    from sim.cluster.demo import DemoOptions, _imex_where

    assert _imex_where(DemoOptions(mode="hostManaged")) == "IMEX on the host"
    assert _imex_where(DemoOptions()) == "IMEX in the pod"
    assert _imex_where(DemoOptions(imex_placement="agent")) == "IMEX in the agent"
