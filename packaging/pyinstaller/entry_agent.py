"""PyInstaller entry script of the frozen `compute-domain-agent` (agent.cli:main)."""

import sys

from agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
