"""Command line of `compute-domain-agent`: the node agent."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from api.cli import Subcommands, env_option, run_program
from api.errors import ValidationError

PROG = "compute-domain-agent"


def _setup_logging(verbosity: int) -> None:
    level = logging.DEBUG if verbosity >= 5 else logging.INFO if verbosity >= 1 else logging.WARNING
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def add_commands(sub: Subcommands) -> None:
    from agent.plugin.config import add_plugin_flags

    plugin = sub.add_parser(
        "plugin", help="run the DRA kubelet plugin on this node",
        description="Serve kubelet's DRA plugin for compute-domain.nvidia.com on this node.")
    env_option(plugin, "-v", "--verbosity", env="LOG_VERBOSITY", type=int, default=4,
               help="log verbosity (0 warnings only, 1-4 info, 5+ debug)")
    add_plugin_flags(plugin)
    plugin.set_defaults(handler=_run_plugin)


def _run_plugin(args: argparse.Namespace) -> int:
    from agent.plugin.app import run
    from agent.plugin.config import config_from_args

    _setup_logging(args.verbosity)
    try:
        config = config_from_args(args)
    except ValidationError as err:
        print(f"{PROG} plugin: {err}", file=sys.stderr)
        return 1
    return asyncio.run(run(config))


def main(argv: Sequence[str] | None = None) -> int:
    return run_program(PROG, __doc__, argv, add_commands)


if __name__ == "__main__":
    sys.exit(main())
