"""The CRI streaming server (sim/cri/streaming.py, sim/cri/spdy.py): what `kubectl exec`,
`attach` and `port-forward` reach through the kubelet.

The unit tests speak SPDY/3.1 to a real server over a real socket with a client written
here from the wire format (struct and zlib, not the module's own framing), the way the
kubelet's client (github.com/moby/spdystream under k8s.io/streaming) does: HTTP upgrade,
one stream per channel, FIN at the end. The real path (kubectl -> kube-apiserver ->
the upstream kubelet -> this server) is tested in tests/sim/test_upstream_kubelet.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from eventually import eventually_async

from sim.controlplane.binaries import ComponentsMissingError
from sim.cri import spdy
from sim.cri.protos import load_dictionary
from sim.cri.streaming import (
    AttachSession,
    ExecSession,
    PortForwardSession,
    StreamingServer,
    follow_log,
)

V4 = "v4.channel.k8s.io"


@pytest.fixture(scope="module")
def dictionary() -> bytes:
    try:
        return load_dictionary()
    except ComponentsMissingError as err:
        pytest.fail(str(err))


# --- framing ---------------------------------------------------------------------------


def test_header_blocks_share_one_zlib_stream_with_the_spdy_dictionary(dictionary: bytes) -> None:
    out, back = spdy.HeaderCodec(dictionary), spdy.HeaderCodec(dictionary)
    blocks = [{"streamType": ["stdout"]}, {"port": ["8080"], "requestid": ["0"]},
              {"x-many": ["a", "b"]}, {}]
    wire = [out.pack(h) for h in blocks]
    # The first block is a zlib stream that asks for the dictionary (FDICT) by its Adler-32,
    # and every block ends with a sync flush (empty stored block), so a reader can stop there.
    assert wire[0][1] & 0x20 and wire[0][2:6] == struct.pack(">I", zlib.adler32(dictionary))
    assert all(b.endswith(b"\x00\x00\xff\xff") for b in wire)
    assert [back.unpack(b) for b in wire] == [
        {"streamtype": ["stdout"]}, {"port": ["8080"], "requestid": ["0"]},
        {"x-many": ["a", "b"]}, {}]


def test_every_frame_type_round_trips(dictionary: bytes) -> None:
    frames: list[spdy.Frame] = [
        spdy.Data(5, b"payload", spdy.FLAG_FIN),
        spdy.SynStream(7, {"streamtype": ["error"]}, associated_to=0, priority=2,
                       flags=spdy.FLAG_UNIDIRECTIONAL),
        spdy.SynReply(7, {}), spdy.RstStream(7, spdy.CANCEL),
        spdy.Settings(((0, 7, 65536), (1, 4, 100))), spdy.Ping(3), spdy.GoAway(9, 0),
        spdy.HeadersFrame(7, {"a": ["b"]}), spdy.WindowUpdate(7, 1 << 20),
    ]
    out, back = spdy.HeaderCodec(dictionary), spdy.HeaderCodec(dictionary)
    for frame in frames:
        wire = spdy.encode(frame, out)
        assert len(wire) == 8 + (int.from_bytes(wire[5:8], "big"))
        assert spdy.decode(wire[:8], wire[8:], back) == frame
    # A control frame of another version is a protocol error; an unknown type is dropped.
    with pytest.raises(spdy.SpdyError):
        spdy.decode(struct.pack(">HHI", 0x8002, 6, 4), b"\0\0\0\1", back)
    assert spdy.decode(struct.pack(">HHI", 0x8003, 10, 0), b"", back) == spdy.Unknown(10)


# --- a SPDY client written from the wire format ------------------------------------------


class Client:
    """What the kubelet's streaming client does, one frame at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 dictionary: bytes, response: bytes) -> None:
        self.reader, self.writer, self.response = reader, writer, response
        self.deflate = zlib.compressobj(9, zdict=dictionary)
        self.inflate = zlib.decompressobj(zdict=dictionary)
        self.next_id = 1
        self.data: dict[int, bytearray] = {}
        self.fin: set[int] = set()
        self.replied: set[int] = set()
        self.control: list[tuple[int, bytes]] = []  # (type, payload) of the other frames

    @classmethod
    async def connect(cls, url: str, dictionary: bytes, protocols: tuple[str, ...] = (V4,),
                      upgrade: bool = True) -> Client:
        host_port, _, path = url.removeprefix("http://").partition("/")
        host, _, port = host_port.partition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        head = f"POST /{path} HTTP/1.1\r\nHost: {host_port}\r\n"
        if upgrade:
            head += "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        head += "".join(f"X-Stream-Protocol-Version: {p}\r\n" for p in protocols)
        writer.write(head.encode() + b"\r\n")
        response = await reader.readuntil(b"\r\n\r\n")
        return cls(reader, writer, dictionary, response)

    @property
    def status(self) -> int:
        return int(self.response.split(b" ", 2)[1])

    def block(self, headers: dict[str, str]) -> bytes:
        raw = struct.pack(">I", len(headers)) + b"".join(
            struct.pack(">I", len(k)) + k.encode() + struct.pack(">I", len(v)) + v.encode()
            for k, v in headers.items())
        return self.deflate.compress(raw) + self.deflate.flush(zlib.Z_SYNC_FLUSH)

    def _control(self, kind: int, payload: bytes, flags: int = 0) -> None:
        self.writer.write(struct.pack(">HHI", 0x8003, kind, flags << 24 | len(payload)) + payload)

    def open(self, **headers: str) -> int:
        sid, self.next_id = self.next_id, self.next_id + 2
        self._control(1, struct.pack(">IIBB", sid, 0, 0, 0) + self.block(headers))
        self.data[sid] = bytearray()
        return sid

    def send(self, sid: int, data: bytes, fin: bool = False) -> None:
        self.writer.write(struct.pack(">II", sid, int(fin) << 24 | len(data)) + data)

    def ping(self, ping_id: int) -> None:
        self._control(6, struct.pack(">I", ping_id))

    async def frame(self) -> bool:
        """Read one frame into the client's state; False at the end of the connection."""
        try:
            head = await self.reader.readexactly(8)
        except asyncio.IncompleteReadError:
            return False
        first, second = struct.unpack(">II", head)
        payload = await self.reader.readexactly(second & 0xFFFFFF)
        if not first & 0x80000000:
            self.data.setdefault(first, bytearray()).extend(payload)
            if second >> 24 & 1:
                self.fin.add(first)
            return True
        assert first >> 16 == 0x8003, hex(first)
        kind = first & 0xFFFF
        if kind == 2:  # SYN_REPLY: its (empty) header block still advances the zlib stream
            (sid,) = struct.unpack_from(">I", payload)
            assert self.inflate.decompress(payload[4:]) == b"\0\0\0\0"
            self.replied.add(sid)
        else:
            self.control.append((kind, payload))
        return True

    async def until(self, check: Any, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not check():
                assert await self.frame(), "the server hung up"

    async def to_end(self, timeout: float = 10.0) -> None:
        """Until the server's GOAWAY, then hang up (as the kubelet's client does: the
        server waits for that before it closes)."""
        await self.until(lambda: spdy.GOAWAY in self.kinds(), timeout)
        self.writer.close()

    def kinds(self) -> list[int]:
        return [k for k, _ in self.control]


async def _spawn(argv: list[str], **stdio: Any) -> asyncio.subprocess.Process:
    """What the sandbox's exec does, minus the sandbox: a session of its own."""
    return await asyncio.create_subprocess_exec(
        *argv, start_new_session=True,
        **{k: asyncio.subprocess.DEVNULL if v is None else v for k, v in stdio.items()})


def _exec(argv: list[str], *, stdin: bool = False, tty: bool = False) -> ExecSession:
    async def spawn(**stdio: Any) -> asyncio.subprocess.Process:
        return await _spawn(argv, **stdio)

    return ExecSession(spawn, stdin=stdin, stdout=True, stderr=not tty, tty=tty)


async def _server(dictionary: bytes) -> StreamingServer:
    server = StreamingServer("127.0.0.1", dictionary)
    await server.start()
    return server


async def _run_exec(dictionary: bytes, session: ExecSession, stdin: bytes | None = None,
                    protocol: str = V4) -> tuple[Client, dict[str, int]]:
    """Exec `session` as the kubelet's client does; the client after GOAWAY, and the stream
    id of each channel."""
    server = await _server(dictionary)
    try:
        client = await Client.connect(server.url(session), dictionary, (protocol,))
        assert client.status == 101, client.response
        assert f"X-Stream-Protocol-Version: {protocol}".encode() in client.response
        ids = {"error": client.open(streamType="error")}
        if session.stdin:
            ids["stdin"] = client.open(streamType="stdin")
        ids["stdout"] = client.open(streamType="stdout")
        if session.tty:
            ids["resize"] = client.open(streamType="resize")
        else:
            ids["stderr"] = client.open(streamType="stderr")
        await client.until(lambda: set(ids.values()) <= client.replied)
        if "resize" in ids:
            client.send(ids["resize"], json.dumps({"Width": 91, "Height": 33}).encode())
        if stdin is not None:
            client.send(ids["stdin"], stdin, fin=True)
        await client.to_end()
        return client, ids
    finally:
        await server.stop()


def test_exec_output_exit_code_and_stdin(dictionary: bytes) -> None:
    async def main() -> None:
        client, ids = await _run_exec(
            dictionary, _exec(["sh", "-c", "echo out; echo err >&2; head -c 3 /dev/zero | "
                                           "tr '\\0' x >&2; exit 0"]))
        assert bytes(client.data[ids["stdout"]]) == b"out\n"
        assert bytes(client.data[ids["stderr"]]) == b"err\nxxx"
        assert json.loads(client.data[ids["error"]]) == {"status": "Success"}
        assert set(ids.values()) <= client.fin  # every channel ends with FIN

        client, ids = await _run_exec(dictionary, _exec(["sh", "-c", "echo bye; exit 3"]))
        status = json.loads(client.data[ids["error"]])
        assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
        assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]

        big = os.urandom(300_000)  # past SPDY's 64 KiB default window: no flow control
        client, ids = await _run_exec(dictionary, _exec(["cat"], stdin=True), stdin=big)
        assert bytes(client.data[ids["stdout"]]) == big
        assert ids["stdin"] in client.fin  # the server closes its half of stdin too

        # Before v4 the error stream carries only a failure's message.
        client, ids = await _run_exec(dictionary, _exec(["sh", "-c", "exit 2"]),
                                      protocol="v3.channel.k8s.io")
        assert b"non-zero exit code" in client.data[ids["error"]]

    asyncio.run(main())


