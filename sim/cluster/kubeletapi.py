"""The kubelet's HTTPS API, the part the API server calls: container logs and exec.

`kubectl logs` asks the API server for `pods/log`; it dials the node's InternalIP at the
port in `status.daemonEndpoints.kubeletEndpoint` and GETs
`/containerLogs/<namespace>/<pod>/<container>`, presenting its kubelet client
certificate, and checks this server's certificate against the cluster CA. The logs are
what each container's current run wrote (`<pods_dir>/<ns>_<pod>/<container>.log`), or
with `previous` the run before. `follow` (until that run ends), `tailLines` and
`limitBytes` work as on kubelet.

`kubectl exec` becomes `/exec/<namespace>/<pod>/<container>?command=...` over WebSocket
(the `v5.channel.k8s.io` / `v4.channel.k8s.io` protocols of kubelet's streaming server):
binary messages whose first byte is the stream (0 stdin, 1 stdout, 2 stderr, 3 the final
Status, 4 resize; in v5, 255 closes the stream named by the second byte). The command
runs inside the container (`sandbox.SandboxExecutor.exec`); a non-zero exit is reported
as kubelet reports it, so kubectl exits with the same code. No TTY: `-t` is refused.
kube-apiserver itself (`--control-plane kubernetes`) asks for SPDY/3.1 instead, served by
sim/cluster/kubeletspdy.py with the CRI streaming server's protocol code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from sim.cluster import kubeletspdy

# (namespace, pod) -> the pod's containers and log directory, or None if not on this node;
# `alive` says whether the pod still runs (a follow ends with it).
PodLookup = Callable[[str, str], "PodLogs | None"]
_FOLLOW_POLL = 0.2


# (container, argv, with stdin) -> the started process (stdout/stderr/stdin pipes).
Exec = Callable[[str, Sequence[str], bool], Awaitable[asyncio.subprocess.Process]]
EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
_STDIN, _STDOUT, _STDERR, _ERROR, _RESIZE, _CLOSE = 0, 1, 2, 3, 4, 255


class PodLogs:
    """What the API needs of one pod on this node."""

    def __init__(
        self,
        containers: list[str],
        directory: Path,
        alive: Callable[[], bool],
        exec_in: Exec | None = None,
    ) -> None:
        self.containers = containers
        self.directory = directory
        self.alive = alive
        self.exec_in = exec_in


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message)


def _int_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name}: invalid value {raw!r}") from None
    if value < 0:
        raise web.HTTPBadRequest(text=f"{name}: must be at least 0")
    return value


class KubeletServer:
    """Serves `/containerLogs/...` and `/healthz` on the node's address over TLS."""

    def __init__(self, address: str, port: int, tls: ssl.SSLContext, lookup: PodLookup) -> None:
        self.address = address
        self.port = port
        self.tls = tls
        self.lookup = lookup
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        for method in ("GET", "POST"):
            app.router.add_route(method, "/exec/{namespace}/{pod}/{container}", self._exec)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self.address, self.port, ssl_context=self.tls, reuse_address=True
        )
        await site.start()

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _request: web.Request) -> web.Response:
        return _text(200, "ok")

    def _target(self, request: web.Request) -> tuple[PodLogs, str, str] | web.Response:
        """(pod, its name, the container) the path names, or the answer saying why not."""
        namespace, name, container = (
            request.match_info["namespace"],
            request.match_info["pod"],
            request.match_info["container"],
        )
        pod = self.lookup(namespace, name)
        if pod is None:
            return _text(404, f'pod "{name}" in namespace "{namespace}" not found on this node')
        if container not in pod.containers:
            return _text(400, f'container "{container}" in pod "{name}" is not valid')
        return pod, name, container

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request)
        if isinstance(target, web.Response):
            return target
        pod, name, container = target
        tail = _int_param(request, "tailLines")
        limit = _int_param(request, "limitBytes")
        follow = request.query.get("follow") in ("true", "1")
        path = pod.directory / f"{container}.log"
        if request.query.get("previous") in ("true", "1"):
            path = pod.directory / f"{container}.previous.log"
            follow = False
            if not path.exists():
                return _text(
                    400, f'previous terminated container "{container}" in pod "{name}" not found'
                )
        inode = _inode(path)
        data = _read(path)
        offset = len(data)
        if tail is not None:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail:]) if tail else b""
        if limit is not None:
            data = data[:limit]
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write(data)
        if follow and (limit is None or len(data) < limit):
            await self._follow(response, path, pod, (offset, inode), limit, len(data))
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request)
        if isinstance(target, web.Response):
            return target
        pod, name, container = target
        if pod.exec_in is None:
            return _text(400, f'pod "{name}" cannot be exec\'d into on this node')
        argv = request.query.getall("command", [])
        if not argv:
            return _text(400, "you must specify at least 1 command")
        if kubeletspdy.flag(request, "tty"):
            return _text(400, "a TTY is not supported by the simulated kubelet; leave out -t "
                         "(or run the real kubelet: --control-plane kubernetes --kubelet upstream)")
        if kubeletspdy.asks_for_spdy(request):  # kube-apiserver's way
            return await kubeletspdy.serve_exec(request, container, argv, pod.exec_in)
        ws = web.WebSocketResponse(protocols=EXEC_PROTOCOLS, max_msg_size=0)
        if not ws.can_prepare(request).ok:
            return _text(400, "exec needs a WebSocket upgrade to "
                         f"{' or '.join(EXEC_PROTOCOLS)}, or SPDY/3.1")
        await ws.prepare(request)
        with_stdin = kubeletspdy.flag(request, "input")
        try:
            proc = await pod.exec_in(container, argv, with_stdin)
        except Exception as err:
            await _send(ws, _ERROR, json.dumps(_failure(str(err))).encode())
            await ws.close()
            return ws
        feeder = asyncio.create_task(_feed(ws, proc, ws.ws_protocol == EXEC_PROTOCOLS[0]))
        try:
            assert proc.stdout is not None and proc.stderr is not None
            await asyncio.gather(_pump(proc.stdout, ws, _STDOUT), _pump(proc.stderr, ws, _STDERR))
            code = await proc.wait()
            await _send(ws, _ERROR, json.dumps(exit_status(code, argv)).encode())
        finally:
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder
            if proc.returncode is None:  # the client went away: so does the command
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                await proc.wait()
            await ws.close()
        return ws

    async def _follow(
        self,
        response: web.StreamResponse,
        path: Path,
        pod: PodLogs,
        start: tuple[int, int],
        limit: int | None,
        sent: int,
    ) -> None:
        """Stream what the container appends until its run ends (a restart starts a new
        log file), the pod ends or the client goes. The file stays open while followed:
        what a stopping container writes last (a daemon's removal from its clique) is sent
        even when the kubelet removes the pod's directory as soon as it exited."""
        offset, inode = start
        while inode == 0 and pod.alive() and not self._stopping.is_set():
            # Not written yet (the container has not started): wait for its first run.
            await self._pause()
            inode, offset = _inode(path), 0
        try:
            handle = path.open("rb")
        except FileNotFoundError:
            return
        with handle:
            if os.fstat(handle.fileno()).st_ino != inode:
                return  # replaced between the first read and now: that run is over
            handle.seek(offset)
            running = True
            while running and not self._stopping.is_set():
                # Checked before the read: what the run wrote before it ended is sent.
                running = pod.alive() and _inode(path) == inode
                if running:
                    await self._pause()
                chunk = handle.read()
                if not chunk:
                    continue
                if limit is not None:
                    chunk = chunk[: limit - sent]
                try:
                    await response.write(chunk)
                except ConnectionError:
                    return
                sent += len(chunk)
                if limit is not None and sent >= limit:
                    return

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_FOLLOW_POLL):
                await self._stopping.wait()


