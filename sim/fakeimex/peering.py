"""Peer connections of one fake daemon: outgoing links with reconnect, incoming sessions.

Each daemon dials every other resolvable entry (a `Link` per peer) and answers the peers that
dial it, so both ends learn each other's state, as IMEX's From/To matrix shows. A peer that
answers with another node map or version is `!M!` / `!V!` and not counted as connected; a
lost connection is RECOVERING until IMEX_NODE_DISCONNECTED_GRACE_TIME expires (never, with
the default -1; at once, with 0), then DISCONNECTED.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from sim.fakeimex.domain import Link
from sim.fakeimex.logs import ImexLog
from sim.fakeimex.protocol import BYE, HEARTBEAT, HELLO, MAX_LINE, ProtocolError, decode, encode
from sim.fakeimex.states import DaemonState, LinkStatus

NETWORK_ERRORS = (OSError, TimeoutError, ProtocolError, ValueError, asyncio.IncompleteReadError)

Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


async def read_line(reader: asyncio.StreamReader, timeout: float) -> bytes:
    """`readline` with a deadline; `asyncio.timeout`, not `wait_for`, whose 3.11 version can
    swallow a cancellation that races with the read (a hung SIGUSR1 restart, seen in tests)."""
    async with asyncio.timeout(timeout):
        return await reader.readline()


@dataclass(frozen=True)
class Identity:
    """Who we are to peers; fixed for the life of the process, as IMEX's node ID is."""

    index: int
    host: str
    ip: str
    version: str
    digest: str
    instance: str


