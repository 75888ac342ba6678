"""Command line of `compute-domain-agent`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from api.cli import run_program

PROG = "compute-domain-agent"


def main(argv: Sequence[str] | None = None) -> int:
    return run_program(PROG, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
