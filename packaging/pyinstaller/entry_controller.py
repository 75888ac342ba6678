"""PyInstaller entry script of the frozen `compute-domain-controller` (controller.cli:main)."""

import sys

from controller.cli import main

if __name__ == "__main__":
    sys.exit(main())
