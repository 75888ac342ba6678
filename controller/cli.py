"""Command line of `compute-domain-controller`: the cluster controller."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from api.validation_error import ValidationError
from api.version import __version__, version_line
from runtime.startupdump import log_startup

PROG = "compute-domain-controller"


def main(argv: Sequence[str] | None = None) -> int:
    """Like the reference, the controller takes flags only; `version` is the one word."""
    from controller.config import add_controller_flags

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["version"], ["--version"]):
        print(version_line(PROG))
        return 0
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    add_controller_flags(parser)
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.error(f"arguments not supported: {extra}")
    if args.version:
        print(version_line(PROG))
        return 0
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    from controller.app import main as run_main
    from controller.config import config_from_args
    from runtime.logsetup import configure_logging

    configure_logging(args.verbosity, args.logging_format, sys.stderr)
    try:
        config = config_from_args(args)
    except ValidationError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 1
    log_startup(logging.getLogger(PROG), __version__, config.gates, args)
    return asyncio.run(run_main(config))


if __name__ == "__main__":
    sys.exit(main())
