"""One probe attempt as kubelet makes it: exec, httpGet, grpc or tcpSocket.

httpGet succeeds on a status from 200 to 399 (redirects not followed; HTTPS without
certificate checks, as kubelet does); grpc calls `grpc.health.v1.Health/Check` with the
probe's service and succeeds on SERVING; tcpSocket on an accepted connection. Ports may be
named after the container's `ports`. The host is the pod's IP unless the probe names one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiohttp
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

Obj = dict[str, Any]
ExecProbe = Callable[[Sequence[str], float], Awaitable[bool]]


def _port(value: Any, ports: Mapping[str, int]) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    if text.isdigit():
        return int(text)
    if text not in ports:
        raise ValueError(f"probe port {text!r} names no port of the container")
    return ports[text]


def container_ports(container: Obj) -> dict[str, int]:
    return {
        str(p["name"]): int(p["containerPort"])
        for p in container.get("ports") or ()
        if p.get("name") and p.get("containerPort")
    }


async def _grpc(host: str, port: int, service: str, timeout: float) -> bool:
    async with grpc.aio.insecure_channel(f"{host}:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            request = health_pb2.HealthCheckRequest(service=service)
            reply = await stub.Check(request, timeout=timeout)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def _http(probe: Obj, host: str, port: int, timeout: float) -> bool:
    scheme = str(probe.get("scheme") or "HTTP").lower()
    path = str(probe.get("path") or "/")
    headers = {h["name"]: h.get("value", "") for h in probe.get("httpHeaders") or ()}
    tls: ssl.SSLContext | bool = False
    if scheme == "https":
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    path = path if path.startswith("/") else "/" + path
    url = f"{scheme}://{probe.get('host') or host}:{port}{path}"
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    try:
        async with (
            aiohttp.ClientSession(timeout=client_timeout) as session,
            session.get(url, headers=headers, allow_redirects=False, ssl=tls) as response,
        ):
            return 200 <= response.status < 400
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def _tcp(host: str, port: int, timeout: float) -> bool:
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def attempt(
    probe: Obj, *, run_exec: ExecProbe, host: str, ports: Mapping[str, int]
) -> bool:
    """One attempt of `probe` (a container's startup/readiness/liveness probe)."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        if "exec" in probe:
            command = list((probe["exec"] or {}).get("command") or ())
            return bool(command) and await run_exec(command, timeout)
        if "httpGet" in probe:
            http = probe["httpGet"]
            return await _http(http, host, _port(http.get("port"), ports), timeout)
        if "grpc" in probe:
            spec = probe["grpc"]
            service = str(spec.get("service") or "")
            return await _grpc(host, _port(spec.get("port"), ports), service, timeout)
        if "tcpSocket" in probe:
            spec = probe["tcpSocket"]
            target = str(spec.get("host") or host)
            return await _tcp(target, _port(spec.get("port"), ports), timeout)
    except ValueError:
        return False
    return False