def test_exec_with_a_tty_gets_a_terminal_of_the_size_the_client_sets(dictionary: bytes) -> None:
    async def main() -> None:
        session = _exec(["sh", "-c", "read go; test -t 0 && test -t 1 && stty size"],
                        stdin=True, tty=True)
        client, ids = await _run_exec(dictionary, session, stdin=b"go\n")
        assert b"33 91" in client.data[ids["stdout"]]
        assert json.loads(client.data[ids["error"]]) == {"status": "Success"}

    asyncio.run(main())


def test_a_client_that_goes_kills_the_command(dictionary: bytes) -> None:
    async def main() -> None:
        started: list[asyncio.subprocess.Process] = []

        async def spawn(**stdio: Any) -> asyncio.subprocess.Process:
            started.append(await _spawn(["sleep", "60"], **stdio))
            return started[0]

        server = await _server(dictionary)
        try:
            url = server.url(ExecSession(spawn, stdin=False, stdout=True, stderr=False,
                                         tty=False))
            client = await Client.connect(url, dictionary)
            ids = [client.open(streamType="error"), client.open(streamType="stdout")]
            client.ping(1)
            await client.until(lambda: set(ids) <= client.replied
                               and (spdy.PING, b"\0\0\0\1") in client.control)  # echoed
            await eventually_async(lambda: started, "the command started", timeout=10)
            client.writer.close()
            async with asyncio.timeout(10):
                assert await started[0].wait() == -9
        finally:
            await server.stop()

    asyncio.run(main())


