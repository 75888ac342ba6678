"""Leftover `nvidia-imex` daemons of an earlier run that still hold our ports
(https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/654): found by name and
listening port together, and ended before a new one starts (process.py, detached.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

def _is_named(proc: psutil.Process, binary_name: str) -> bool:
    """Whether the process is `binary_name`: by name, executable or argv[0]."""
    try:
        if proc.name() == binary_name:
            return True
        cmdline = proc.cmdline()
        if cmdline and Path(cmdline[0]).name == binary_name:
            return True
        exe = proc.exe()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return bool(exe) and Path(exe).name == binary_name


_WILDCARDS = frozenset({"0.0.0.0", "::"})


def _listens_on(proc: psutil.Process, ports: set[int], addresses: frozenset[str] | None) -> bool:
    """Listening on one of `ports`, at one of `addresses` (or a wildcard) when given: pods
    sharing one network namespace (hostNetwork, the simulated cluster) each own their IP."""
    try:
        conns = proc.net_connections(kind="inet")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return any(
        c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports
        and (addresses is None or c.laddr.ip in addresses or c.laddr.ip in _WILDCARDS)
        for c in conns)


def find_stray(
    binary_name: str = "nvidia-imex",
    *,
    ports: Iterable[int],
    exclude: Iterable[int] = (),
    addresses: Iterable[str] | None = None,
) -> list[psutil.Process]:
    """Processes named `binary_name` that listen on one of `ports` (never ourselves).

    Both conditions must hold: a name alone could be another container's IMEX in a shared
    PID namespace, a port alone could be anything.
    """
    wanted = set(ports)
    only = frozenset(addresses) if addresses is not None else None
    skip = {os.getpid(), *exclude}
    found = []
    for proc in psutil.process_iter():
        if proc.pid in skip or not _is_named(proc, binary_name):
            continue
        if _listens_on(proc, wanted, only):
            found.append(proc)
    return found


async def kill_stray(
    binary_name: str = "nvidia-imex",
    *,
    ports: Iterable[int],
    grace: float = 5.0,
    exclude: Iterable[int] = (),
    addresses: Iterable[str] | None = None,
) -> list[int]:
    """End strays found by `find_stray`: SIGTERM, SIGKILL after `grace`; returns their pids."""
    strays = find_stray(binary_name, ports=ports, exclude=exclude, addresses=addresses)
    if not strays:
        return []
    for proc in strays:
        log.warning("Terminating stray %s pid %d holding our ports", binary_name, proc.pid)
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = await asyncio.to_thread(psutil.wait_procs, strays, timeout=grace)
    for proc in alive:
        log.warning("Stray pid %d ignored SIGTERM for %.1fs: sending SIGKILL", proc.pid, grace)
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    if alive:
        await asyncio.to_thread(psutil.wait_procs, alive, timeout=grace)
    return [p.pid for p in strays]
