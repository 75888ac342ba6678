"""The kubelet checkpoint-manager checksum, as the reference computes it.

Go's `checksum.New(data)` feeds `data` (a `[]byte`) through go-spew (`%#v`) into FNV-1a
32-bit. go-spew renders a byte slice as `([]uint8)[` + the decimal byte values separated by
single spaces + `]`, so that text is what gets hashed, not the bytes themselves.

`checksum` is on the path of every Prepare (two checksums per checkpoint write, two writes
per Prepare). Building that text and hashing it a character at a time in Python took
about half a millisecond per kilobyte of JSON, the largest CPU cost of a checkpoint write
(tests/bench/bench_prepare.py), so `checksum` hashes one input byte (one ` <decimal>` token
of the text) per step instead, never building the text: see `_TokenTables`.
`fnv1a32(spew_bytes(data))` is the plain definition it must equal.
"""

from __future__ import annotations

import array
import functools
from collections.abc import Sequence
from typing import Final

FNV32_OFFSET: Final = 0x811C9DC5
FNV32_PRIME: Final = 0x01000193
_MASK: Final = 0xFFFFFFFF
_SPEW_OPEN: Final = b"([]uint8)["
_SPEW_CLOSE: Final = b"]"
# An array type code of at least 32 bits ("I" is 4 bytes wherever CPython runs on Linux).
_U32: Final = "I" if array.array("I").itemsize >= 4 else "L"


def fnv1a32(data: bytes, h: int = FNV32_OFFSET) -> int:
    """Plain FNV-1a 32-bit (continued from state `h`)."""
    for byte in data:
        h = ((h ^ byte) * FNV32_PRIME) & _MASK
    return h


def spew_bytes(data: bytes) -> bytes:
    """go-spew's `%#v` rendering of a `[]byte`."""
    return _SPEW_OPEN + " ".join(map(str, data)).encode("ascii") + _SPEW_CLOSE


class _TokenTables:
    """For each byte value v, FNV-1a over the token ` v` (space, decimal digits) as one
    step: `h -> h * mul[v] + add[v][h & 0xFF]` (mod 2**32).

    Why that holds: one FNV-1a step `(h ^ c) * P` changes only the low 8 bits of `h`
    before multiplying, so with h = 256 * H + L a token of k characters takes h to
    256 * H * P**k + G(L), where G(L) is the token hashed from state L alone; that is
    h * P**k + (G(L) - L * P**k). A table of 256 entries (1 KiB, an array) is made the
    first time its byte value is hashed: JSON text uses a quarter of them."""

    def __init__(self) -> None:
        self.mul = [pow(FNV32_PRIME, len(b" %d" % value), _MASK + 1) for value in range(256)]
        self.add: list[Sequence[int]] = [()] * 256  # () until made
        # The states after " " and after each token that starts a longer one (" 1" to
        # " 25"), from every L.
        self._prefix: dict[bytes, Sequence[int]] = {
            b" ": array.array(_U32, [fnv1a32(b" ", low) for low in range(256)])}

    def cover(self, data: bytes) -> None:
        """Make the tables `data`'s byte values need."""
        for value in set(data):
            if not self.add[value]:
                after = self._states(b" %d" % value)
                mul = self.mul[value]
                self.add[value] = array.array(_U32, [(s - low * mul) & _MASK
                                                     for low, s in enumerate(after)])

    def _states(self, token: bytes) -> Sequence[int]:
        """FNV-1a over `token` from each of the 256 states L."""
        known = self._prefix.get(token)
        if known is not None:
            return known
        after = array.array(_U32, [((s ^ token[-1]) * FNV32_PRIME) & _MASK
                                   for s in self._states(token[:-1])])
        if len(token) < 4 and int(token) <= 25:  # " 1".." 25" start longer tokens
            self._prefix[token] = after
        return after


@functools.cache
def _token_tables() -> _TokenTables:
    return _TokenTables()


def checksum(data: bytes) -> int:
    """The checksum the reference stores for the JSON text `data`: FNV-1a of its spew
    text, four input bytes per loop turn (reduced mod 2**32 once a turn: the low bits of
    sums and products do not depend on the high ones)."""
    if not data:
        return fnv1a32(_SPEW_OPEN + _SPEW_CLOSE)
    tables = _token_tables()
    tables.cover(data)
    mul, add = tables.mul, tables.add
    h = fnv1a32(_SPEW_OPEN + b"%d" % data[0])
    rest = memoryview(data)[1:]
    whole = len(rest) - len(rest) % 4
    each = iter(rest[:whole])
    for a, b, c, d in zip(each, each, each, each, strict=True):
        h = h * mul[a] + add[a][h & 0xFF]
        h = h * mul[b] + add[b][h & 0xFF]
        h = h * mul[c] + add[c][h & 0xFF]
        h = (h * mul[d] + add[d][h & 0xFF]) & _MASK
    for byte in rest[whole:]:
        h = (h * mul[byte] + add[byte][h & 0xFF]) & _MASK
    return fnv1a32(_SPEW_CLOSE, h)
