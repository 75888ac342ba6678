"""`nvidia-imex-ctl -q` output: the daemon's readiness probe (`agent.daemon.readiness`) and
the host-managed IMEX probe (`agent.hostimex.probe`).

Properties: for any output, exit status and runner failure, `probe` answers a defined state
without raising: READY exactly when the command succeeded and some line is exactly
`READY` (never `NOT_READY`), else UNAVAILABLE with a detail saying why, or the last
non-empty output line (a single stripped line); both modules' READY tests agree; the text
the host probe puts into its error message is bounded.
"""

from __future__ import annotations

import asyncio

import pytest
from fuzz_support import FUZZ, mutated
from hypothesis import example, given
from hypothesis import strategies as st

from agent.daemon import readiness
from agent.hostimex import probe as hostprobe

words = st.sampled_from(
    ["READY", "NOT_READY", "INIT_GPU", "INITIALIZING", "UNAVAILABLE", "ready", " READY ",
     "READY\r", "\x00READY", "READY.", "", " ", "\t", "\u2028", "\x0b", "\x1c", "\x85"]
)
outputs = st.lists(words | st.text(max_size=12), max_size=8).map("\n".join) | st.text(max_size=40)


def run_probe(code: int, stdout: str, stderr: str, fail: type[BaseException] | None = None):
    async def runner(argv, timeout):
        assert argv[-1] == "-q"
        if fail is not None:
            raise fail("boom")
        return code, stdout, stderr

    return asyncio.run(readiness.probe("nvidia-imex-ctl", "/etc/imex.cfg", runner=runner))


@FUZZ
@given(outputs, outputs, st.sampled_from([0, 0, 1, 2, -9, 255]))
@example("NOT_READY", "", 0)
@example("READY", "", 1)
@example("INIT_GPU\nREADY\n", "", 0)
@example("x" * 100_000, "", 0)
def test_probe_answers_a_defined_state(stdout, stderr, code):
    state, detail = run_probe(code, stdout, stderr)
    ready = code == 0 and any(line.strip() == "READY" for line in stdout.splitlines())
    assert (state == readiness.READY) == ready
    assert readiness.is_ready(stdout) == hostprobe.is_ready_output(stdout)
    if state == readiness.UNAVAILABLE:
        assert detail
    elif state != readiness.READY:
        assert not detail
        assert state == state.strip() and state and len(state.splitlines()) == 1
        assert state in stdout
        assert not readiness.is_ready(state)


@FUZZ
@given(mutated("INIT_GPU\nREADY\n"))
def test_mutated_ready_output(data):
    text = data.decode("utf-8", errors="replace")
    state, _ = run_probe(0, text, "")
    assert (state == readiness.READY) == readiness.is_ready(text)


@pytest.mark.parametrize("fail", [OSError, FileNotFoundError, TimeoutError])
def test_runner_failures_are_unavailable(fail):
    state, detail = run_probe(0, "READY", "", fail)
    assert state == readiness.UNAVAILABLE and detail


@FUZZ
@given(outputs | st.text(min_size=1990, max_size=2100))
def test_host_probe_message_is_bounded(output):
    shown = hostprobe._shorten(output)
    assert shown and len(shown) <= hostprobe._OUTPUT_LIMIT + 1


@pytest.mark.parametrize(
    "output, ready",
    [
        ("NOT_READY", False),  # the reference's substring test said READY here
        ("READY_NOT", False),
        ("IMEX state: READY", False),
        ("  READY  \r\n", True),
        ("INIT_GPU\n\nREADY", True),
        ("", False),
    ],
)
def test_nasty_outputs(output, ready):
    assert readiness.is_ready(output) is ready
    assert hostprobe.is_ready_output(output) is ready
