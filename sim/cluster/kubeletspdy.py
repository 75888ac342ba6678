"""`kubectl exec` on the upstream control plane: SPDY/3.1 on the simulated kubelet's API.

kube-apiserver 1.37 takes kubectl's WebSocket and speaks SPDY to the kubelet (POST
`/exec/...` with `Connection: Upgrade`, `Upgrade: SPDY/3.1` and the remotecommand versions
in `X-Stream-Protocol-Version`), as kubelet's own streaming server expects. The protocol is
the CRI streaming server's (sim/cri/streaming.py, the real kubelet's path); this module only
takes the connection over from aiohttp, whose parser knows no SPDY upgrade: every byte
after the 101 goes to an asyncio reader instead of the HTTP parser (as aiohttp's own
WebSocket does), and writes go straight to the socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from sim.controlplane.binaries import ComponentsMissingError
from sim.cri import streaming
from sim.cri.protos import load_dictionary

# (container, argv, with stdin) -> the started process (stdout/stderr pipes).
Exec = Callable[[str, Sequence[str], bool], Awaitable[asyncio.subprocess.Process]]


def asks_for_spdy(request: web.Request) -> bool:
    return "spdy/" in request.headers.get("Upgrade", "").lower()


def flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter; kube-apiserver names them as kubelet reads them (input,
    output, error, tty), the emulator passes kubectl's own (stdin, stdout, stderr)."""
    legacy = {"input": "stdin", "output": "stdout", "error": "stderr"}.get(name, name)
    return any(request.query.get(n) in ("1", "true") for n in (name, legacy))


class _Feed:
    """aiohttp's payload-parser interface, feeding an asyncio reader."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.reader.feed_data(data)
        return False, b""

    def feed_eof(self) -> None:
        self.reader.feed_eof()


class _Writer:
    """spdy.Writer over aiohttp's transport, with its protocol's back pressure."""

    def __init__(self, transport: asyncio.Transport, protocol: RequestHandler) -> None:
        self.transport = transport
        self.protocol = protocol

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    async def drain(self) -> None:
        await self.protocol._drain_helper()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.transport.close()

    async def wait_closed(self) -> None:
        return None


async def serve_exec(request: web.Request, container: str, argv: Sequence[str],
                     exec_in: Exec) -> web.StreamResponse:
    """Answer one SPDY exec request: 101 and the session, or the refusal as kubelet words it."""
    if not (flag(request, "output") and flag(request, "error")):
        return web.Response(status=400, text="the simulated kubelet's exec streams stdout and "
                            "stderr both (leave out -t and output redirection flags)")

    async def spawn(stdin: int | None, stdout: int | None,
                    stderr: int | None) -> asyncio.subprocess.Process:
        return await exec_in(container, argv, stdin is not None)

    session = streaming.ExecSession(spawn, stdin=flag(request, "input"),
                                    stdout=True, stderr=True, tty=False)
    headers = {name.lower(): request.headers.getall(name) for name in request.headers}
    protocol = streaming.negotiate(headers, session)
    if isinstance(protocol, streaming.Refusal):
        extra = [(k, v) for k, vs in protocol.headers.items() for v in vs]
        return web.Response(status=protocol.code, text=protocol.message, headers=extra)
    try:
        dictionary = load_dictionary()
    except ComponentsMissingError as err:
        return web.Response(status=500, text=str(err))
    transport = request.transport
    if transport is None:  # the client went already
        return web.Response(status=400)
    response = web.StreamResponse(status=101, headers={
        "Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": protocol})
    response.force_close()
    reader = asyncio.StreamReader()
    request.protocol.set_parser(_Feed(reader))  # type: ignore[arg-type]
    await response.prepare(request)
    assert isinstance(transport, asyncio.Transport)
    await streaming.serve_upgraded(reader, _Writer(transport, request.protocol), protocol,
                                   session, dictionary)
    return response
