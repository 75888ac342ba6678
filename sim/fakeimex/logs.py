"""IMEX-style log lines: `[Mon DD YYYY HH:MM:SS] [LEVEL] [tid N] message`.

The driver interleaves the child's stderr with its own log, so the fake writes the same kind
of timestamped, level-tagged lines (to stderr when LOG_FILE_NAME is empty, as the template
sets it) and honours LOG_LEVEL (0 off ... 4 INFO, 5 DEBUG).
"""

from __future__ import annotations

import os
import sys
import time
from types import MappingProxyType
from typing import TextIO

LEVELS = MappingProxyType({"FATAL": 1, "ERROR": 2, "WARNING": 3, "INFO": 4, "DEBUG": 5})


class ImexLog:
    """A leveled line logger bound to one stream."""

    def __init__(self, stream: TextIO = sys.stderr, level: int = 4) -> None:
        self.stream = stream
        self.level = level

    def log(self, level: str, message: str) -> None:
        if LEVELS[level] > self.level:
            return
        stamp = time.strftime("%b %d %Y %H:%M:%S")
        self.stream.write(f"[{stamp}] [{level}] [tid {os.getpid()}] {message}\n")
        self.stream.flush()

    def debug(self, message: str) -> None:
        self.log("DEBUG", message)

    def info(self, message: str) -> None:
        self.log("INFO", message)

    def warning(self, message: str) -> None:
        self.log("WARNING", message)

    def error(self, message: str) -> None:
        self.log("ERROR", message)

    def fatal(self, message: str) -> None:
        self.log("FATAL", message)
