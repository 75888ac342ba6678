"""Hypothesis profile of the fuzz tests: reproducible, bounded, no wall-clock deadline.

`derandomize=True` makes every run (and CI) draw the same examples, so a failure seen once
is seen again; `FUZZ_EXAMPLES=2000 pytest tests/fuzz` searches deeper on demand. The profile
is only registered here, never loaded, so the rest of the suite keeps its own settings;
the tests apply it with `@FUZZ` (tests/fuzz/fuzz_support.py).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "fuzz",
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
