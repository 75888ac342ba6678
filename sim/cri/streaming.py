"""The CRI streaming server of the sim's runtime: what `kubectl exec`, `attach` and
`port-forward` reach through kube-apiserver and the kubelet.

CRI Exec, Attach and PortForward (sim/cri/runtime.py) register a session here and answer
its one-time URL; the kubelet connects to that URL, upgrades the request to SPDY/3.1
(sim/cri/spdy.py) and proxies kubectl's streams over it
(https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/kubelet/server/server.go,
getExec). The server side follows the kubelet's own CRI streaming library
(https://github.com/kubernetes/kubernetes/blob/v1.37.2/staging/src/k8s.io/cri-streaming/pkg/streaming/remotecommand/httpstream.go):
- the client offers remotecommand subprotocols in X-Stream-Protocol-Version; the first it
  lists that this server knows wins (v4.channel.k8s.io from kubectl and the kubelet);
- it then opens one stream per channel, named by the `streamType` header (error, stdin,
  stdout, stderr, and resize with a TTY), each answered with SYN_REPLY;
- once the command ends: its output streams end with FIN, the error stream carries the
  outcome (v4: a JSON metav1.Status, a nonzero exit being reason NonZeroExitCode with an
  ExitCode cause; older versions: the failure's message only) and ends with FIN, and the
  connection with GOAWAY.
A TTY is a pseudo-terminal, resized by the resize stream; the command does not get it as
its controlling terminal (the sandbox starts it in a session of its own, sim/cluster/
sandbox.py), so there is no job control and ^C is a byte, not SIGINT.
Attach shows the container's output from its CRI log (the runtime's log copier owns the
container's pipes), without stdin. Port forwarding dials the pod's address.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import json
import logging
import os
import pty
import secrets
import signal
import struct
import termios
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.cri import spdy
from sim.cri.protos import load_dictionary

log = logging.getLogger(__name__)

V1, V2, V3, V4 = "channel.k8s.io", "v2.channel.k8s.io", "v3.channel.k8s.io", "v4.channel.k8s.io"
REMOTE_COMMAND = (V4, V3, V2, V1)
PORT_FORWARD = ("portforward.k8s.io",)
PROTOCOL_HEADER = "x-stream-protocol-version"
# As the CRI streaming library: a URL is good for a minute (request_cache.go), and the
# client has 30 s to open its streams (DefaultStreamCreationTimeout).
TOKEN_TTL = 60.0
STREAM_CREATION_TIMEOUT = 30.0
MAX_REQUEST_HEAD = 64 << 10

Spawn = Callable[..., Awaitable[asyncio.subprocess.Process]]


@dataclass(frozen=True)
class ExecSession:
    """A command to run when the client connects. `spawn(stdin=, stdout=, stderr=)` starts
    it in a session of its own (its process group, killed if the client goes, is its pid)."""

    spawn: Spawn
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


@dataclass(frozen=True)
class AttachSession:
    """`output()` yields ("stdout" | "stderr", bytes) of the container until it exits."""

    output: Callable[[], AsyncIterator[tuple[str, bytes]]]
    stdout: bool
    stderr: bool
    tty: bool


@dataclass(frozen=True)
class PortForwardSession:
    """Forward to `host`, the pod's address (the sim has no pod network namespaces)."""

    host: str


Session = ExecSession | AttachSession | PortForwardSession
KINDS: dict[str, type] = {"exec": ExecSession, "attach": AttachSession,
                          "portforward": PortForwardSession}


