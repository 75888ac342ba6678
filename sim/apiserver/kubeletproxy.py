"""`pods/log` and `pods/exec`: the API server's calls to the pod's kubelet.

As kube-apiserver does, the emulator finds the node the pod is bound to, dials the
node's InternalIP at `status.daemonEndpoints.kubeletEndpoint.Port` over HTTPS with its
kubelet client certificate (checking the kubelet's serving certificate against the
cluster CA), and relays: the log body as it streams, or the exec WebSocket message by
message in both directions (kubectl and the kubelet speak the same channel protocol).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import WSMsgType, web

from sim.apiserver import errors
from sim.apiserver.store import Obj, Store

EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
_LOG_PARAMS = ("follow", "tailLines", "limitBytes", "previous", "timestamps", "sinceSeconds")


class KubeletProxy:
    """Relays pods/log and pods/exec to kubelets; `client` is (CA, certificate, key)."""

    def __init__(self, store: Store, client: tuple[str, str, str] | None) -> None:
        self.store = store
        self._tls: ssl.SSLContext | None = None
        if client is not None:
            ca, cert, key = client
            self._tls = ssl.create_default_context(cafile=ca)
            self._tls.check_hostname = False  # kube-apiserver checks the CA, not the name
            self._tls.load_cert_chain(cert, key)

    def _pod(self, namespace: str, name: str) -> Obj:
        pod = self.store.get(("", "pods"), namespace, name)
        if pod is None:
            raise errors.not_found("", "pods", name)
        return pod

    def _container(self, pod: Obj, query: Mapping[str, str]) -> str:
        """The container the request names (an init container too, as kube-apiserver
        takes), or the pod's only container when it names none."""
        spec = pod.get("spec") or {}
        containers = [c["name"] for c in spec.get("containers") or ()]
        inits = [c["name"] for c in spec.get("initContainers") or ()]
        name = query.get("container") or ""
        pod_name = pod["metadata"]["name"]
        if not name:
            if len(containers) != 1:
                raise errors.bad_request(
                    f"a container name must be specified for pod {pod_name}, choose one of: "
                    f"[{' '.join(containers)}]"
                )
            return containers[0]
        if name not in containers and name not in inits:
            raise errors.bad_request(
                f"container {name} is not valid for pod {pod_name}"
            )
        return name

    def _kubelet(self, pod: Obj) -> str:
        node_name = (pod.get("spec") or {}).get("nodeName")
        pod_name = pod["metadata"]["name"]
        if not node_name:
            raise errors.bad_request(f"pod {pod_name} does not have a host assigned")
        node = self.store.get(("", "nodes"), "", node_name)
        status = (node or {}).get("status") or {}
        addresses = status.get("addresses") or ()
        address = next((a.get("address") for a in addresses if a.get("type") == "InternalIP"), None)
        port = (((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port"))
        if self._tls is None or not address or not port:
            raise errors.bad_request(
                f"the kubelet of node {node_name} cannot be reached (no InternalIP or kubelet port)"
            )
        return f"https://{address}:{port}"

    async def logs(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        pod = self._pod(namespace, name)
        container = self._container(pod, request.query)
        base = self._kubelet(pod)
        params = {k: v for k in _LOG_PARAMS if (v := request.query.get(k)) is not None}
        url = f"{base}/containerLogs/{namespace}/{name}/{container}"
        if params:
            url += "?" + urlencode(params)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                upstream = await session.get(url, ssl=self._tls or False)
            except aiohttp.ClientError as err:
                raise errors.internal(f"Get \"{url}\": {err}") from None
            async with upstream:
                if upstream.status != 200:
                    text = await upstream.text()
                    raise errors.bad_request(text.strip() or f"kubelet answered {upstream.status}")
                response = web.StreamResponse(
                    status=200, headers={"Content-Type": "text/plain"}
                )
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    try:
                        await response.write(chunk)
                    except ConnectionError:
                        break
                with contextlib.suppress(ConnectionError):
                    await response.write_eof()
                return response

    async def exec(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        pod = self._pod(namespace, name)
        container = self._container(pod, request.query)
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            raise errors.bad_request(
                "cannot exec into a container in a completed pod; current phase is "
                f"{pod['status']['phase']}"
            )
        base = self._kubelet(pod)
        keys = ("command", "stdin", "stdout", "stderr", "tty")
        params = [(k, v) for k, v in request.query.items() if k in keys]
        url = f"{base}/exec/{namespace}/{name}/{container}?" + urlencode(params)
        downstream = web.WebSocketResponse(protocols=EXEC_PROTOCOLS, max_msg_size=0)
        if not downstream.can_prepare(request).ok:
            raise errors.bad_request(
                "exec needs a WebSocket upgrade to v5.channel.k8s.io or v4.channel.k8s.io"
            )
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        wanted = [p for p in EXEC_PROTOCOLS if p in offered] or list(EXEC_PROTOCOLS)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                upstream = await session.ws_connect(
                    url, protocols=wanted, ssl=self._tls or False, max_msg_size=0
                )
            except (aiohttp.ClientError, aiohttp.WSServerHandshakeError) as err:
                raise errors.internal(f"unable to upgrade connection: {err}") from None
            async with upstream:
                downstream = web.WebSocketResponse(
                    protocols=[upstream.protocol] if upstream.protocol else wanted,
                    max_msg_size=0,
                )
                await downstream.prepare(request)
                await _relay(downstream, upstream)
        return downstream


async def _relay(downstream: web.WebSocketResponse, upstream: Any) -> None:
    """Both directions until either side closes."""

    async def forward(source: Any, sink: Any) -> None:
        async for message in source:
            if message.type == WSMsgType.BINARY:
                await sink.send_bytes(message.data)
            elif message.type == WSMsgType.TEXT:
                await sink.send_str(message.data)
            else:
                break
        with contextlib.suppress(Exception):
            await sink.close()

    tasks = [
        asyncio.create_task(forward(upstream, downstream)),
        asyncio.create_task(forward(downstream, upstream)),
    ]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    # The kubelet's side ends the session (after the exit status); drain what the
    # client still had in flight, then stop.
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    for task in done:
        with contextlib.suppress(Exception):
            task.result()
