"""SPDY/3.1 framing and the server side of a connection, as the kubelet's streaming client
speaks it (github.com/moby/spdystream, which k8s.io/streaming's spdy package wraps).

Wire format (https://www.chromium.org/spdy/spdy-protocol/spdy-protocol-draft3-1/): an
8-byte header, then the payload. A control frame's header is the version (3) with the top
bit set, the type, the flags and a 24-bit length; a data frame's is the 31-bit stream id,
the flags and the length. Name/value header blocks are zlib-compressed with the SPDY/3
dictionary (`make k8s` writes it, sim/cri/protos.py), one compression context per
direction for the whole connection, each block ending in a sync flush.

Flow control is not implemented, deliberately: spdystream neither sends WINDOW_UPDATE nor
honours the peer's windows, so a sender that waited for its window would stall after
64 KiB. Back pressure is TCP's instead: a stream's reader that falls behind stops this
connection reading frames, as spdystream's unbuffered per-stream channel does.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

VERSION = 3
FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02  # SYN_STREAM: the sender will not receive on the stream

SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS = 1, 2, 3, 4
PING, GOAWAY, HEADERS, WINDOW_UPDATE = 6, 7, 8, 9

# RST_STREAM status codes.
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, CANCEL = 1, 2, 3, 5
# GOAWAY status codes.
GOAWAY_OK, GOAWAY_PROTOCOL_ERROR = 0, 1

MAX_LENGTH = 0xFFFFFF  # a frame's 24-bit length
MAX_HEADER_BLOCK = 1 << 20  # a decompressed header block larger than this is refused
STREAM_ID = 0x7FFFFFFF
DATA_CHUNK = 32 << 10  # bytes per DATA frame this side writes


class SpdyError(Exception):
    """A frame that breaks the protocol: the connection cannot go on."""


Headers = dict[str, list[str]]


@dataclass(frozen=True)
class Data:
    stream_id: int
    data: bytes = b""
    flags: int = 0


@dataclass(frozen=True)
class SynStream:
    stream_id: int
    headers: Headers
    associated_to: int = 0
    priority: int = 0
    flags: int = 0


@dataclass(frozen=True)
class SynReply:
    stream_id: int
    headers: Headers = field(default_factory=dict)
    flags: int = 0


@dataclass(frozen=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True)
class Settings:
    entries: tuple[tuple[int, int, int], ...] = ()  # (flags, id, value)
    flags: int = 0


@dataclass(frozen=True)
class Ping:
    id: int


@dataclass(frozen=True)
class GoAway:
    last_good_stream_id: int
    status: int = GOAWAY_OK


@dataclass(frozen=True)
class HeadersFrame:
    stream_id: int
    headers: Headers
    flags: int = 0


@dataclass(frozen=True)
class WindowUpdate:
    stream_id: int
    delta: int


@dataclass(frozen=True)
class Unknown:
    """A control frame of a type SPDY/3.1 drops on receipt (NOOP, CREDENTIAL, newer)."""

    type: int


Frame = (Data | SynStream | SynReply | RstStream | Settings | Ping | GoAway | HeadersFrame
         | WindowUpdate | Unknown)


class HeaderCodec:
    """The name/value header blocks of one connection: one zlib stream each way, so blocks
    must be packed and unpacked in the order their frames go on the wire."""

    def __init__(self, dictionary: bytes) -> None:
        self._deflate = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zdict=dictionary)
        self._inflate = zlib.decompressobj(zdict=dictionary)

    def pack(self, headers: Mapping[str, Sequence[str]]) -> bytes:
        """Names lowercased (SPDY requires it); several values joined by NUL."""
        raw = [struct.pack(">I", len(headers))]
        for name, values in headers.items():
            key, value = name.lower().encode(), "\0".join(values).encode()
            raw += [struct.pack(">I", len(key)), key, struct.pack(">I", len(value)), value]
        block = b"".join(raw)
        return self._deflate.compress(block) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    def unpack(self, block: bytes) -> Headers:
        try:
            raw = self._inflate.decompress(block, MAX_HEADER_BLOCK)
        except zlib.error as err:
            raise SpdyError(f"header block: {err}") from None
        if self._inflate.unconsumed_tail:
            raise SpdyError(f"header block over {MAX_HEADER_BLOCK} bytes")
        headers: Headers = {}
        try:
            (count,), pos = struct.unpack_from(">I", raw), 4
            for _ in range(count):
                (size,) = struct.unpack_from(">I", raw, pos)
                name = raw[pos + 4:pos + 4 + size].decode().lower()
                pos += 4 + size
                (size,) = struct.unpack_from(">I", raw, pos)
                value = raw[pos + 4:pos + 4 + size].decode()
                pos += 4 + size
                if pos > len(raw):
                    raise SpdyError("header block truncated")
                headers.setdefault(name, []).extend(value.split("\0"))
        except (struct.error, UnicodeDecodeError) as err:
            raise SpdyError(f"header block: {err}") from None
        return headers


def _control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, flags << 24 | len(payload)) + payload


def encode(frame: Frame, codec: HeaderCodec) -> bytes:
    """The wire bytes of `frame` (header blocks through `codec`, so in wire order)."""
    match frame:
        case Data(stream_id, data, flags):
            return struct.pack(">II", stream_id & STREAM_ID, flags << 24 | len(data)) + data
        case SynStream(stream_id, headers, associated_to, priority, flags):
            payload = struct.pack(">IIBB", stream_id, associated_to, priority << 5, 0)
            return _control(SYN_STREAM, flags, payload + codec.pack(headers))
        case SynReply(stream_id, headers, flags):
            return _control(SYN_REPLY, flags, struct.pack(">I", stream_id) + codec.pack(headers))
        case RstStream(stream_id, status):
            return _control(RST_STREAM, 0, struct.pack(">II", stream_id, status))
        case Settings(entries, flags):
            body = b"".join(struct.pack(">II", f << 24 | i, v) for f, i, v in entries)
            return _control(SETTINGS, flags, struct.pack(">I", len(entries)) + body)
        case Ping(ping_id):
            return _control(PING, 0, struct.pack(">I", ping_id))
        case GoAway(last, status):
            return _control(GOAWAY, 0, struct.pack(">II", last, status))
        case HeadersFrame(stream_id, headers, flags):
            return _control(HEADERS, flags, struct.pack(">I", stream_id) + codec.pack(headers))
        case WindowUpdate(stream_id, delta):
            return _control(WINDOW_UPDATE, 0, struct.pack(">II", stream_id, delta))
    raise ValueError(f"cannot encode {frame!r}")


def decode(head: bytes, payload: bytes, codec: HeaderCodec) -> Frame:
    """The frame of an 8-byte `head` and its `payload` (unpacking any header block)."""
    first, second = struct.unpack(">II", head)
    flags = second >> 24
    if not first & 0x80000000:
        return Data(first & STREAM_ID, payload, flags)
    version, kind = first >> 16 & 0x7FFF, first & 0xFFFF
    if version != VERSION:
        raise SpdyError(f"SPDY version {version}, not {VERSION}")
    try:
        match kind:
            case 1:  # SYN_STREAM
                sid, assoc, prio, _slot = struct.unpack_from(">IIBB", payload)
                return SynStream(sid & STREAM_ID, codec.unpack(payload[10:]), assoc & STREAM_ID,
                                 prio >> 5, flags)
            case 2:  # SYN_REPLY
                (sid,) = struct.unpack_from(">I", payload)
                return SynReply(sid & STREAM_ID, codec.unpack(payload[4:]), flags)
            case 3:  # RST_STREAM
                sid, status = struct.unpack(">II", payload)
                return RstStream(sid & STREAM_ID, status)
            case 4:  # SETTINGS
                (count,) = struct.unpack_from(">I", payload)
                pairs = [struct.unpack_from(">II", payload, 4 + 8 * n) for n in range(count)]
                return Settings(tuple((a >> 24, a & 0xFFFFFF, v) for a, v in pairs), flags)
            case 6:  # PING
                return Ping(struct.unpack(">I", payload)[0])
            case 7:  # GOAWAY
                last, status = struct.unpack(">II", payload)
                return GoAway(last & STREAM_ID, status)
            case 8:  # HEADERS
                (sid,) = struct.unpack_from(">I", payload)
                return HeadersFrame(sid & STREAM_ID, codec.unpack(payload[4:]), flags)
            case 9:  # WINDOW_UPDATE
                sid, delta = struct.unpack(">II", payload)
                return WindowUpdate(sid & STREAM_ID, delta & STREAM_ID)
    except struct.error as err:
        raise SpdyError(f"control frame {kind}: {err}") from None
    return Unknown(kind)


async def read_frame(reader: asyncio.StreamReader, codec: HeaderCodec) -> Frame | None:
    """The next frame, or None at a clean end of the connection."""
    try:
        head = await reader.readexactly(8)
    except asyncio.IncompleteReadError as err:
        if err.partial:
            raise SpdyError("connection ended inside a frame header") from None
        return None
    length = struct.unpack_from(">I", head, 4)[0] & MAX_LENGTH
    try:
        payload = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise SpdyError("connection ended inside a frame") from None
    return decode(head, payload, codec)


class Stream:
    """One stream the peer opened: its headers, what it sends (`read`), and this side's
    half (`write`, `close` sends FIN, `reset` sends RST_STREAM)."""

    def __init__(self, conn: Connection, stream_id: int, headers: Headers,
                 *, remote_fin: bool, local_fin: bool) -> None:
        self.conn = conn
        self.id = stream_id
        self.headers = headers
        self._inbox: asyncio.Queue[bytes] = asyncio.Queue(maxsize=16)
        self.remote_closed = False
        self.local_closed = local_fin
        self.discarding = False
        if remote_fin:
            self._remote_end()

    def header(self, name: str) -> str:
        return next(iter(self.headers.get(name.lower(), ())), "")

    def discard(self) -> None:
        """Drop whatever the peer sends on this stream (nobody reads it)."""
        self.discarding = True
        while not self._inbox.empty():
            self._inbox.get_nowait()

    async def _deliver(self, data: bytes) -> None:
        if data and not self.remote_closed and not self.discarding:
            await self._inbox.put(data)

    def _remote_end(self) -> None:
        """No more data from the peer: a waiting reader wakes to b"" (a full inbox has no
        waiting reader, and `read` sees the end once it is drained)."""
        if not self.remote_closed:
            self.remote_closed = True
            if not self._inbox.full():
                self._inbox.put_nowait(b"")

    async def read(self) -> bytes:
        """The next bytes the peer sent; b"" once it finished (FIN, reset, gone)."""
        if self.remote_closed and self._inbox.empty():
            return b""
        return await self._inbox.get()

    async def reply(self) -> None:
        await self.conn.send(SynReply(self.id))

    async def write(self, data: bytes) -> None:
        for start in range(0, len(data), DATA_CHUNK):
            if self.local_closed:
                return
            await self.conn.send(Data(self.id, data[start:start + DATA_CHUNK]))

    async def close(self) -> None:
        if not self.local_closed:
            self.local_closed = True
            await self.conn.send(Data(self.id, flags=FLAG_FIN))

    async def reset(self, status: int = CANCEL) -> None:
        if self.conn.streams.pop(self.id, None) is not None:
            self.local_closed = True
            self._remote_end()
            await self.conn.send(RstStream(self.id, status))


class Writer(Protocol):
    """What a connection writes with: an asyncio StreamWriter, or the simulated kubelet's
    adapter over the socket aiohttp accepted (sim/cluster/kubeletspdy.py)."""

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def is_closing(self) -> bool: ...
    def close(self) -> None: ...
    async def wait_closed(self) -> None: ...


class Connection:
    """The server side of one SPDY/3.1 connection: `serve()` reads frames until the peer
    goes, `accept()` gives each stream the peer opens (the caller replies or resets)."""

    def __init__(self, reader: asyncio.StreamReader, writer: Writer, dictionary: bytes) -> None:
        self.reader = reader
        self.writer = writer
        self._codec = HeaderCodec(dictionary)
        self._out = HeaderCodec(dictionary)
        self.streams: dict[int, Stream] = {}
        self._new: asyncio.Queue[Stream | None] = asyncio.Queue()
        self._last_id = 0
        self.closed = asyncio.Event()  # the peer went (EOF, error, or this side closed)
        self.gone_away = False

    async def send(self, frame: Frame) -> None:
        """Write `frame` (encoded and written in one step: header blocks stay in order)."""
        if self.writer.is_closing():
            return
        self.writer.write(encode(frame, self._out))
        with contextlib.suppress(ConnectionError):
            await self.writer.drain()

    async def accept(self) -> Stream | None:
        """The next stream the peer opened; None once it cannot open any more."""
        return await self._new.get()

    async def serve(self) -> None:
        try:
            while (frame := await read_frame(self.reader, self._codec)) is not None:
                await self._on(frame)
        except SpdyError:
            await self.send(GoAway(self._last_id, GOAWAY_PROTOCOL_ERROR))
        except ConnectionError:
            pass
        finally:
            self._gone()

    def _gone(self) -> None:
        for stream in self.streams.values():
            stream._remote_end()
        self._new.put_nowait(None)
        self.closed.set()

    async def _on(self, frame: Frame) -> None:
        match frame:
            case SynStream(sid, headers, flags=flags):
                if sid <= self._last_id or sid % 2 == 0 or self.gone_away:
                    await self.send(RstStream(sid, PROTOCOL_ERROR))
                    return
                self._last_id = sid
                opened = Stream(self, sid, headers, remote_fin=bool(flags & FLAG_FIN),
                                local_fin=bool(flags & FLAG_UNIDIRECTIONAL))
                self.streams[sid] = opened
                self._new.put_nowait(opened)
            case Data(sid, data, flags):
                stream = self.streams.get(sid)
                if stream is None:
                    return  # already gone (reset): dropped, as spdystream does
                await stream._deliver(data)
                if flags & FLAG_FIN:
                    stream._remote_end()
            case RstStream(sid):
                stream = self.streams.pop(sid, None)
                if stream is not None:
                    stream.local_closed = True
                    stream._remote_end()
            case Ping(ping_id) if ping_id % 2 == 1:  # the peer's (a server's are even)
                await self.send(frame)
            case GoAway():
                self.gone_away = True
                self._new.put_nowait(None)
            case HeadersFrame(sid, headers):
                stream = self.streams.get(sid)
                if stream is not None:
                    for name, values in headers.items():
                        stream.headers.setdefault(name, []).extend(values)
            # SETTINGS, WINDOW_UPDATE (module doc), SYN_REPLY (this side opens no streams),
            # unknown control frames: nothing to do.

    async def close(self, linger: float = 5.0) -> None:
        """GOAWAY, then wait (up to `linger` s) for the peer to hang up before closing the
        socket: closing with the peer's frames unread would reset the connection and could
        lose the last frames sent."""
        if not self.writer.is_closing():
            await self.send(GoAway(self._last_id))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(linger):
                    await self.closed.wait()
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()