class Peering:
    """All peer traffic of one daemon; `changed` is called whenever a link's view changes."""

    def __init__(
        self,
        me: Identity,
        links: dict[int, Link],
        *,
        heartbeat: float,
        grace: int,
        log: ImexLog,
        state: Callable[[], DaemonState],
        spawn: Spawn,
        changed: Callable[[], None],
    ) -> None:
        self.me = me
        self.links = links
        self.heartbeat = heartbeat
        self.grace = grace
        self.log = log
        self.state = state
        self.spawn = spawn
        self.changed = changed
        self.conns: set[asyncio.StreamWriter] = set()
        self.stopping = False

    @property
    def timeout(self) -> float:
        """A peer silent for three heartbeats is gone."""
        return 3 * self.heartbeat

    def start(self) -> None:
        dialable = [ln for ln in self.links.values() if ln.status is not LinkStatus.INVALID]
        self.log.info(f"Creating connections to all peers (nPeers = {len(dialable)}).")
        for link in dialable:
            self.dial(link)

    def dial(self, link: Link) -> None:
        link.task = self.spawn(self._keep_connected(link))

    async def hang_up(self, link: Link) -> None:
        """Stop a link's connection (SIGUSR1 restarts all outgoing connections)."""
        task, link.task = link.task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=2 * self.timeout)

    def close(self) -> None:
        """Say goodbye on every connection and close them (shutdown)."""
        self.stopping = True
        for writer in list(self.conns):
            with contextlib.suppress(Exception):
                writer.write(encode({"t": BYE}))
            writer.close()

    def hello(self) -> dict[str, Any]:
        me = self.me
        return {
            "t": HELLO,
            "id": me.index,
            "host": me.host,
            "ip": me.ip,
            "version": me.version,
            "map": me.digest,
            "instance": me.instance,
            "state": self.state().value,
        }

    def heartbeat_message(self) -> dict[str, Any]:
        links = {str(k): ln.status.value for k, ln in self.links.items()}
        links[str(self.me.index)] = LinkStatus.CONNECTED.value
        return {"t": HEARTBEAT, "state": self.state().value, "links": links}

    def _mismatch(self, hello: dict[str, Any], expected_id: int | None) -> LinkStatus | None:
        if hello.get("map") != self.me.digest:
            return LinkStatus.NODE_MAP_MISMATCH
        if hello.get("version") != self.me.version:
            return LinkStatus.VERSION_MISMATCH
        if expected_id is not None and hello.get("id") != expected_id:
            return LinkStatus.NODE_MAP_MISMATCH
        return None

    async def _send_heartbeats(self, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while True:
                writer.write(encode(self.heartbeat_message()))
                await writer.drain()
                await asyncio.sleep(self.heartbeat)

    # --- outgoing ------------------------------------------------------------------------

    async def _keep_connected(self, link: Link) -> None:
        """One outgoing connection to a peer, retried every heartbeat interval."""
        assert link.address is not None
        me = asyncio.current_task()
        while not self.stopping and link.task is me:
            try:
                async with asyncio.timeout(max(1.0, self.timeout)):
                    reader, writer = await asyncio.open_connection(
                        link.address, link.port, limit=MAX_LINE
                    )
            except (OSError, TimeoutError):
                pass  # N, R, D or a mismatch: whatever the link was, it stays
            else:
                self.conns.add(writer)
                try:
                    await self._talk(link, reader, writer)
                except NETWORK_ERRORS:
                    pass
                finally:
                    self.conns.discard(writer)
                    writer.close()
                    if link.status is LinkStatus.CONNECTED:
                        self._lost(link)
            await asyncio.sleep(self.heartbeat)

    async def _talk(
        self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        writer.write(encode(self.hello()))
        await writer.drain()
        hello = decode(await read_line(reader, self.timeout))
        if hello.get("t") != HELLO:
            raise ProtocolError(f"expected hello from node {link.index}")
        mismatch = self._mismatch(hello, link.index)
        if mismatch is not None:
            if link.status is not mismatch:
                self.log.warning(
                    f"Node {link.index} ({link.address}): {mismatch.value}, communication "
                    f"disabled (peer says ID {hello.get('id')}, version {hello.get('version')})"
                )
                link.status = mismatch
                self.changed()
            return
        link.status = LinkStatus.CONNECTED
        link.connected_count += 1
        link.lost_at = None
        link.peer_state = str(hello.get("state"))
        link.peer_version = str(hello.get("version"))
        self.log.info(
            f"Connection established to node {link.index} with ip address {link.address}. "
            f"Number of times connected: {link.connected_count}"
        )
        self.changed()
        sender = self.spawn(self._send_heartbeats(writer))
        try:
            while True:
                line = await read_line(reader, self.timeout)
                if not line:
                    return
                message = decode(line)
                if message.get("t") == BYE:
                    self.log.info(f"Node {link.index} is shutting down")
                    return
                if message.get("t") == HEARTBEAT:
                    state, links = str(message.get("state")), dict(message.get("links") or {})
                    if (state, links) != (link.peer_state, link.peer_links):
                        link.peer_state, link.peer_links = state, links
                        self.changed()
        finally:
            sender.cancel()

    def _lost(self, link: Link) -> None:
        if self.stopping:
            return
        link.status = LinkStatus.DISCONNECTED if self.grace == 0 else LinkStatus.RECOVERING
        link.lost_at = time.monotonic()
        link.peer_state, link.peer_links = None, {}
        self.log.warning(f"Connection to node {link.index} with ip address {link.address} lost")
        if self.grace > 0:
            self.spawn(self._expire(link, link.lost_at))
        self.changed()

    async def _expire(self, link: Link, lost_at: float) -> None:
        await asyncio.sleep(self.grace)
        if link.status is LinkStatus.RECOVERING and link.lost_at == lost_at:
            link.status = LinkStatus.DISCONNECTED
            self.log.info(f"Node {link.index}: disconnected grace time expired, cleaning up")
            self.changed()

    # --- incoming ------------------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A peer dialled us: answer its hello, exchange heartbeats until either side leaves.

        Never ends cancelled: Python 3.11's stream server logs a traceback for that.
        """
        self.conns.add(writer)
        try:
            hello = decode(await read_line(reader, self.timeout))
            if hello.get("t") != HELLO:
                return
            writer.write(encode(self.hello()))
            await writer.drain()
            if self._mismatch(hello, None) is not None:
                return
            sender = self.spawn(self._send_heartbeats(writer))
            try:
                while True:
                    line = await read_line(reader, self.timeout)
                    if not line or decode(line).get("t") == BYE:
                        return
            finally:
                sender.cancel()
        except (*NETWORK_ERRORS, asyncio.CancelledError):
            pass
        finally:
            self.conns.discard(writer)
            writer.close()
