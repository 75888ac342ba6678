"""`make refsuite`'s verdict (tests/refsuite/run.py): a known failure counts only where it is
known to fail; anywhere else it is a failure like any other."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "refsuite"))

import run

NAME = "CDs: self-initiated unprepare of stale RCs in PrepareStarted"


def tap(failed_at: str) -> str:
    return "\n".join([
        "1..3",
        "ok 1 CDs: IMEX channel injection (single) in 2263ms",
        "ok 2 CDs: IMEX channel injection (all) # skip tested chart version smaller than 25.8.0",
        f"not ok 3 {NAME} in 8880ms",
        "# (in test file tests/bats/test_cd_misc.bats, line 186)",
        f"#   `{failed_at}' failed",
    ])


def test_a_known_failure_at_its_assertion_passes_the_run():
    rows, ok = run.summarize(tap('assert_output --partial "partially prepared claim not stale: '
                                 'default/batssuite-rc-bad-opaque-config"'))
    assert ok
    assert [r[1] for r in rows] == ["passed", "skipped", "failed (known)"]
    assert rows[1][2] == "tested chart version smaller than 25.8.0"


def test_a_known_test_failing_elsewhere_fails_the_run():
    rows, ok = run.summarize(tap('assert_output --partial "Marked claim PrepareAborted"'))
    assert not ok
    assert rows[2][1] == "FAILED"


def test_no_tests_is_no_pass():
    assert run.summarize("bats: no such file\n") == ([], False)
