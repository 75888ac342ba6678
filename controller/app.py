"""`compute-domain-controller`: caches, the work queue, leader election, HTTP endpoints.

Every cache change enqueues the UID of the ComputeDomain it concerns; one reconcile per
UID runs at a time, different UIDs concurrently. Nothing is polled except a slow resync
(`--resync-interval`) that also sweeps objects of ComputeDomains that no longer exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from kubernetes import client
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from api import names
from controller.caches import Caches
from controller.config import ControllerConfig
from controller.events import EventRecorder
from controller.leader import LeaderElector
from controller.reconcile import Reconciler, RetryError
from controller.workqueue import KeyedQueue
from runtime import kubecall, stackdump
from runtime.draclient import ResourceApiError, discover
from runtime.listen import ListenError, Setting, binding

log = logging.getLogger(__name__)
HTTP_SETTING = Setting("--http-endpoint", names.ENV_HTTP_ENDPOINT,
                       "controller.metrics.httpEndpoint")


class _DomainsByStatus(Collector):
    """`nvidia_dra_compute_domain_info{status}` computed from the cache at scrape time, so
    it is right after a restart (the reference only counted what it had written)."""

    def __init__(self, app: ControllerApp) -> None:
        self._app = app

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("nvidia_dra_compute_domain_info",
                                   "ComputeDomains by status", labels=["status"])
        counts = {names.STATUS_READY: 0, names.STATUS_NOT_READY: 0}
        reconciler = self._app.reconciler
        for cd in (reconciler.domains() if reconciler else ()):
            state = (cd.status.status if cd.status else None) or names.STATUS_NOT_READY
            counts[state] = counts.get(state, 0) + 1
        for state, count in sorted(counts.items()):
            family.add_metric([state], count)
        yield family


class ControllerApp:
    def __init__(self, config: ControllerConfig, api_client: client.ApiClient | None = None
                 ) -> None:
        self.config = config
        self.api = api_client or kubecall.api_client(config.kubeconfig)
        self.caches: Caches | None = None
        self.queue: KeyedQueue | None = None
        self.reconciler: Reconciler | None = None
        self.leading = asyncio.Event()
        self.registry = CollectorRegistry()
        self._reconciles = Counter("compute_domain_reconciles_total", "reconciles by result",
                                   ["result"], registry=self.registry)
        self._latency = Histogram("compute_domain_reconcile_duration_seconds",
                                  "reconcile duration", registry=self.registry)
        self._depth = Gauge("compute_domain_workqueue_depth", "queued ComputeDomains",
                            registry=self.registry)
        self._depth.set_function(lambda: self.queue.depth if self.queue else 0)
        self.registry.register(_DomainsByStatus(self))
        self._http: web.AppRunner | None = None
        self.http_port = -1
        self._resync: asyncio.Task[None] | None = None

    # --- the controller proper (runs while leading) ------------------------------------

    async def run_controller(self) -> None:
        cfg = self.config
        self.queue = KeyedQueue(self._reconcile, workers=cfg.workers, base_delay=0.2,
                                max_delay=30.0, on_result=self._observe, name="computedomains")
        log.info("controller manager config: %s", cfg.manager_config())
        dra = await discover(self.api, cfg.resource_api_version)
        log.info("speaking %s", dra.api_version)
        self.caches = Caches(self.api, dra, driver_managed=not cfg.host_managed,
                             cliques=cfg.cliques, enqueue=self.queue.add)
        events = EventRecorder(self.api, cfg.pod_name)
        self.reconciler = Reconciler(self.api, dra, cfg, self.caches, events,
                                     requeue_after=self.queue.add_after,
                                     status_interval=cfg.status_interval_s)
        self.caches.start()
        try:
            await self.caches.wait_synced(60)
            self.queue.start()
            self.leading.set()
            log.info("controller running (%s, driver namespace %s)",
                     cfg.imex.effective_mode, cfg.namespace)
            self._resync = asyncio.get_running_loop().create_task(self._resync_loop())
            await asyncio.Event().wait()  # until cancelled
        finally:
            self.leading.clear()
            self.caches.stop()  # first: nothing below may keep the watch threads alive
            if self._resync is not None:
                self._resync.cancel()
            await self.queue.stop()

    async def _reconcile(self, uid: str) -> None:
        assert self.reconciler is not None
        await self.reconciler.reconcile(uid)

    def _observe(self, key: str, seconds: float, error: BaseException | None) -> None:
        self._latency.observe(seconds)
        if error is None:
            self._reconciles.labels("success").inc()
        elif isinstance(error, RetryError):
            self._reconciles.labels("requeued").inc()
            log.debug("reconcile %s: %s", key, error)
        else:
            self._reconciles.labels("error").inc()
            log.warning("reconcile %s failed: %r", key, error)

    async def _resync_loop(self) -> None:
        assert self.reconciler is not None and self.queue is not None
        while True:
            for uid in sorted(self.reconciler.referenced_uids()):
                self.queue.add(uid)
            await asyncio.sleep(self.config.resync_s)

    # --- process -----------------------------------------------------------------------

    async def serve_http(self) -> None:
        if not self.config.http_endpoint:
            return
        app = web.Application()

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=generate_latest(self.registry),
                                headers={"Content-Type": CONTENT_TYPE_LATEST})

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(_: web.Request) -> web.Response:
            synced = self.caches is not None and all(i.synced.is_set()
                                                      for i in self.caches.all)
            if self.config.leader_election and not self.leading.is_set():
                return web.Response(text="standby", status=200)
            return web.Response(text="ok" if synced else "caches not synced",
                                status=200 if synced else 503)

        if self.config.metrics_path:
            app.router.add_get("/" + self.config.metrics_path.lstrip("/"), metrics)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        self._http = web.AppRunner(app, access_log=None)
        await self._http.setup()
        host, _, port = self.config.http_endpoint.rpartition(":")
        site = web.TCPSite(self._http, host or "0.0.0.0", int(port))
        with binding(self.config.http_endpoint, HTTP_SETTING):
            await site.start()
        self.http_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def run(self, stop: asyncio.Event) -> int:
        try:
            await self.serve_http()
            if not self.config.leader_election:
                task: asyncio.Future[Any] = asyncio.ensure_future(self.run_controller())
                await _until(stop, task)
                return 0
            elector = LeaderElector(
                self.api, name=self.config.lease_name, namespace=self.config.lease_namespace,
                identity=f"{self.config.pod_name}-{uuid.uuid4()}",
                lease_duration=self.config.lease_duration_s,
                renew_deadline=self.config.renew_deadline_s,
                retry_period=self.config.retry_period_s)
            task = asyncio.ensure_future(elector.run(self.run_controller))
            await _until(stop, task)
            return 0
        finally:
            if self._http is not None:
                await self._http.cleanup()


async def _until(stop: asyncio.Event, task: asyncio.Future[Any]) -> None:
    """Run `task` until it ends or `stop` is set; then cancel it and wait. Also when we are
    cancelled ourselves: the task's finally-blocks (informer threads stopped, Lease
    released) must run before we return, never be left to the garbage collector."""
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, waiter):
            t.cancel()
        for t in (task, waiter):
            with contextlib.suppress(asyncio.CancelledError):
                await t
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


async def main(config: ControllerConfig) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stackdump.install(loop)
    started = time.monotonic()
    try:
        code = await ControllerApp(config).run(stop)
    except (ResourceApiError, ListenError) as err:
        log.error("%s", err)
        return 1
    log.info("stopped after %.0fs", time.monotonic() - started)
    return code
