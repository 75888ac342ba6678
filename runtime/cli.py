"""Command-line scaffolding shared by the three programs, so `version` behaves the same."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from api import draconvert, names
from api.version import version_line

# argparse does not export the type of add_subparsers().
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def program_parser(
    prog: str, description: str | None
) -> tuple[argparse.ArgumentParser, Subcommands]:
    """A parser with `--version` and a `version` subcommand; callers add their subcommands."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("version", help="print the version and exit")
    return parser, sub


def run_program(
    prog: str,
    description: str | None,
    argv: Sequence[str] | None,
    add_commands: Callable[[Subcommands], None] = lambda sub: None,
) -> int:
    """Parse `argv`, answer `version`, else run the chosen subcommand's `handler`.

    A subcommand registers its handler with `set_defaults(handler=fn)`; `fn(args)`
    returns the exit code. No subcommand prints usage and exits 2.
    """
    parser, sub = program_parser(prog, description)
    add_commands(sub)
    args = parser.parse_args(argv)
    if args.version or args.command == "version":
        print(version_line(prog))
        return 0
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return int(handler(args))


def env_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *flags: str,
    env: str | Sequence[str],
    type: Callable[[str], Any] = str,
    default: Any = None,
    required: bool = False,
    help: str = "",
    environ: Mapping[str, str] | None = None,
) -> None:
    """A flag whose value may also come from environment variables (the first set one wins).

    This is how the reference driver's flags work, so a DaemonSet's env keeps working. A bad
    value in the environment is reported with the variable's name, not a Python traceback.
    """
    envs = (env,) if isinstance(env, str) else tuple(env)
    source = os.environ if environ is None else environ
    long_flags = [f for f in flags if f.startswith("--")] or list(flags)
    dest = long_flags[0].lstrip("-").replace("-", "_")
    for name in envs:
        raw = source.get(name)
        if raw is None:
            continue
        try:
            default = type(raw)
        except (ValueError, argparse.ArgumentTypeError) as err:
            raise SystemExit(
                f"invalid value {raw!r} in environment variable {name} ({flags[0]}): {err}"
            ) from None
        required = False
        break
    names = "/".join(envs)
    shown = f" [env {names}]" + ("" if default in (None, "") else f" (default: {default})")
    parser.add_argument(*flags, dest=dest, type=type, default=default, required=required,
                        help=help + shown)


def parse_bool(text: str) -> bool:
    """The boolean spellings Go's ParseBool accepts (the reference's flags use them)."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (use true or false)")


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds from a Go duration (`15s`, `1m30s`, `500ms`) or a bare number of seconds."""
    text = text.strip()
    try:
        # float() alone would also take `nan`, `inf`, `1_0` and non-ASCII digits.
        if not text.isascii() or "_" in text:
            raise ValueError(text)
        value = float(text)
    except ValueError:
        pos, total = 0, 0.0
        for match in _DURATION.finditer(text):
            if match.start() != pos:
                break
            total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos != len(text) or not text:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration (examples: 15s, 1m30s, 500ms)") from None
        value = total
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite duration")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def parse_resource_api_version(text: str) -> str:
    """A resource.k8s.io version (`v1beta1` or `resource.k8s.io/v1beta1`); empty: auto."""
    if not text.strip():
        return ""
    try:
        return draconvert.check_version(text.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_kube_client_flags(group: argparse.ArgumentParser | argparse._ArgumentGroup,
                          option: Callable[..., None] = env_option) -> None:
    """`--kubeconfig`, `--kube-api-qps` and `--kube-api-burst`, as the reference's programs
    take them (the chart sets the latter two; the client here does not rate-limit)."""
    option(group, "--kubeconfig", env=names.ENV_KUBECONFIG, default="",
           help="kubeconfig file; empty means in-cluster configuration")
    option(group, "--kube-api-qps", env=names.ENV_KUBE_API_QPS, type=float, default=5.0,
           help="accepted for compatibility with the reference driver")
    option(group, "--kube-api-burst", env=names.ENV_KUBE_API_BURST, type=int, default=10,
           help="accepted for compatibility with the reference driver")


def parse_placement(text: str) -> str:
    """`pod` or `agent` (see api/names.py PLACEMENTS)."""
    value = text.strip().lower()
    if value not in names.PLACEMENTS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an IMEX placement: use pod (a daemon pod per ComputeDomain and "
            "node) or agent (the node agent runs nvidia-imex itself)")
    return value


def add_imex_placement_flag(group: argparse.ArgumentParser | argparse._ArgumentGroup,
                            option: Callable[..., None] = env_option) -> None:
    """`--imex-placement` (IMEX_PLACEMENT, the chart's
    `resources.computeDomains.imex.placement`): the controller and the agents must agree."""
    option(group, "--imex-placement", env=names.ENV_IMEX_PLACEMENT, type=parse_placement,
           default=names.PLACEMENT_POD,
           help="where nvidia-imex runs for driver-managed domains: pod (a daemon pod per "
           "ComputeDomain and node) or agent (supervised by the node agent)")


def add_resource_api_flag(group: argparse.ArgumentParser | argparse._ArgumentGroup,
                          option: Callable[..., None] = env_option) -> None:
    """`--resource-api-version` (RESOURCE_API_VERSION, the chart's `resourceApiVersion`)."""
    option(group, "--resource-api-version", env=names.ENV_RESOURCE_API_VERSION,
           type=parse_resource_api_version, default="",
           help="resource.k8s.io version to speak (v1, v1beta2, v1beta1); empty: the newest "
           "the API server serves")
