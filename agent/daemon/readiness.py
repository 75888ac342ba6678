"""Is the local IMEX daemon READY?

`nvidia-imex-ctl -c <config> -q` asks the local daemon's command service for its state and
prints one word (`READY` once it has joined its domain). The reference only learns this
through the pod's probes (its `check` subcommand) and then copies pod readiness into the
clique entry (its PodManager), up to a readiness-probe period late:
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/tree/main/cmd/compute-domain-daemon.
`ReadinessPoller` lets the daemon flip its entry the moment the state changes; `check_main`
keeps the `check` subcommand for the probes, with the same exact `READY` test.

How `nvidia-imex-ctl` is run is a `CtlRunner` (default `run_subprocess`, the real program):
the simulated cluster at scale answers in-process instead of starting hundreds of processes
a second, while the state parsing and the READY test here stay the code under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TextIO, TypeAlias

from runtime.logsetup import vlog

log = logging.getLogger(__name__)

READY = "READY"
UNAVAILABLE = "UNAVAILABLE"
_DETAIL_LIMIT = 2000

CtlRunner: TypeAlias = Callable[[Sequence[str], float], Awaitable[tuple[int, str, str]]]
"""`runner(argv, timeout)` -> (exit status, stdout, stderr) of the program `argv`; OSError
when it cannot be run, TimeoutError when it did not finish within `timeout` seconds."""


def is_ready(output: str) -> bool:
    """True only if some line is exactly `READY` (so `NOT_READY` is not ready)."""
    return any(line.strip() == READY for line in output.splitlines())


def _state_of(stdout: str) -> str:
    if is_ready(stdout):
        return READY
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else UNAVAILABLE


async def run_subprocess(argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
    """The default `CtlRunner`: a real process, killed at the timeout or on cancellation."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # a timeout kills whatever it started too
    )
    try:
        # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that races the
        # answer, and the poller calling this would never stop.
        async with asyncio.timeout(timeout):
            out, err_out = await proc.communicate()
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    code = proc.returncode if proc.returncode is not None else -1
    return code, out.decode("utf-8", errors="replace"), err_out.decode("utf-8", errors="replace")


async def probe(
    ctl: str, config_path: str, *, timeout: float = 5.0, runner: CtlRunner | None = None
) -> tuple[str, str]:
    """(state, detail): the state word, and what went wrong when it is UNAVAILABLE."""
    argv = [ctl, "-c", config_path, "-q"]
    try:
        code, stdout, err_out = await (runner or run_subprocess)(argv, timeout)
    except OSError as err:
        return UNAVAILABLE, f"cannot run {ctl}: {err}"
    except TimeoutError:
        return UNAVAILABLE, f"{ctl} -q did not answer within {timeout:g}s"
    stderr = err_out.strip()[:_DETAIL_LIMIT]
    if code != 0:
        detail = stderr or stdout.strip()[:_DETAIL_LIMIT] or "(no output)"
        return UNAVAILABLE, f"{ctl} -q exited with status {code}: {detail}"
    state = _state_of(stdout)
    return state, "" if state != UNAVAILABLE else f"{ctl} -q printed nothing"


async def query_state(
    ctl: str, config_path: str, *, timeout: float = 5.0, runner: CtlRunner | None = None
) -> str:
    """The daemon's state word (`READY`, `INITIALIZING`, ...), `UNAVAILABLE` if unreachable.

    Never raises for a missing tool, a dead daemon or a timeout: those are just "not ready".
    """
    state, detail = await probe(ctl, config_path, timeout=timeout, runner=runner)
    if detail:
        log.debug("IMEX state query: %s", detail)
    return state


FAST_POLLS = 50  # see ReadinessPoller's first_interval


