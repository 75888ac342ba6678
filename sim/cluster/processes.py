"""The driver's own programs as real child processes of the simulated cluster.

The node agents and the controller run as `compute-domain-agent plugin` and
`compute-domain-controller` processes, exactly as they would under a DaemonSet or a
Deployment, so a test can SIGKILL one mid-flight and start it again on the same state.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)


def free_port(address: str) -> int:
    """A TCP port nobody listens on at `address` right now."""
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


_PR_SET_PDEATHSIG = 1


def _parent_death_signal() -> None:
    """In the child before exec: SIGTERM once the parent is gone (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class ManagedProcess:
    """One program: started, stopped gracefully or killed, restarted with the same argv."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        *,
        die_with_parent: bool = False,
    ) -> None:
        """`die_with_parent`: the kernel sends the program SIGTERM when this process dies
        (PR_SET_PDEATHSIG), so a crashed test run leaves no API server behind."""
        self.name = name
        self.die_with_parent = die_with_parent
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.env = dict(os.environ if env is None else env)
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"--- start {self.starts + 1}: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                preexec_fn=_parent_death_signal if self.die_with_parent else None,
            )
        self.starts += 1
        log.debug("%s started (pid %s)", self.name, self.proc.pid)

    async def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; the exit status (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            self._signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(timeout):
                    await self.proc.wait()
            except TimeoutError:
                log.warning("%s ignored SIGTERM for %.0fs; killing it", self.name, timeout)
                self._signal(signal.SIGKILL)
                await self.proc.wait()
        return self.proc.returncode

    async def kill(self) -> None:
        """SIGKILL without warning: what a node crash or `kill -9` does."""
        if self.proc is not None and self.proc.returncode is None:
            self._signal(signal.SIGKILL)
            await self.proc.wait()

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    def _signal(self, sig: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""
