"""Progress lines for long steps (cluster start, 100+ node bring-up).

A step that finishes quickly prints nothing; one that takes long says where it is, on
stderr (never into a `--json` document on stdout), at most one line per `interval`, so a
user watching a 10-minute bring-up knows it is moving and how far it got.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

INTERVAL = 5.0


class Progress:
    """`update(text)` prints `<label>: <text> (<elapsed>s)` once the step has run `interval`
    seconds and at most once per `interval` after that; the clock is injectable for tests."""

    def __init__(self, label: str, *, interval: float = INTERVAL,
                 stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.interval = interval
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self._last = self.started

    def update(self, text: str) -> bool:
        """Print `text` if it is time to; True if printed."""
        now = self.clock()
        if now - self._last < self.interval:
            return False
        self._last = now
        print(f"{self.label}: {text} ({now - self.started:.0f}s)",
              file=self.stream or sys.stderr, flush=True)
        return True