def _inode(path: Path) -> int:
    try:
        return path.stat().st_ino
    except OSError:
        return 0


def _read(path: Path, offset: int = 0) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read()
    except FileNotFoundError:
        return b""


async def _send(ws: web.WebSocketResponse, channel: int, data: bytes) -> None:
    with contextlib.suppress(ConnectionError, RuntimeError):
        await ws.send_bytes(bytes([channel]) + data)


async def _pump(stream: asyncio.StreamReader, ws: web.WebSocketResponse, channel: int) -> None:
    while chunk := await stream.read(65536):
        await _send(ws, channel, chunk)


async def _feed(ws: web.WebSocketResponse, proc: asyncio.subprocess.Process, v5: bool) -> None:
    """The client's stdin into the command; v5's close message ends it (EOF)."""
    stdin = proc.stdin
    async for message in ws:
        if message.type != WSMsgType.BINARY or not message.data:
            continue
        data: bytes = message.data
        if data[0] == _STDIN and stdin is not None and not stdin.is_closing():
            stdin.write(data[1:])
            with contextlib.suppress(ConnectionError):
                await stdin.drain()
        elif v5 and data[0] == _CLOSE and data[1:2] == bytes([_STDIN]) and stdin is not None:
            stdin.close()
    if proc.returncode is None and stdin is not None:
        stdin.close()


def exit_status(code: int, argv: Sequence[str]) -> dict[str, Any]:
    """The Status kubelet sends on the error stream when an exec'd command ends."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command "
        f"[{' '.join(argv)}], exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def _failure(message: str) -> dict[str, Any]:
    return {"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError"}
