"""Prometheus metrics of the kubelet plugin, in a registry of its own (no globals), served
over HTTP when `--http-endpoint` is set."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from api import names
from runtime.listen import Setting, binding

BUCKETS = tuple(0.05 * 2**k for k in range(9))
HTTP_SETTING = Setting("--http-endpoint", names.ENV_HTTP_ENDPOINT,
                       "kubeletPlugin.metrics.computeDomainHttpEndpoint")


class PluginMetrics:
    def __init__(self, node_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._node = node_name
        self.requests = Counter("nvidia_dra_requests_total", "Prepare/Unprepare requests",
                                ["driver", "operation"], registry=self.registry)
        self.duration = Histogram("nvidia_dra_request_duration_seconds",
                                  "Prepare/Unprepare request duration", ["driver", "operation"],
                                  buckets=BUCKETS, registry=self.registry)
        self.inflight = Gauge("nvidia_dra_requests_inflight", "requests being served",
                              ["driver", "operation"], registry=self.registry)
        self.prepared = Gauge("nvidia_dra_prepared_devices", "devices of prepared claims",
                              ["node", "driver", "device_type"], registry=self.registry)
        self.prepare_errors = Counter("nvidia_dra_node_prepare_errors_total",
                                      "per-claim Prepare errors", ["driver", "error_type"],
                                      registry=self.registry)
        self.unprepare_errors = Counter("nvidia_dra_node_unprepare_errors_total",
                                        "per-claim Unprepare errors", ["driver", "error_type"],
                                        registry=self.registry)

    @contextmanager
    def request(self, operation: str) -> Iterator[None]:
        labels = (names.DRIVER_NAME, operation)
        self.requests.labels(*labels).inc()
        self.inflight.labels(*labels).inc()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.inflight.labels(*labels).dec()
            self.duration.labels(*labels).observe(time.perf_counter() - start)

    def set_prepared(self, counts: dict[str, int]) -> None:
        for kind in (names.DEVICE_TYPE_CHANNEL, names.DEVICE_TYPE_DAEMON):
            self.prepared.labels(self._node, names.DRIVER_NAME, kind).set(counts.get(kind, 0))


class MetricsServer:
    """`path` served from `endpoint` by prometheus_client's WSGI app on a stdlib server in a
    thread of its own; any other path is 404.

    Not aiohttp: it is the node agent's only HTTP server, and loading aiohttp for it costs
    the agent about 7 MiB of its idle footprint (tests/bench/bench_prepare.py serves metrics
    as the chart does). A scrape reads the registry, which prometheus_client makes safe
    across threads."""

    def __init__(self, metrics: PluginMetrics, endpoint: str, path: str) -> None:
        self._metrics = metrics
        self._endpoint = endpoint
        host, _, port = endpoint.rpartition(":")
        self._host = host.strip("[]") or "0.0.0.0"
        self._port = int(port)
        self._path = "/" + path.lstrip("/")
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port = -1

    async def start(self) -> None:
        metrics_app = make_wsgi_app(self._metrics.registry)
        path = self._path

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") != path:
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [b"not found\n"]
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]

        server_class = _IPv6Server if ":" in self._host else WSGIServer
        with binding(self._endpoint, HTTP_SETTING):
            self._server = make_server(self._host, self._port, app,
                                       server_class=server_class, handler_class=_QuietHandler)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics",
                                        daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(server.shutdown)
            server.server_close()


class _IPv6Server(WSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape on stderr (the agent logs through `logging`)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass
