"""Command-line scaffolding shared by the three programs, so `version` behaves the same."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TypeAlias

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
