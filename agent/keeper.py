"""`compute-domain-agent keep plugin [FLAGS]`: the kubelet plugin container's first process
in agent placement.

When the node agent supervises nvidia-imex itself, its children must outlive the agent
(agent/daemon/detached.py). In a container the first process is special: when it exits,
the runtime kills every other process of the container. So the agent does not run as
that process; the keeper does. It runs the agent as its child, restarts it when it exits
(after a backoff that grows while the agent keeps failing quickly), and, as a child
subreaper (PR_SET_CHILD_SUBREAPER), becomes the parent of the nvidia-imex children a dead
agent leaves behind and reaps them when they exit. SIGTERM, SIGINT and SIGHUP go on to
the agent; once the agent has exited after one, the keeper exits with its status. The
keeper imports nothing of the driver and does nothing else, so there is little in it that
can fail. Under systemd the unit's `KillMode=process` does the same job (systemd reaps).

A restart of the container itself (a failed liveness probe, a new pod on upgrade) still
ends nvidia-imex on this node: the keeper survives only the agent's own exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass
class Backoff:
    """The delay before the next start: `initial` after a run shorter than
    `stable_after`, doubling with each further quick exit up to `maximum`; a run that
    lasted `stable_after` starts again at once."""

    initial: float = 1.0
    maximum: float = 30.0
    stable_after: float = 10.0
    failures: int = field(default=0, init=False)

    def next(self, ran: float) -> float:
        if ran >= self.stable_after:
            self.failures = 0
            return 0.0
        self.failures = min(self.failures + 1, 62)  # keep 2**n a sane float
        return float(min(self.maximum, self.initial * 2.0 ** (self.failures - 1)))


def own_command() -> list[str]:
    """How to run this program again: the single-file binary, or the script started."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, sys.argv[0]] if sys.argv[0].endswith(".py") else [sys.argv[0]]


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        log.warning("keeper: cannot become a child subreaper (%s): a dead agent's "
                    "nvidia-imex is reaped by the container's init instead", os.strerror(err))


class Keeper:
    def __init__(self, command: Sequence[str], backoff: Backoff) -> None:
        self.command = list(command)
        self.backoff = backoff
        self.agent: int | None = None
        self.stopping: int | None = None  # the signal that asked us to stop
        self.starts = 0

    def _on_signal(self, sig: int, _frame: object) -> None:
        self.stopping = sig
        if self.agent is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.agent, sig)

    def _spawn(self) -> float:
        self.agent = os.posix_spawn(self.command[0], self.command, os.environ)
        self.starts += 1
        log.info("keeper: agent started, pid %d (start %d)", self.agent, self.starts)
        return time.monotonic()

    def _wait_agent(self) -> int:
        """Reap children until the agent exits; its wait status."""
        while True:
            pid, status = os.wait()
            if pid == self.agent:
                self.agent = None
                return status
            log.info("keeper: reaped pid %d (%s)", pid, _describe(status))

    def _pause(self, delay: float) -> None:
        """Sleep `delay`, reaping orphans meanwhile; cut short by a stop signal."""
        end = time.monotonic() + delay
        while self.stopping is None and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.2))
            try:
                while (pid := os.waitpid(-1, os.WNOHANG)[0]) > 0:
                    log.info("keeper: reaped pid %d", pid)
            except ChildProcessError:
                pass

    def run(self) -> int:
        for sig in _FORWARDED:
            signal.signal(sig, self._on_signal)
        _become_subreaper()
        while True:
            started = self._spawn()
            status = self._wait_agent()
            code = os.waitstatus_to_exitcode(status)
            if self.stopping is not None:
                log.info("keeper: agent exited (%s) after signal %d: exiting",
                         _describe(status), self.stopping)
                return code if code >= 0 else 0
            delay = self.backoff.next(time.monotonic() - started)
            log.warning("keeper: agent exited (%s); starting it again in %.1fs",
                        _describe(status), delay)
            self._pause(delay)
            if self._stop_requested():
                return 0

    def _stop_requested(self) -> bool:
        """Set by a signal handler at any time (a method, so no check is cached)."""
        return self.stopping is not None


def _describe(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


def run_keeper(args: Sequence[str], backoff: Backoff) -> int:
    """Keep `compute-domain-agent <args>` running (see the module doc)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    return Keeper([*own_command(), *args], backoff).run()
