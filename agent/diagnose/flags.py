"""The flags of `compute-domain-agent diagnose`, apart from the command itself: every
start of the agent's CLI builds this parser (the IMEX daemon's exec probe among them),
and the command's modules load the Kubernetes client, half a second of CPU a probe does
not need."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from api import names
from api.imex import MODE_DRIVER_MANAGED, MODE_HOST_MANAGED
from runtime.cli import Subcommands, env_option, parse_duration

DEFAULT_DRIVER_NAMESPACE = "dra-driver-nvidia-gpu"
DEFAULT_GRACE_S = 120.0


def add_command(sub: Subcommands, environ: Mapping[str, str] | None = None) -> None:
    p = sub.add_parser(
        "diagnose", help="find the first broken boundary of a ComputeDomain (read-only)",
        description="Follow a ComputeDomain's evidence chain through the API (installation, "
        "node publication, controller reconciliation, allocation, node bootstrap, "
        "injection, cleanup) and name the first boundary that is not ok, with the next "
        "command to run. Only reads. Exit status: 0 all ok, 1 broken, 3 still bootstrapping "
        "(expected delay), 2 bad arguments or API server unreachable.")
    p.add_argument("domain", metavar="NAMESPACE/NAME", help="the ComputeDomain")
    env_option(p, "--kubeconfig", env=names.ENV_KUBECONFIG, default="",
               help="kubeconfig file; empty means in-cluster configuration", environ=environ)
    # Not bound to $NAMESPACE as the driver's own flags are: in an admin's shell that
    # variable means anything.
    p.add_argument("--driver-namespace", default=DEFAULT_DRIVER_NAMESPACE,
                   help="namespace the driver (controller, daemons, cliques) runs in "
                   f"(default: {DEFAULT_DRIVER_NAMESPACE})")
    p.add_argument("--mode", choices=(MODE_DRIVER_MANAGED, MODE_HOST_MANAGED), default="",
                   help="IMEX mode of the installation (default: detected)")
    p.add_argument("--placement", choices=names.PLACEMENTS, default="",
                   help="where nvidia-imex runs, driver-managed: pod or agent (default: "
                   "detected)")
    p.add_argument("--grace", type=parse_duration, default=DEFAULT_GRACE_S,
                   help="how long a missing step counts as expected bootstrap delay before "
                   f"it is a failure (default: {DEFAULT_GRACE_S:g}s)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--sim-root", type=Path, default=None,
                   help="simulated cluster only: its root directory, to read the container "
                   "views its kubelets publish")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from agent.diagnose.command import run

    return run(args)