class ReadinessPoller:
    """Polls the IMEX state and reports changes of readiness, with hysteresis.

    READY is reported at once. Once READY was reported, NotReady is reported only after
    `failures_to_not_ready` consecutive polls that were not READY, or at once after
    `mark_down()` (the supervisor knows IMEX exited or is restarting). One slow or failed
    `nvidia-imex-ctl -q` on a loaded node therefore flips nothing: each flip is a write to
    the clique that every peer watches, and a NotReady entry holds back every Prepare
    waiting on it.

    `on_change(ready, state)` is awaited for the first observation and then only when the
    reported readiness flips. If it raises, the change is not recorded, so it is retried on
    the next poll (e.g. the clique entry is not there yet). `on_poll(ready, state)`, if
    given, is called after every poll with the readiness as reported (after hysteresis).
    """

    def __init__(
        self,
        query: Callable[[], Awaitable[str]],
        on_change: Callable[[bool, str], Awaitable[None]],
        interval: float = 1.0,
        *,
        failures_to_not_ready: int = 3,
        on_poll: Callable[[bool, str], None] | None = None,
        first_interval: float | None = None,
    ) -> None:
        """`first_interval`: while not READY, poll this often for the first
        `FAST_POLLS` polls, then every `interval` (someone waits for the first READY: a
        Prepare in agent placement); None: every `interval`."""
        if failures_to_not_ready < 1:
            raise ValueError("failures_to_not_ready must be at least 1")
        self.query = query
        self.on_change = on_change
        self.on_poll = on_poll
        self.interval = interval
        self.failures_to_not_ready = failures_to_not_ready
        self.ready: bool | None = None  # None until the first report went through
        self.state = ""
        self.failures = 0  # consecutive polls that were not READY
        self._down = False
        self._wake = asyncio.Event()
        self.first_interval = first_interval

    def poke(self) -> None:
        """Poll now instead of at the end of the interval (e.g. after a restart)."""
        self._wake.set()

    def mark_down(self) -> None:
        """IMEX is known to be down (it exited, or is being restarted): the next poll that
        is not READY reports NotReady without waiting for more failures."""
        self._down = True
        self.poke()

    def _reported(self, observed_ready: bool) -> bool:
        """The readiness to report for this observation."""
        if observed_ready:
            self.failures = 0
            self._down = False
            return True
        self.failures += 1
        # Still within the hysteresis window: keep reporting READY.
        return self.ready is True and not self._down and self.failures < self.failures_to_not_ready

    async def poll_once(self) -> bool:
        """One query; report it if readiness changed. Returns the reported readiness."""
        try:
            state = await self.query()
        except Exception as err:
            log.warning("IMEX state query failed: %s", err)
            state = UNAVAILABLE
        self.state = state
        ready = self._reported(is_ready(state))
        if ready != self.ready:
            try:
                await self.on_change(ready, state)
            except Exception:
                log.exception("Reporting IMEX readiness %s (%s) failed; will retry", ready, state)
                if self.on_poll is not None:
                    self.on_poll(bool(self.ready), state)
                return ready
            log.info("IMEX daemon is %s (%s)", "ready" if ready else "not ready", state)
            self.ready = ready
        elif not ready or self.failures:
            vlog(log, 4, "IMEX state %s (%d consecutive not READY)", state, self.failures)
        if self.on_poll is not None:
            self.on_poll(ready, state)
        return ready

    async def run(self) -> None:
        """Poll every `interval` until cancelled."""
        fast = 0  # fast polls made since READY was last seen
        while True:
            ready = await self.poll_once()
            self._wake.clear()
            wait = self.interval
            if ready:
                fast = 0  # a later outage is noticed fast again
            elif self.first_interval is not None and fast < FAST_POLLS:
                wait, fast = min(self.first_interval, self.interval), fast + 1
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that races
                # the event being set, and this loop would never stop.
                async with asyncio.timeout(wait):
                    await self._wake.wait()


def check_main(ctl: str, config_path: str, *, timeout: float = 5.0) -> int:
    """`daemon check`: 0 only if the daemon says exactly READY, else print the state and 1."""
    return asyncio.run(check(ctl, config_path, timeout=timeout))


async def check(
    ctl: str,
    config_path: str,
    *,
    timeout: float = 5.0,
    runner: CtlRunner | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`check_main` on a running loop, printing to `out`/`err` (default stdout/stderr)."""
    out, err = out or sys.stdout, err or sys.stderr
    if not Path(config_path).is_file():
        # "Error: " as the reference's CLI prints it: its probe Events start so.
        print(f"Error: IMEX daemon check failed: config file {config_path} does not exist",
              file=out)
        return 1
    state, detail = await probe(ctl, config_path, timeout=timeout, runner=runner)
    if state == READY:
        return 0
    print(f"Error: IMEX daemon not ready: {state}", file=out)
    if detail:
        print(detail, file=err)
    return 1
