"""`compute-domain-controller` start-up validation, with the reference's messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "compute-domain-controller"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BIN, "--image-name", "img", "--kubeconfig", "/nonexistent", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, message", [
    (("--feature-gates", "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=false"),
     "feature gate validation failed: feature gate ComputeDomainCliques requires "
     "IMEXDaemonsWithDNSNames to also be enabled"),
    (("--imex-mode", "hostManaged"),
     'imex configuration validation failed: imex.mode="hostManaged" requires the '
     "HostManagedIMEXDaemon feature gate to be enabled"),
    (("--imex-mode", "bogus"), 'imex configuration validation failed: unknown imex.mode "bogus"'),
    (("--imex-isolation", "channel"), 'imex.isolation="channel" is not supported yet'),
    (("--feature-gates", "Nope=true"), "unrecognized feature gate 'Nope'"),
    (("--leader-election-retry-period", "20s"), "retry period < renew deadline"),
])
def test_startup_validation(args, message):
    out = run(*args)
    assert out.returncode == 1
    assert message in out.stderr


def test_positional_arguments_are_refused():
    out = run("extra")
    assert out.returncode == 2 and "arguments not supported: ['extra']" in out.stderr
