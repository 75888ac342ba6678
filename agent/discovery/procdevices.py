"""Character-device major numbers from /proc/devices.

The IMEX channel and nvidia-caps device nodes are injected by CDI with an explicit major,
which the kernel assigns dynamically; /proc/devices is the only place to learn it.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Final

from agent.discovery.discovery_error import DiscoveryError
from api import names

CHARACTER_HEADER: Final = "Character devices:"
BLOCK_HEADER: Final = "Block devices:"
INT32_MAX: Final = 2**31 - 1

# What to tell an admin when a known device is missing; other names get a generic hint.
_MISSING_HINTS: Final = MappingProxyType(
    {
        names.PROC_DEVICES_IMEX_CHANNELS: (
            "the NVIDIA driver on this node has no IMEX channel support (install a driver with "
            "IMEX channels, >= 570.158.01, or point --proc-devices-path at the right file)"
        ),
        names.PROC_DEVICES_NVIDIA_CAPS: (
            "the NVIDIA driver on this node exposes no capability devices (load the nvidia "
            "kernel module, or point --proc-devices-path at the right file)"
        ),
    }
)


def _major_text(text: str, name: str) -> str | None:
    """Digits of the first `<int> <name>` line of the character section, or None.

    The name must end the line, so `nvidia-caps` never matches `nvidia-caps-imex-channels`.
    The section ends at "Block devices:" or at the end of the text.
    """
    in_chars = False
    for line in text.split("\n"):
        header = line.strip()
        if not in_chars:
            in_chars = header == CHARACTER_HEADER
            continue
        if header == BLOCK_HEADER:
            return None
        digits, sep, rest = line.lstrip(" \t").partition(" ")
        if sep and rest == name and digits.isascii() and digits.isdigit():
            return digits
    return None


def _to_int32(digits: str) -> int | None:
    # Length check first: int() refuses very long digit strings, and they are out of range anyway.
    if len(digits.lstrip("0")) > len(str(INT32_MAX)):
        return None
    value = int(digits)
    return value if value <= INT32_MAX else None


def char_major(text: str, name: str) -> int | None:
    """Major number of character device `name` in /proc/devices content; None if absent or bad.

    Never raises: any text is accepted and answered.
    """
    digits = _major_text(text, name)
    return None if digits is None else _to_int32(digits)


def read_char_major(path: Path | str, name: str) -> int:
    """Major number of character device `name` from the file at `path` (normally /proc/devices)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise DiscoveryError(
            f"cannot read {path}: {e.strerror or e}; point --proc-devices-path at the kernel's "
            f"device table (normally {names.DEFAULT_PROC_DEVICES})"
        ) from e
    digits = _major_text(text, name)
    if digits is None:
        hint = _MISSING_HINTS.get(
            name,
            "load the kernel module that provides it, or point --proc-devices-path at "
            "the right file",
        )
        raise DiscoveryError(f'{path} has no "{name}" character device: {hint}')
    major = _to_int32(digits)
    if major is None:
        raise DiscoveryError(
            f'{path}: major number {digits[:20]} of "{name}" does not fit in int32; the file is '
            f"not a kernel device table (point --proc-devices-path at {names.DEFAULT_PROC_DEVICES})"
        )
    return major
