"""Serialises claim steps on a node: one in-process lock plus an flock on `pu.lock`.

The file lock keeps two agent processes (a rolling update, a systemd unit next to a pod)
from preparing at once. It is taken per claim step and released between retries, so a
workload Prepare that waits for its daemon never holds it while waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

from agent.plugin.claim_errors import RetryableError


class NodeLock:
    def __init__(self, path: Path, *, timeout: float = 10.0, poll: float = 0.05) -> None:
        self._path = path
        self._timeout = timeout
        self._poll = poll
        self._local = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        async with self._local:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + self._timeout
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if loop.time() >= deadline:
                            raise RetryableError(
                                f"error acquiring prep/unprep lock {self._path}: held by "
                                "another process for more than "
                                f"{self._timeout:.0f}s") from None
                        await asyncio.sleep(self._poll)
                try:
                    yield
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
