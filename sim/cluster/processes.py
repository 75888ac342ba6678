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
import random
import signal
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)


# Ports the driver's pods listen on at their node's address (the chart's health, metrics and
# controller ports, IMEX's server and command ports): the sim's own listeners keep off them.
DRIVER_PORTS: Final = frozenset({8080, 8081, 50000, 50005, 51515})


def _outside_ephemeral() -> range:
    """The ports the kernel never hands out by itself (above ip_local_port_range, else below
    it): a port the kernel chose (a port-0 bind, like the one this used to do) can be any of
    the ephemeral range, 51515 included, and a node's kubelet that took the agent's health
    port made that node's agent exit at start."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    above = range(high + 1, 65536)
    return above if len(above) >= 1024 else range(max(1024, low - 8192), low)


def free_port(address: str, rng: random.Random | None = None) -> int:
    """A TCP port nobody listens on at `address` right now, outside the kernel's ephemeral
    range and apart from DRIVER_PORTS, so no later listener of the driver nor outgoing
    connection can find it taken by the sim."""
    r = rng or random.SystemRandom()
    ports = _outside_ephemeral()
    for _ in range(64 if ports else 0):
        port = r.choice(ports)
        if port in DRIVER_PORTS:
            continue
        with socket.socket() as s:
            try:
                s.bind((address, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a machine whose ephemeral range is every port
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
