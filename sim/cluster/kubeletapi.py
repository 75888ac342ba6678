"""The kubelet's HTTPS API, the part kube-apiserver calls: container logs.

`kubectl logs` asks kube-apiserver for `pods/log`; kube-apiserver dials the node's
InternalIP at the port in `status.daemonEndpoints.kubeletEndpoint` and GETs
`/containerLogs/<namespace>/<pod>/<container>`, presenting its kubelet client
certificate, and checks this server's certificate against the cluster CA. The logs are
what the kubelet wrote for each executed container (`<pods_dir>/<ns>_<pod>/<container>.log`,
all restarts in one file); a container the sim does not execute has an empty log.
`follow`, `tailLines` and `limitBytes` work as on kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

# (namespace, pod) -> the pod's containers and log directory, or None if not on this node;
# `alive` says whether the pod still runs (a follow ends with it).
PodLookup = Callable[[str, str], "PodLogs | None"]
_FOLLOW_POLL = 0.2


class PodLogs:
    """What the API needs of one pod on this node."""

    def __init__(self, containers: list[str], directory: Path, alive: Callable[[], bool]) -> None:
        self.containers = containers
        self.directory = directory
        self.alive = alive


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

    async def _logs(self, request: web.Request) -> web.StreamResponse:
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
        tail = _int_param(request, "tailLines")
        limit = _int_param(request, "limitBytes")
        follow = request.query.get("follow") in ("true", "1")
        path = pod.directory / f"{container}.log"
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
            await self._follow(response, path, pod, offset, limit, len(data))
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _follow(
        self,
        response: web.StreamResponse,
        path: Path,
        pod: PodLogs,
        offset: int,
        limit: int | None,
        sent: int,
    ) -> None:
        """Stream what the container appends until the pod ends or the client goes."""
        while pod.alive() and not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), _FOLLOW_POLL)
            chunk = _read(path, offset)
            if not chunk:
                continue
            offset += len(chunk)
            if limit is not None:
                chunk = chunk[: limit - sent]
            try:
                await response.write(chunk)
            except ConnectionError:
                return
            sent += len(chunk)
            if limit is not None and sent >= limit:
                return


def _read(path: Path, offset: int = 0) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read()
    except FileNotFoundError:
        return b""