def test_urls_are_one_time_and_the_handshake_is_checked(dictionary: bytes) -> None:
    async def main() -> None:
        server = await _server(dictionary)
        try:
            url = server.url(_exec(["true"]))
            assert url.startswith(f"http://127.0.0.1:{server.port}/exec/")
            refused = await Client.connect(url, dictionary, ("v9.channel.k8s.io",))
            assert refused.status == 403
            assert b"X-Accepted-Stream-Protocol-Versions: v4.channel.k8s.io" in refused.response
            assert (await Client.connect(url, dictionary)).status == 404  # used up
            plain = await Client.connect(server.url(_exec(["true"])), dictionary, upgrade=False)
            assert plain.status == 400 and b"SPDY/3.1" in await plain.reader.read()
            wrong_kind = server.url(_exec(["true"])).replace("/exec/", "/attach/")
            assert (await Client.connect(wrong_kind, dictionary)).status == 404
        finally:
            await server.stop()

    asyncio.run(main())


def test_attach_shows_what_the_container_logs_from_now_on(dictionary: bytes,
                                                          tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(b"2026-01-01T00:00:00.000000000Z stdout F before\n")
    finished = False

    async def main() -> None:
        nonlocal finished

        def output() -> AsyncIterator[tuple[str, bytes]]:
            return follow_log(log, lambda: finished, poll=0.01)

        server = await _server(dictionary)
        try:
            url = server.url(AttachSession(output, stdout=True, stderr=True, tty=False))
            client = await Client.connect(url, dictionary)
            ids = {k: client.open(streamType=k) for k in ("error", "stdout", "stderr")}
            await client.until(lambda: set(ids.values()) <= client.replied)
            with log.open("ab") as out:
                out.write(b"2026-01-01T00:00:01.000000000Z stdout P hel\n"
                          b"2026-01-01T00:00:01.000000000Z stdout F lo\n"
                          b"2026-01-01T00:00:02.000000000Z stderr F oops\n")
            await client.until(lambda: b"oops" in client.data[ids["stderr"]])
            finished = True
            await client.to_end()
            assert bytes(client.data[ids["stdout"]]) == b"hello\n"
            assert bytes(client.data[ids["stderr"]]) == b"oops\n"
            assert json.loads(client.data[ids["error"]]) == {"status": "Success"}
        finally:
            await server.stop()

    asyncio.run(main())


def test_port_forward_pairs_streams_and_reports_a_refused_port(dictionary: bytes) -> None:
    async def main() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write((await reader.read()).upper())
            writer.close()

        backend = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = backend.sockets[0].getsockname()[1]
        server = await _server(dictionary)
        try:
            url = server.url(PortForwardSession("127.0.0.1"))
            client = await Client.connect(url, dictionary, ("portforward.k8s.io",))
            assert client.status == 101, client.response
            error = client.open(streamType="error", port=str(port), requestID="0")
            data = client.open(streamType="data", port=str(port), requestID="0")
            await client.until(lambda: {error, data} <= client.replied)
            client.send(data, b"hello", fin=True)
            await client.until(lambda: {error, data} <= client.fin)
            assert bytes(client.data[data]) == b"HELLO" and not client.data[error]

            backend.close()
            await backend.wait_closed()
            error = client.open(streamType="error", port=str(port), requestID="1")
            data = client.open(streamType="data", port=str(port), requestID="1")
            reset = (spdy.RST_STREAM, struct.pack(">II", data, spdy.CANCEL))
            await client.until(lambda: error in client.fin and reset in client.control)
            assert f"error forwarding port {port}".encode() in client.data[error]
        finally:
            await server.stop()

    asyncio.run(main())
