"""Run the emulator on its own event loop in a background thread.

Tests and the synchronous `kubernetes` client live on the main thread; the server keeps
its single event loop in a thread of its own, so a blocking client call never stalls it.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import ssl
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from sim.apiserver.control import operate
from sim.apiserver.kubeconfig import write_kubeconfig
from sim.apiserver.server import ApiServer

T = TypeVar("T")


@functools.cache
def _default_root_ca() -> str:
    """A CA of this process for emulators started without one: every namespace still has
    its kube-root-ca.crt, as on any cluster (kubelets mount it into pods)."""
    from sim.controlplane.pki import ClusterPKI

    directory = Path(tempfile.mkdtemp(prefix="emulator-ca-"))
    try:
        return ClusterPKI(directory).ca_pem.decode()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class ServerThread:
    """An `ApiServer` serving on 127.0.0.1 from a daemon thread."""

    def __init__(self, **server_kwargs: Any) -> None:
        server_kwargs.setdefault("root_ca_pem", _default_root_ca())
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="apiserver", daemon=True
        )
        self._thread.start()
        self.server: ApiServer = self.call(lambda: ApiServer(**server_kwargs))
        self._running = False
        self._tls: ssl.SSLContext | None = None

    def call(self, fn: Callable[[], T], timeout: float = 30) -> T:
        """Run `fn` on the server's loop (the store is not thread-safe) and return its result."""

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def op(self, operation: str, /, **args: Any) -> Any:
        """`sim.apiserver.control.operate` on the server's loop (as `ServerProcess.op`)."""
        return self.call(lambda: operate(self.server, operation, args))

    @property
    def tls_port(self) -> int:
        return self.server.tls_port

    def run(self, coro: Any, timeout: float = 30) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    def start(self, port: int = 0, tls: ssl.SSLContext | None = None) -> ServerThread:
        self._tls = tls
        self.run(self.server.start(port=port, tls=tls))
        self._running = True
        return self

    def stop(self) -> None:
        if self._running:
            self.run(self.server.stop())
            self._running = False

    def restart(self) -> None:
        """Stop and start again on the same port; the objects survive, open watches do not."""
        port = self.server.port
        self.stop()
        self.start(port, self._tls)

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    @property
    def url(self) -> str:
        return self.server.url

    def write_kubeconfig(self, path: Path, token: str | None = None) -> Path:
        return write_kubeconfig(path, self.url, token=token)

    def api_client(self, token: str | None = None) -> Any:
        """A real `kubernetes.client.ApiClient` pointed at this server."""
        from kubernetes import client

        config = client.Configuration()
        config.host = self.url
        if token:
            config.api_key = {"authorization": token}
            config.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(config)
