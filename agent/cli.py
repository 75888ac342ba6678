"""Command line of `compute-domain-agent`: the node agent.

The daemon's handlers are thin wrappers: `run_daemon` and `check_daemon` take the parsed
flags, the environment as a mapping and the process-boundary hooks explicitly, and never
touch process-global state (os.environ, signal handlers, logging setup). That lets the
simulated cluster run hundreds of daemon "containers" as tasks in one process with the same
code; `add_commands(sub, environ=...)` builds the flags against such a container's env.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from api import names
from api.validation_error import ValidationError
from api.version import __version__
from runtime import stackdump
from runtime.cli import Subcommands, env_option, parse_duration, run_program
from runtime.startupdump import log_startup

if TYPE_CHECKING:
    from agent.daemon.process import ImexLauncher
    from agent.daemon.readiness import CtlRunner

PROG = "compute-domain-agent"
# What `compute-domain-agent --help` tells an admin (the module docstring is for developers).
DESCRIPTION = (
    "The node agent of the compute-domain.nvidia.com DRA driver: the kubelet plugin that "
    "prepares ComputeDomain channel and daemon claims on this node, and the IMEX daemon "
    "of driver-managed ComputeDomains. Run `compute-domain-agent COMMAND --help` for a "
    "command's flags.")
# The kubernetes API classes the plugin calls (agent/plugin/cluster.py, nodeops.py,
# slices.py, runtime/draclient.py, runtime/events.py).
_PLUGIN_API_CLASSES = ("ApisApi", "CustomObjectsApi")


def _setup_logging(args: argparse.Namespace) -> None:
    """The process's logging (entry points only: never for in-process runs)."""
    from runtime.logsetup import configure_logging

    configure_logging(args.verbosity, args.logging_format, sys.stderr)


def add_commands(sub: Subcommands, environ: Mapping[str, str] | None = None) -> None:
    """The subcommands; flag defaults come from `environ` (None: os.environ)."""
    from agent.plugin.config import add_plugin_flags
    from runtime.logsetup import add_logging_flags

    plugin = sub.add_parser(
        "plugin", help="run the DRA kubelet plugin on this node",
        description="Serve kubelet's DRA plugin for compute-domain.nvidia.com on this node.")
    add_logging_flags(plugin, environ=environ)
    add_plugin_flags(plugin, environ=environ)
    plugin.set_defaults(handler=_run_plugin)

    keep = sub.add_parser(
        "keep", help="run the plugin as a child and restart it (agent placement's PID 1)",
        description="Run `compute-domain-agent plugin ...` as a child, restart it when it "
        "exits, and reap the nvidia-imex children a dead agent leaves behind, so an agent "
        "restart does not end the container (agent/keeper.py).")
    env_option(keep, "--restart-delay", env="KEEPER_RESTART_DELAY", type=parse_duration,
               default=1.0, help="delay before restarting an agent that exited quickly",
               environ=environ)
    env_option(keep, "--max-restart-delay", env="KEEPER_MAX_RESTART_DELAY",
               type=parse_duration, default=30.0, help="the most the delay grows to",
               environ=environ)
    env_option(keep, "--stable-after", env="KEEPER_STABLE_AFTER", type=parse_duration,
               default=10.0, help="an agent that ran this long is restarted at once",
               environ=environ)
    keep.add_argument("program", nargs=argparse.REMAINDER,
                      help="`plugin` and the plugin's flags")
    keep.set_defaults(handler=_run_keeper)

    daemon = sub.add_parser(
        "daemon", help="IMEX supervision in a ComputeDomain daemon pod",
        description="Run or probe the IMEX daemon of one ComputeDomain on this node.")
    daemon_sub = daemon.add_subparsers(dest="daemon_command", metavar="COMMAND")
    run = daemon_sub.add_parser("run", help="join the clique and supervise nvidia-imex")
    check = daemon_sub.add_parser("check", help="probe: exit 0 only if nvidia-imex is READY")
    for p in (run, check):
        add_logging_flags(p, environ=environ)
        env_option(p, "--imexd-dir", env="IMEXD_DIR", type=Path, default=Path(names.IMEXD_DIR),
                   help="the /imexd directory the kubelet plugin mounts", environ=environ)
        env_option(p, "--imex-ctl", env="IMEX_CTL", default=names.IMEX_CTL_BINARY,
                   help="nvidia-imex-ctl to query (found through PATH)", environ=environ)
    env_option(run, "--hosts-file", env="HOSTS_FILE", type=Path,
               default=Path(names.DEFAULT_HOSTS_FILE), help="hosts file for the peer names",
               environ=environ)
    env_option(run, "--imex", env="IMEX_BINARY", default=names.IMEX_BINARY,
               help="nvidia-imex to run (found through PATH)", environ=environ)
    env_option(run, "--kubeconfig", env=names.ENV_KUBECONFIG, default="",
               help="kubeconfig file; empty means in-cluster configuration", environ=environ)
    env_option(run, "--feature-gates", env=names.ENV_FEATURE_GATES, default="",
               help="Name=bool,Name=bool (the controller passes its full map)", environ=environ)
    env_option(run, "--poll-interval", env="IMEX_POLL_INTERVAL", type=parse_duration,
               default=1.0, help="how often to ask nvidia-imex-ctl -q for the state",
               environ=environ)
    env_option(run, "--reload-interval", env="IMEX_RELOAD_INTERVAL", type=parse_duration,
               default=5.0, help="at most one SIGUSR1 (re-read the hosts file) to nvidia-imex "
               "per this long; peer changes in between are folded into one",
               environ=environ)
    env_option(run, "--not-ready-event-after", env="IMEX_NOT_READY_EVENT_AFTER",
               type=parse_duration, default=60.0,
               help="record an IMEXDaemonNotReady Warning Event on this pod once nvidia-imex "
               "has not been READY for this long (at most one a minute; 0: never)",
               environ=environ)
    run.set_defaults(handler=_run_daemon)
    check.set_defaults(handler=_check_daemon)

    from agent.diagnose.flags import add_command as add_diagnose
    from agent.prestart import add_command as add_prestart

    add_diagnose(sub, environ=environ)
    add_prestart(sub, environ=environ)