def _status(code: int | None = None, error: str = "") -> dict[str, Any]:
    """The v4 error-stream Status (the library's status.go and exec.go): None and no error
    is success."""
    if error:
        return {"status": "Failure", "reason": "InternalError", "code": 500,
                "message": f"Internal error occurred: {error}"}
    if not code:
        return {"status": "Success"}
    return {"status": "Failure", "reason": "NonZeroExitCode",
            "message": f"command terminated with non-zero exit code: exit status {code}",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


def _response(code: int, reason: str, body: str, extra: str = "") -> bytes:
    data = body.encode() + b"\n"
    return (f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n{extra}\r\n").encode() + data


def _parse_head(head: bytes) -> tuple[str, str, dict[str, list[str]]] | None:
    """(method, path without query, headers by lowercase name), None if malformed."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                return None
            headers.setdefault(name.strip().lower(), []).append(value.strip())
    return parts[0], parts[1].partition("?")[0], headers


class StreamingServer:
    """One node's streaming server on `host`, a free port (`start()`); `url(session)` is
    the one-time URL a CRI streaming call answers."""

    def __init__(self, host: str = "127.0.0.1", dictionary: bytes | None = None) -> None:
        self.host = host
        self.port = 0
        self._dictionary = dictionary
        self._server: asyncio.Server | None = None
        self._sessions: dict[str, tuple[float, Session]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        if self._dictionary is None:
            self._dictionary = load_dictionary()
        self._server = await asyncio.start_server(self._handle, self.host, 0,
                                                  limit=MAX_REQUEST_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and end every session (killing the commands they run)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def url(self, session: Session) -> str:
        now = time.monotonic()
        for token in [t for t, (deadline, _) in self._sessions.items() if deadline < now]:
            del self._sessions[token]
        token = secrets.token_urlsafe(16)
        self._sessions[token] = (now + TOKEN_TTL, session)
        kind = next(k for k, t in KINDS.items() if isinstance(session, t))
        return f"http://{self.host}:{self.port}/{kind}/{token}"

    def _take(self, kind: str, token: str) -> Session | None:
        deadline, session = self._sessions.pop(token, (0.0, None))
        if session is None or deadline < time.monotonic():
            return None
        return session if isinstance(session, KINDS.get(kind, type(None))) else None

    # --- HTTP ----------------------------------------------------------------------------

    def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve the connection in a task of this server's (asyncio's own connection task
        logs an error when cancelled, and `stop()` cancels)."""
        task = asyncio.get_running_loop().create_task(self._connection(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve(reader, writer)
        except Exception:
            log.exception("streaming connection failed")
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(STREAM_CREATION_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            return
        request = _parse_head(head)
        if request is None:
            writer.write(_response(400, "Bad Request", "malformed request"))
            return
        method, path, headers = request
        kind, _, token = path.lstrip("/").partition("/")
        session = self._take(kind, token) if method in ("GET", "POST") else None
        if session is None:
            writer.write(_response(404, "Not Found", f"no streaming session at {path}"))
            return
        protocol = negotiate(headers, session)
        if isinstance(protocol, Refusal):
            no = protocol
            extra = "".join(f"{k}: {v}\r\n" for k, vs in no.headers.items() for v in vs)
            writer.write(_response(no.code, no.reason, no.message, extra))
            return
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                     b"Upgrade: SPDY/3.1\r\n"
                     + f"X-Stream-Protocol-Version: {protocol}\r\n\r\n".encode())
        assert self._dictionary is not None
        await serve_upgraded(reader, writer, protocol, session, self._dictionary)


@dataclass(frozen=True)
class Refusal:
    """Why an upgrade request is not served: the HTTP answer to give instead."""

    code: int
    reason: str
    message: str
    headers: dict[str, list[str]]


def negotiate(headers: dict[str, list[str]], session: Session) -> str | Refusal:
    """The subprotocol to answer 101 with (the first the client offers that this server
    knows), or the refusal: shared by this server and the simulated kubelet's own API."""
    if ("upgrade" not in ",".join(headers.get("connection", [])).lower()
            or "spdy/3.1" not in ",".join(headers.get("upgrade", [])).lower()):
        return Refusal(400, "Bad Request", "unable to upgrade: missing upgrade headers in "
                       "request (this server speaks SPDY/3.1 only)", {})
    known = PORT_FORWARD if isinstance(session, PortForwardSession) else REMOTE_COMMAND
    offered = [p.strip() for value in headers.get(PROTOCOL_HEADER, [])
               for p in value.split(",") if p.strip()]
    protocol = next((p for p in offered if p in known), None)
    if protocol is None:
        return Refusal(403, "Forbidden", f"unable to upgrade: unable to negotiate protocol: "
                       f"client supports {offered}, server accepts {list(known)}",
                       {"X-Accepted-Stream-Protocol-Versions": list(known)})
    return protocol


async def serve_upgraded(reader: asyncio.StreamReader, writer: spdy.Writer, protocol: str,
                         session: Session, dictionary: bytes) -> None:
    """Serve `session` over a connection already answered 101 with `protocol`."""
    conn = spdy.Connection(reader, writer, dictionary)
    serving = asyncio.get_running_loop().create_task(conn.serve())
    try:
        if isinstance(session, PortForwardSession):
            await _port_forward(conn, session)
        else:
            await _remote_command(conn, protocol, session)
    finally:
        current = asyncio.current_task()
        stopping = current is not None and current.cancelling() > 0  # stop(): no wait
        await conn.close(linger=0 if stopping else 5.0)
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


# --- remotecommand: exec and attach ------------------------------------------------------


async def _remote_command(conn: spdy.Connection, protocol: str,
                          session: ExecSession | AttachSession) -> None:
    wanted = {"error"}
    if isinstance(session, ExecSession) and session.stdin:
        wanted.add("stdin")
    if session.stdout:
        wanted.add("stdout")
    if session.stderr and not session.tty:
        wanted.add("stderr")
    if session.tty and protocol in (V3, V4):
        wanted.add("resize")
    streams = await _accept_streams(conn, wanted)
    if streams is None:
        return
    try:
        if isinstance(session, ExecSession):
            status = _status(await _exec(conn, session, streams))
        else:
            await _attach(conn, session, streams)
            status = _status()
    except Exception as err:  # the command could not run: the client is told why
        log.warning("streaming %s failed: %s", type(session).__name__, err)
        status = _status(error=f"error executing command in container: {err}")
    error = streams["error"]
    if protocol == V4:
        await error.write(json.dumps(status).encode())
    elif status["status"] != "Success":
        await error.write(status["message"].encode())
    for stream in streams.values():
        stream.discard()
        await stream.close()


async def _accept_streams(conn: spdy.Connection, wanted: set[str]) -> dict[str, spdy.Stream] | None:
    """Reply to each stream the client opens until it opened `wanted`; None if it went or
    took too long."""
    found: dict[str, spdy.Stream] = {}
    try:
        async with asyncio.timeout(STREAM_CREATION_TIMEOUT):
            while set(found) != wanted:
                stream = await conn.accept()
                if stream is None:
                    return None
                kind = stream.header("streamType")
                await stream.reply()
                if kind in wanted and kind not in found:
                    found[kind] = stream
                else:
                    log.warning("unexpected stream type %r", kind)
                if kind not in ("stdin", "resize"):
                    stream.discard()
    except TimeoutError:
        log.warning("timed out waiting for the client to open streams %s", sorted(wanted))
        return None
    return found


async def _pump_out(source: asyncio.StreamReader, stream: spdy.Stream) -> None:
    """Copy `source` to `stream` until EOF (a pty's EIO is its EOF), then FIN."""
    with contextlib.suppress(OSError):
        while chunk := await source.read(spdy.DATA_CHUNK):
            await stream.write(chunk)
    await stream.close()


async def _pump_in(stream: spdy.Stream, sink: asyncio.StreamWriter,
                   at_end: Callable[[], object]) -> None:
    """Copy what the client sends on `stream` to `sink`, then `at_end()` (close a pipe,
    type a terminal's EOF character, half-close a socket)."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await stream.read():
            sink.write(data)
            await sink.drain()
        at_end()
    stream.discard()


async def _resize(stream: spdy.Stream, fd: int) -> None:
    """Apply each terminal size ({"Width": w, "Height": h}, JSON one after another)."""
    buffer, decoder = "", json.JSONDecoder()
    while data := await stream.read():
        buffer += data.decode(errors="replace")
        while buffer.strip():
            try:
                size, end = decoder.raw_decode(buffer.lstrip())
            except json.JSONDecodeError:
                break
            buffer = buffer.lstrip()[end:]
            with contextlib.suppress(OSError, TypeError, ValueError, AttributeError,
                                     struct.error):
                fcntl.ioctl(fd, termios.TIOCSWINSZ,
                            struct.pack("HHHH", size.get("Height"), size.get("Width"), 0, 0))


async def _terminal(master: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Asyncio streams on a pty master (`master` is theirs from now on)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                 os.fdopen(master, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                        os.fdopen(os.dup(master), "wb", 0))
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def _exec(conn: spdy.Connection, session: ExecSession,
                streams: dict[str, spdy.Stream]) -> int:
    """Run the command with its stdio on the streams; its exit code (128+N: signal N)."""
    pipe = asyncio.subprocess.PIPE
    master = slave = -1
    if session.tty:
        master, slave = pty.openpty()
        stdio: dict[str, Any] = {"stdin": slave, "stdout": slave, "stderr": slave}
    else:
        stdio = {name: pipe if name in streams else None for name in ("stdin", "stdout", "stderr")}
    try:
        proc = await session.spawn(**stdio)
    except BaseException:
        if master >= 0:
            os.close(master)
        raise
    finally:
        if slave >= 0:
            os.close(slave)
    loop = asyncio.get_running_loop()
    inputs: list[asyncio.Task[None]] = []
    outputs: list[asyncio.Task[None]] = []
    terminal: asyncio.StreamWriter | None = None
    try:
        if session.tty:
            out, terminal = await _terminal(master)
            # Resizes first: a size the client sent before some input applies before the
            # command reads that input (tasks start, and wake, in order).
            if "resize" in streams:
                inputs.append(loop.create_task(_resize(streams["resize"], master)))
            if "stdin" in streams:
                eot = functools.partial(terminal.write, b"\x04")  # ^D: EOF in canonical mode
                inputs.append(loop.create_task(_pump_in(streams["stdin"], terminal, eot)))
            if "stdout" in streams:
                outputs.append(loop.create_task(_pump_out(out, streams["stdout"])))
        else:
            if proc.stdin is not None:
                inputs.append(loop.create_task(
                    _pump_in(streams["stdin"], proc.stdin, proc.stdin.close)))
            for name, source in (("stdout", proc.stdout), ("stderr", proc.stderr)):
                if source is not None:
                    outputs.append(loop.create_task(_pump_out(source, streams[name])))
        finished = loop.create_task(_all(proc.wait(), *outputs))
        gone = loop.create_task(conn.closed.wait())
        await asyncio.wait({finished, gone}, return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        if finished.done():
            await finished
        else:  # the client went: nobody wants the rest
            _kill(proc)
            finished.cancel()
    finally:
        if proc.returncode is None:
            _kill(proc)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(proc.wait())
        for task in (*inputs, *outputs):
            task.cancel()
        await asyncio.gather(*inputs, *outputs, return_exceptions=True)
        if terminal is not None:
            terminal.close()
        if proc.stdin is not None:
            proc.stdin.close()
    code = await proc.wait()
    return code if code >= 0 else 128 - code


async def _all(*waits: Awaitable[Any]) -> None:
    await asyncio.gather(*waits)


def _kill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the command's process group (its session, sim/cluster/sandbox.py)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _attach(conn: spdy.Connection, session: AttachSession,
                  streams: dict[str, spdy.Stream]) -> None:
    async def copy() -> None:
        async for name, data in session.output():
            stream = streams.get("stdout" if session.tty else name)
            if stream is not None:
                await stream.write(data)

    loop = asyncio.get_running_loop()
    copying, gone = loop.create_task(copy()), loop.create_task(conn.closed.wait())
    try:
        await asyncio.wait({copying, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        copying.cancel()
        gone.cancel()
        await asyncio.gather(copying, gone, return_exceptions=True)
    if copying.done() and not copying.cancelled() and (failed := copying.exception()):
        raise failed


async def follow_log(path: Path, finished: Callable[[], bool],
                     poll: float = 0.1) -> AsyncIterator[tuple[str, bytes]]:
    """What a container writes from now on, read back from its CRI log at `path` (records
    `TIME STREAM F|P TEXT`, sim/cri/runtime.py), until `finished()` (its output is all in
    the log by then) and the log is read; a rotated log is followed to the new file."""
    handle = None
    partial = b""
    try:
        with contextlib.suppress(OSError):
            handle = path.open("rb")
            handle.seek(0, os.SEEK_END)
        while True:
            done = finished()
            while handle is not None and (line := partial + handle.readline()):
                if not line.endswith(b"\n"):
                    partial = line  # the rest of the record is not written yet
                    break
                partial = b""
                fields = line[:-1].split(b" ", 3)
                if len(fields) >= 3:
                    text = fields[3] if len(fields) > 3 else b""
                    yield fields[1].decode(), text + (b"\n" if fields[2] == b"F" else b"")
            if done:
                return
            await asyncio.sleep(poll)
            with contextlib.suppress(OSError):
                if handle is None or path.stat().st_ino != os.fstat(handle.fileno()).st_ino:
                    if handle is not None:
                        handle.close()
                    handle, partial = path.open("rb"), b""
    finally:
        if handle is not None:
            handle.close()


# --- port forwarding ---------------------------------------------------------------------


async def _port_forward(conn: spdy.Connection, session: PortForwardSession) -> None:
    """Pair each request's error and data streams (the `requestID` header, else the
    stream ids as old clients number them) and forward each pair to its `port`
    (https://github.com/kubernetes/kubernetes/blob/v1.37.2/staging/src/k8s.io/cri-streaming/pkg/streaming/portforward/httpstream.go)."""
    pairs: dict[str, dict[str, spdy.Stream]] = {}
    forwards: set[asyncio.Task[None]] = set()
    try:
        while (stream := await conn.accept()) is not None:
            kind, port = stream.header("streamType"), stream.header("port")
            if kind not in ("error", "data") or not port.isdigit() or not 0 < int(port) < 65536:
                log.warning("port forward stream refused: type %r, port %r", kind, port)
                await stream.reset(spdy.REFUSED_STREAM)
                continue
            await stream.reply()
            if kind == "error":
                stream.discard()
            request = stream.header("requestID") or str(stream.id - (kind == "data") * 2)
            pair = pairs.setdefault(request, {})
            if kind in pair:
                await stream.reset(spdy.PROTOCOL_ERROR)
                continue
            pair[kind] = stream
            if len(pair) == 2:
                del pairs[request]
                task = asyncio.get_running_loop().create_task(
                    _forward(session.host, int(port), pair["data"], pair["error"]))
                forwards.add(task)
                task.add_done_callback(forwards.discard)
    finally:
        for task in list(forwards):
            task.cancel()
        await asyncio.gather(*forwards, return_exceptions=True)


async def _forward(host: str, port: int, data: spdy.Stream, error: spdy.Stream) -> None:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as err:
        await error.write(f"error forwarding port {port} to {host}: {err}".encode())
        await error.close()
        await data.reset()
        return
    try:
        await asyncio.gather(_pump_in(data, writer, writer.write_eof), _pump_out(reader, data))
    finally:
        writer.close()
        await error.close()
        await data.close()
