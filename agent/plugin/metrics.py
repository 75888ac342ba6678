"""Prometheus metrics of the kubelet plugin, in a registry of its own (no globals), served
over HTTP when `--http-endpoint` is set."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from api import names

BUCKETS = tuple(0.05 * 2**k for k in range(9))


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

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    def __init__(self, metrics: PluginMetrics, endpoint: str, path: str) -> None:
        self._metrics = metrics
        host, _, port = endpoint.rpartition(":")
        self._host = host or "0.0.0.0"
        self._port = int(port)
        self._path = "/" + path.lstrip("/")
        self._runner: web.AppRunner | None = None
        self.port = -1

    async def start(self) -> None:
        app = web.Application()

        async def handle(_: web.Request) -> web.Response:
            return web.Response(body=self._metrics.render(),
                                headers={"Content-Type": CONTENT_TYPE_LATEST})
        app.router.add_get(self._path, handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
