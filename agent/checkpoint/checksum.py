"""The kubelet checkpoint-manager checksum, as the reference computes it.

Go's `checksum.New(data)` feeds `data` (a `[]byte`) through go-spew (`%#v`) into FNV-1a
32-bit. go-spew renders a byte slice as `([]uint8)[` + the decimal byte values separated by
single spaces + `]`, so that text is what gets hashed, not the bytes themselves.
"""

from __future__ import annotations

from typing import Final

FNV32_OFFSET: Final = 0x811C9DC5
FNV32_PRIME: Final = 0x01000193


def fnv1a32(data: bytes) -> int:
    """Plain FNV-1a 32-bit."""
    h = FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV32_PRIME) & 0xFFFFFFFF
    return h


def spew_bytes(data: bytes) -> bytes:
    """go-spew's `%#v` rendering of a `[]byte`."""
    return b"([]uint8)[" + " ".join(map(str, data)).encode("ascii") + b"]"


def checksum(data: bytes) -> int:
    """The checksum the reference stores for the JSON text `data`."""
    return fnv1a32(spew_bytes(data))
