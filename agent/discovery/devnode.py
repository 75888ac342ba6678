"""Character device nodes handed to CDI (the runtime creates them inside the container)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CHAR_DEVICE: Final = "c"
MINOR_MAX: Final = (1 << 20) - 1  # Linux MINORBITS


@dataclass(frozen=True)
class CharDevice:
    """A device node given by type, major and minor, so the host node itself need not exist.

    `file_mode` holds permission bits only (e.g. 0o666), None when unknown; `modify` is
    the driver's `DeviceFileModify` value, kept for completeness.
    """

    path: str
    major: int
    minor: int
    file_mode: int | None = None
    modify: int = 0

    @property
    def type(self) -> str:
        return CHAR_DEVICE


def char_device_numbers(path: Path | str) -> CharDevice | None:
    """The char device at `path` (links followed), with its numbers and mode; else None."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return CharDevice(
        str(path), os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)
    )
