"""Messages between the sim's main process and its node worker processes, on asyncio.

A `multiprocessing` Pipe end is a blocking object; `Link` puts it on the event loop
instead (`add_reader` on its file descriptor), so neither side spends a thread per worker
waiting for the other. Messages are small picklable tuples `(kind, payload)`; what they
mean is the business of `nodeworker` (the worker) and `nodeworkers` (the main process).
"""

from __future__ import annotations

import asyncio
import contextlib
from multiprocessing.connection import Connection
from typing import Any

Message = tuple[str, Any]


class LinkClosedError(Exception):
    """The other end went away (it exited, or closed its end)."""


class Link:
    """One end of a Pipe, read on the running loop: `recv()` awaits the next message,
    `send()` writes one (small messages: the pipe buffer takes them without blocking)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._inbox: asyncio.Queue[Message | None] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def open(self) -> None:
        """Start reading on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.conn.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            while self.conn.poll():
                self._inbox.put_nowait(self.conn.recv())
        except (EOFError, OSError):
            self._drop()

    def _drop(self) -> None:
        if self._loop is not None and not self.closed:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.conn.fileno())
        self.closed = True
        self._inbox.put_nowait(None)

    async def recv(self) -> Message:
        if self.closed and self._inbox.empty():
            raise LinkClosedError()
        message = await self._inbox.get()
        if message is None:
            self._inbox.put_nowait(None)  # every later recv sees the close too
            raise LinkClosedError()
        return message

    def send(self, kind: str, payload: Any = None) -> None:
        if self.closed:
            raise LinkClosedError()
        try:
            self.conn.send((kind, payload))
        except (BrokenPipeError, EOFError, OSError):
            self._drop()
            raise LinkClosedError() from None

    def close(self) -> None:
        if not self.closed:
            self._drop()
        with contextlib.suppress(OSError):
            self.conn.close()