def _run_daemon(args: argparse.Namespace) -> int:
    _setup_logging(args)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        stackdump.install(loop)
        return await run_daemon(args, os.environ, stop)

    return asyncio.run(main())


async def run_daemon(
    args: argparse.Namespace,
    env: Mapping[str, str],
    stop: asyncio.Event,
    *,
    launcher: ImexLauncher | None = None,
    ctl_runner: CtlRunner | None = None,
    err: TextIO | None = None,
) -> int:
    """`daemon run` until `stop` is set (what SIGTERM does); the exit status.

    `env` is the container's environment (CDI and downward-API identity, and what the
    `nvidia-imex` child inherits); `launcher` and `ctl_runner` replace the real processes
    (None: real ones); errors are printed to `err` (None: stderr).
    """
    from agent.daemon.identity import IdentityError, identity_from
    from agent.daemon.netcheck import NetcheckError
    from agent.daemon.supervisor import ImexSupervisor, SupervisorPaths
    from api.featuregates import COMPUTE_DOMAIN_CLIQUES, IMEX_DAEMONS_WITH_DNS_NAMES, FeatureGates
    from runtime import kubecall

    err = err or sys.stderr
    try:
        identity = identity_from(env)
        gates = FeatureGates.parse(args.feature_gates)
        gates.validate()
    except (IdentityError, ValidationError) as error:
        print(f"Error: {error}", file=err)
        return 1
    log_startup(logging.getLogger(__name__), __version__, gates, args)
    paths = SupervisorPaths(imexd_dir=args.imexd_dir, hosts_file=args.hosts_file,
                            imex_binary=args.imex, imex_ctl_binary=args.imex_ctl)
    try:
        api = kubecall.api_client(args.kubeconfig)
        try:
            supervisor = ImexSupervisor(
                identity, api,
                dns_names=gates.enabled(IMEX_DAEMONS_WITH_DNS_NAMES),
                cliques=gates.enabled(COMPUTE_DOMAIN_CLIQUES), paths=paths,
                poll_interval=args.poll_interval, launcher=launcher, ctl_runner=ctl_runner,
                imex_env=env, not_ready_event_after=args.not_ready_event_after,
                reload_interval=args.reload_interval)
            return await supervisor.run(stop)
        finally:
            api.close()
    except (NetcheckError, OSError, RuntimeError, ValueError) as error:
        print(f"Error: {error}", file=err)
        return 1


def _check_daemon(args: argparse.Namespace) -> int:
    return asyncio.run(check_daemon(args, os.environ))


async def check_daemon(
    args: argparse.Namespace,
    env: Mapping[str, str],
    *,
    ctl_runner: CtlRunner | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`daemon check` against the container environment `env`; the exit status."""
    from agent.daemon.readiness import check

    if not env.get(names.ENV_CLIQUE_ID):
        # A non-fabric node runs no IMEX; its pod's readiness is what the controller reports.
        print("no cliqueID: no IMEX daemon on this node, nothing to check", file=out or sys.stdout)
        return 0
    return await check(args.imex_ctl, str(args.imexd_dir / names.IMEXD_CONFIG),
                       runner=ctl_runner, out=out, err=err)


def _freeze_long_lived_objects() -> None:
    """Take what start-up creates for good (modules, classes and functions: ~140k objects
    with the kubernetes API classes and their models) out of the cyclic collector's scans.

    They live as long as the process; a full collection walked them all and took tens of
    milliseconds in the middle of a Prepare (the p99 of tests/bench/bench_prepare.py).
    The API classes the plugin uses are loaded here, before the freeze, rather than
    lazily by its first API call. Entry points only, like logging: process-wide.
    https://docs.python.org/3/library/gc.html#gc.freeze
    """
    import gc

    from kubernetes import client

    for name in _PLUGIN_API_CLASSES:
        getattr(client, name)  # kubernetes.client imports an API class on first access
    gc.collect()
    gc.freeze()


def _run_keeper(args: argparse.Namespace) -> int:
    from agent.keeper import Backoff, run_keeper

    program = list(args.program)
    if program[:1] == ["--"]:
        program = program[1:]
    if program[:1] != ["plugin"]:
        print(f"{PROG} keep: expected `plugin` and its flags, got {program[:1] or 'nothing'}",
              file=sys.stderr)
        return 2
    if not 0 <= args.restart_delay <= args.max_restart_delay:
        print(f"{PROG} keep: need 0 <= --restart-delay <= --max-restart-delay",
              file=sys.stderr)
        return 2
    return run_keeper(program, Backoff(initial=args.restart_delay,
                                       maximum=args.max_restart_delay,
                                       stable_after=args.stable_after))


def _run_plugin(args: argparse.Namespace) -> int:
    from agent.plugin.app import run
    from agent.plugin.config import config_from_args

    _setup_logging(args)
    try:
        config = config_from_args(args)
    except ValidationError as err:
        print(f"{PROG} plugin: {err}", file=sys.stderr)
        return 1
    log_startup(logging.getLogger(__name__), __version__, config.gates, args)
    _freeze_long_lived_objects()
    return asyncio.run(run(config))


def main(argv: Sequence[str] | None = None) -> int:
    return run_program(PROG, DESCRIPTION, argv, add_commands)


if __name__ == "__main__":
    sys.exit(main())
