"""Character device nodes handed to CDI (the runtime creates them inside the container)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

CHAR_DEVICE: Final = "c"
MINOR_MAX: Final = (1 << 20) - 1  # Linux MINORBITS


@dataclass(frozen=True)
class CharDevice:
    """A device node given by type, major and minor, so the host node itself need not exist.

    `file_mode` holds permission bits only (e.g. 0o666); `modify` is the driver's
    `DeviceFileModify` value, kept for completeness.
    """

    path: str
    major: int
    minor: int
    file_mode: int
    modify: int = 0

    @property
    def type(self) -> str:
        return CHAR_DEVICE
