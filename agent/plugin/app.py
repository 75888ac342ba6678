"""`compute-domain-agent plugin`: start-up order, the running services, graceful stop.

Start-up follows the reference's order (main.go and `NewDriver` in driver.go of
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/tree/main/cmd/compute-domain-kubelet-plugin):
validate, discover the node, write the base CDI spec, open the checkpoint, sync the caches,
serve DRA, then register with kubelet, then publish the ResourceSlice. Any failure before
serving is one line that says what to fix, and the process exits non-zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import platform
import signal
import sys
from pathlib import Path
from typing import Any

from agent.checkpoint import (
    BootIdError,
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    read_boot_id,
)
from agent.discovery import nvlink_clique as clique_mod
from agent.discovery.capability import read_fabric_imex_mgmt
from agent.discovery.channels import ImexChannels
from agent.discovery.discovery_error import DiscoveryError
from agent.discovery.driverversion import require_dns_names_driver
from agent.discovery.findfile import (
    BINARY_SEARCH_DIRS,
    dev_root,
    find_file,
    find_nvml_library,
)
from agent.discovery.nvml import FixtureSource, NvmlSource, PynvmlSource
from agent.discovery.single_node import is_single_node_nvlink
from agent.plugin.cdi_edits import CdiEdits
from agent.plugin.cluster import ClusterView
from agent.plugin.config import PluginConfig
from agent.plugin.driver import Driver, DriverSettings
from agent.plugin.grpcserver import KubeletServers
from agent.plugin.health import HealthServer
from agent.plugin.imexhost import ImexHooks, ImexHost, ImexHostSettings
from agent.plugin.maintenance import Maintenance
from agent.plugin.metrics import MetricsServer, PluginMetrics
from agent.plugin.nodelabels import NodeLabelKeeper
from agent.plugin.nodelock import NodeLock
from agent.plugin.slices import SlicePublisher
from agent.templates import imexd_template
from api import featuregates, names
from api.objects import K8sObject, ParsedCache
from api.version import version_line
from cdi.atomic import make_dirs
from runtime import kubecall, stackdump
from runtime.draclient import DraApi, ResourceApiError, discover
from runtime.events import EventRecorder
from runtime.listen import ListenError

log = logging.getLogger(__name__)


class StartupError(Exception):
    """A fatal start-up problem; the message is what the admin needs to fix."""


class PluginApp:
    def __init__(self, config: PluginConfig, api_client: Any | None = None,
                 imex_hooks: ImexHooks | None = None) -> None:
        self.config = config
        self._api = api_client
        self._imex_hooks = imex_hooks
        self.imex: ImexHost | None = None
        self.servers: KubeletServers | None = None
        self.cluster: ClusterView | None = None
        self.driver: Driver | None = None
        self.slices: SlicePublisher | None = None
        self.dra: DraApi | None = None
        self.clique: clique_mod.CliqueTracker | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.ready = asyncio.Event()
        self.metrics: PluginMetrics | None = None
        self.health: HealthServer | None = None
        self.metrics_server: MetricsServer | None = None
        self.events: EventRecorder | None = None
        self.labels: NodeLabelKeeper | None = None
        self._closing: asyncio.Future[Any] | None = None
        self._closing_kubelet: asyncio.Future[Any] | None = None

    # --- start -----------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        try:
            await self._start()
        except (DiscoveryError, CheckpointError, BootIdError, OSError) as err:
            raise StartupError(str(err)) from None
        log.info("compute-domain kubelet plugin ready on node %s (%s)", cfg.node_name,
                 cfg.imex.effective_mode)
        self.ready.set()

    async def _start(self) -> None:
        cfg = self.config
        # Each missing level with an explicit mode: parents=True would follow the umask.
        make_dirs(cfg.plugin_dir, 0o750)
        if cfg.cdi_root.exists() and not cfg.cdi_root.is_dir():
            raise StartupError(f"--cdi-root {cfg.cdi_root} exists but is not a directory")
        make_dirs(cfg.cdi_root, 0o750)
        channels = ImexChannels.from_proc_devices(cfg.proc_devices)
        source = _nvml_source(cfg)
        fm = cfg.gates.enabled(featuregates.FABRIC_MANAGER_PARTITIONING)
        self.clique = tracker = clique_mod.CliqueTracker.start(functools.partial(
            clique_mod.clique_id, source,
            strict=cfg.gates.enabled(featuregates.CRASH_ON_NVLINK_FABRIC_ERRORS),
            fm_partitioning=fm,
            single_node_nvlink=fm and is_single_node_nvlink(dev_root(cfg.container_driver_root))))
        if not cfg.host_managed and cfg.gates.enabled(featuregates.IMEX_DAEMONS_WITH_DNS_NAMES):
            require_dns_names_driver(await asyncio.to_thread(source.driver_version))
        log.info("NVLink clique of node %s: %r", cfg.node_name, self.clique.value or "(none)")
        edits = CdiEdits(cfg, channels, cap_reader=lambda: read_fabric_imex_mgmt(
            cfg.fabric_imex_mgmt, cfg.proc_devices))
        edits.write_base_spec()
        store = CheckpointStore(cfg.checkpoint_path)
        checkpoint = store.reconcile_boot_id(read_boot_id(cfg.boot_id_file))
        if self._api is None:
            self._api = kubecall.api_client(cfg.kubeconfig)
        try:
            dra = await discover(self._api, cfg.resource_api_version)
        except ResourceApiError as err:
            raise StartupError(str(err)) from None
        self.dra = dra
        log.info("speaking %s", dra.api_version)
        self.cluster = ClusterView(self._api, dra, cfg.node_name, cfg.namespace,
                                   cliques_enabled=cfg.gates.enabled(
                                       featuregates.COMPUTE_DOMAIN_CLIQUES))
        self.cluster.start()
        try:
            await self.cluster.wait_synced(60)
        except TimeoutError:
            raise StartupError(
                "could not watch this Node and list ComputeDomains within 60s: check "
                "--kubeconfig / the API server address and that the CRDs are installed "
                "(kubectl get crd computedomains.resource.nvidia.com)") from None
        if cfg.gpu_clique_label and self.clique.value:
            await self.cluster.node.set_clique_label(self.clique.value)
        if cfg.agent_placement:
            self.imex = self._imex_host(self.cluster)
        settings = DriverSettings(
            node_name=cfg.node_name, host_managed=cfg.host_managed,
            prepare_window_s=cfg.prepare_window_s, domains_dir=cfg.domains_dir,
            imexd_template=imexd_template(), clique_id=lambda: tracker.value,
            host_probe=edits.host_probe() if cfg.host_managed else None,
            namespace=cfg.namespace, imex_host=self.imex)
        self.metrics = PluginMetrics(cfg.node_name)
        self.metrics.set_prepared(checkpoint.prepared_device_counts())
        # Why a Prepare waits or failed, on the claim's pods (`kubectl describe pod`). One
        # Prepare can write for several pods and claims at once: more writes in flight.
        self.events = EventRecorder(self._api, names.EVENT_COMPONENT_PLUGIN, cfg.node_name,
                                    max_in_flight=16)
        lock = NodeLock(cfg.lock_path)
        self.driver = Driver(settings, self.cluster, edits, store, checkpoint, lock,
                             self.metrics, self.events)
        driver, clique = self.driver, self.clique
        domains = self.cluster.domains
        assert clique is not None
        self.labels = NodeLabelKeeper(
            self.cluster.node, self.cluster.node_object, cfg.node_name, lock.held,
            lambda: driver.checkpoint, domains.maybe_live, refresh_live=domains.refresh,
            host_managed=cfg.host_managed,
            clique_id=(lambda: clique.value) if cfg.gpu_clique_label else None)
        self.maintenance = Maintenance(
            self.driver, self.cluster.node.claim_exists,
            lambda uid: domains.get(uid) is not None, cfg.domains_dir, domains.refresh,
            imex=self.imex)
        if self.imex is not None:
            await self.imex.resume(checkpoint, domains.lookup, clique.value)
        await self.maintenance.run_once()
        self.servers = KubeletServers(self.driver, cfg.dra_socket, cfg.registration_socket)
        await self.servers.start()
        if cfg.healthcheck_port >= 0:
            self.health = HealthServer(cfg.healthcheck_port, cfg.registration_socket,
                                       cfg.dra_socket, address=cfg.healthcheck_address)
            await self.health.start()
        if cfg.http_endpoint and cfg.metrics_path:
            self.metrics_server = MetricsServer(self.metrics, cfg.http_endpoint,
                                                cfg.metrics_path)
            await self.metrics_server.start()
        self.slices = SlicePublisher(self._api, dra, cfg.node_name, host_managed=cfg.host_managed)
        try:
            await self.slices.reconcile()
        except Exception as err:  # the background loop keeps trying
            log.warning("publishing the ResourceSlice failed (will retry): %s",
                        kubecall.error_text(err))
        self.slices.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._refresh_clique()))
        self._tasks.append(loop.create_task(self._periodic_cleanup()))
        self._tasks.append(loop.create_task(self.labels.run(), name="node-labels"))
        if self.imex is not None:
            self._tasks.append(loop.create_task(self._release_unlabeled(), name="imex-labels"))

    def _imex_host(self, cluster: ClusterView) -> ImexHost:
        """Agent placement: the supervision of this node's nvidia-imex children."""
        cfg = self.config
        root = cfg.container_driver_root
        domains = cluster.domains

        async def wanted(uid: str) -> bool:
            try:
                await domains.refresh([uid])
            except Exception as err:  # the API is unreachable: keep IMEX as it is
                log.info("cannot read ComputeDomain %s (%s): keeping its nvidia-imex", uid,
                         kubecall.error_text(err))
                return True
            return domains.live(uid)

        settings = ImexHostSettings(
            node_name=cfg.node_name, namespace=cfg.namespace, address=cfg.imex_address,
            domains_dir=cfg.domains_dir, hosts_file=cfg.imex_hosts_file,
            imex_binary=cfg.imex_binary or _in_root(root, names.IMEX_BINARY),
            imex_ctl_binary=cfg.imex_ctl_binary or _in_root(root, names.IMEX_CTL_BINARY),
            max_nodes=cfg.max_nodes_per_imex_domain,
            dns_names=cfg.gates.enabled(featuregates.IMEX_DAEMONS_WITH_DNS_NAMES),
            cliques=cfg.gates.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES),
            poll_s=cfg.imex_poll_s, reload_s=cfg.imex_reload_s,
            not_ready_event_after=cfg.imex_not_ready_event_after_s, template=imexd_template())
        log.info("agent placement: nvidia-imex %s on %s", settings.imex_binary, cfg.imex_address)
        assert self._api is not None
        return ImexHost(self._api, settings, notify=cluster.changed, domain_wanted=wanted,
                        hooks=self._imex_hooks)

    async def _release_unlabeled(self) -> None:
        """Agent placement: when this node loses a supervised domain's label (the
        controller removes it from every node of a domain being deleted), read the domain
        and stop its IMEX if it is going away; a label an admin removed by mistake is put
        back by the label keeper instead."""
        assert self.imex is not None and self.cluster is not None
        node = self.cluster.node_object
        parsed = ParsedCache(K8sObject)
        await node.synced.wait()
        while True:
            since = node.version
            obj = parsed.get(node.items, self.config.node_name)
            label = obj.label(names.LABEL_COMPUTE_DOMAIN) if obj is not None else None
            lost = [uid for uid in self.imex.domains if uid != label]
            if lost:
                try:
                    await self.imex.release_unwanted(lost)
                except Exception:
                    log.exception("releasing nvidia-imex of deleted domains failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(60.0):
                    await node.changed(since)

    async def _refresh_clique(self) -> None:
        assert self.clique is not None and self.cluster is not None
        while True:
            await asyncio.sleep(self.config.clique_refresh_s)
            await asyncio.to_thread(self.clique.refresh)
            if self.config.gpu_clique_label and self.clique.value:
                with contextlib.suppress(Exception):
                    await self.cluster.node.set_clique_label(self.clique.value)

    async def _periodic_cleanup(self) -> None:
        while True:
            await asyncio.sleep(self.config.cleanup_interval_s)
            try:
                await self.maintenance.run_once()
            except Exception:
                log.exception("periodic cleanup failed")

    # --- stop ------------------------------------------------------------------------

    async def stop(self) -> None:
        """Close everything; a stop cut short (cancelled: the in-process sim's SIGKILL)
        still ends every loop and watch thread of this agent, in the `finally`."""
        try:
            await self._stop()
        finally:
            if self.imex is not None:  # nvidia-imex keeps running for the next agent
                await _through_cancel(asyncio.ensure_future(self.imex.detach_all()))
            for task in self._tasks:
                task.cancel()
            if self.slices is not None:
                self.slices.cancel()
            if self.cluster is not None:
                self.cluster.stop()
            # Not even a cancel may leave a socket open: the next agent on this node binds
            # the same ports.
            await _through_cancel(self._closing_listeners())
            await _through_cancel(self._closing_kubelet_servers())

    def _closing_listeners(self) -> asyncio.Future[Any]:
        """The health and metrics servers' stop, started once, as a task of its own: a
        cancelled stop does not cut it short."""
        if self._closing is None:
            servers = [s for s in (self.health, self.metrics_server) if s is not None]
            self._closing = asyncio.ensure_future(asyncio.gather(*(s.stop() for s in servers)))
        return self._closing

    def _closing_kubelet_servers(self) -> asyncio.Future[Any]:
        """The kubelet's gRPC servers' stop, started once (as `_closing_listeners`)."""
        if self._closing_kubelet is None:
            servers = self.servers
            self._closing_kubelet = asyncio.ensure_future(
                servers.stop() if servers is not None else asyncio.sleep(0))
        return self._closing_kubelet

    async def _stop(self) -> None:
        await asyncio.shield(self._closing_listeners())  # the listening ports first
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.shield(self._closing_kubelet_servers())
        if self.events is not None:  # after the last Prepare: flush its Events
            await self.events.close()
        if self.slices is not None:
            await self.slices.stop()
        clique = self.clique
        if self.cluster is not None and self.config.gpu_clique_label and clique and clique.value:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await self.cluster.node.set_clique_label(None)
        log.info("shutdown")


async def _through_cancel(future: asyncio.Future[Any]) -> None:
    """Wait for `future` to finish even if this task is cancelled meanwhile; the cancel
    is raised afterwards."""
    cancelled = False
    while True:
        try:
            await asyncio.shield(future)
            break
        except asyncio.CancelledError:
            if future.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


def _in_root(root: Path, name: str) -> str:
    """A binary of the host driver installation, as this process reaches it (not resolved:
    its name is what the stray search and the in-process sim go by)."""
    found = find_file(root, name, BINARY_SEARCH_DIRS)
    if found is None:
        raise StartupError(f"agent placement: {name} not found in the driver root {root} "
                           f"(looked in {', '.join(BINARY_SEARCH_DIRS)}); set --imex / "
                           "--imex-ctl, or install the NVIDIA driver with IMEX")
    return str(root / found.path.lstrip("/"))


def _nvml_source(cfg: PluginConfig) -> NvmlSource:
    if cfg.nvml_source.startswith("fixture:"):
        return FixtureSource(Path(cfg.nvml_source.removeprefix("fixture:")))
    return PynvmlSource(find_nvml_library(cfg.container_driver_root))


async def run(
    config: PluginConfig, stop: asyncio.Event | None = None, api_client: Any | None = None,
    imex_hooks: ImexHooks | None = None,
) -> int:
    """The agent until a stop signal; the exit status. With `stop` given, until it is set
    and no signal handlers are installed (many agents in one process: the simulated cluster)."""
    frozen = getattr(sys, "frozen", False)
    build = "single-file binary" if frozen else f"Python {platform.python_version()}"
    log.info("%s starting on node %s (%s, pid %d)", version_line("compute-domain-agent plugin"),
             config.node_name, build, os.getpid())
    app = PluginApp(config, api_client, imex_hooks)
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
            loop.add_signal_handler(sig, stop.set)
        stackdump.install(loop)
    # Cleanup in `finally`: an in-process agent that does not stop within the kubelet's
    # grace period is cancelled (sim/cluster/inprocess.py), often still starting, and its
    # listening sockets must close with it, or the next instance cannot bind its ports.
    try:
        try:
            await app.start()
        except (StartupError, ListenError) as err:
            log.error("%s", err)
            return 1
        await stop.wait()
        return 0
    finally:
        await app.stop()


def checkpoint_summary(cp: Checkpoint) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in cp.claims.values():
        counts[entry.state] = counts.get(entry.state, 0) + 1
    return counts
