"""`compute-domain-agent plugin` flags and env vars, validated into one config object.

Every host path is a flag with an env var so the same binary runs as a DaemonSet, as a
systemd unit, and many times over in the simulated cluster against directories of its own.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.daemon.identity import is_peer_address
from api import names
from api.featuregates import FeatureGates
from api.imex import ImexConfig
from api.validation_error import ValidationError
from runtime.cli import (
    add_imex_placement_flag,
    add_kube_client_flags,
    add_resource_api_flag,
    env_option,
    parse_bool,
    parse_duration,
)

UNIX_PATH_MAX = 107  # sun_path is 108 bytes including the terminating NUL


@dataclass(frozen=True)
class PluginConfig:
    node_name: str
    namespace: str
    kubeconfig: str
    cdi_root: Path
    host_driver_root: Path
    container_driver_root: Path
    nvidia_cdi_hook_path: str
    registrar_dir: Path
    plugins_dir: Path
    healthcheck_port: int
    healthcheck_address: str
    http_endpoint: str
    metrics_path: str
    gpu_clique_label: bool
    imex: ImexConfig
    imex_host_socket_path: str
    imex_ctl_chroot: bool
    gates: FeatureGates
    proc_devices: Path
    fabric_imex_mgmt: Path
    boot_id_file: Path
    nvml_source: str
    prepare_window_s: float
    clique_refresh_s: float
    cleanup_interval_s: float
    resource_api_version: str = ""
    imex_placement: str = names.PLACEMENT_POD
    # Agent placement only: the address nvidia-imex listens on (the pod IP), its binaries
    # ("" : found in the driver root), the hosts file the peer names go to, the limits.
    imex_address: str = ""
    imex_binary: str = ""
    imex_ctl_binary: str = ""
    imex_hosts_file: Path = Path(names.DEFAULT_HOSTS_FILE)
    max_nodes_per_imex_domain: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    imex_poll_s: float = 1.0
    imex_reload_s: float = 5.0
    imex_not_ready_event_after_s: float = 60.0

    @property
    def plugin_dir(self) -> Path:
        return self.plugins_dir / names.DRIVER_NAME

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / names.DRA_SOCKET_NAME

    @property
    def registration_socket(self) -> Path:
        return self.registrar_dir / names.REGISTRATION_SOCKET_NAME

    @property
    def checkpoint_path(self) -> Path:
        return self.plugin_dir / names.CHECKPOINT_FILE

    @property
    def lock_path(self) -> Path:
        return self.plugin_dir / names.PREPARE_LOCK_FILE

    @property
    def domains_dir(self) -> Path:
        return self.plugin_dir / names.DOMAINS_DIR

    @property
    def host_managed(self) -> bool:
        return self.imex.host_managed

    @property
    def agent_placement(self) -> bool:
        """The agent itself supervises nvidia-imex for its node's domains."""
        return not self.host_managed and self.imex_placement == names.PLACEMENT_AGENT


def add_plugin_flags(
    parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None
) -> None:
    """The agent's flags; their env-var defaults are read from `environ` (None: os.environ),
    so an agent run in-process (the simulated cluster at scale) gets its own env."""
    option = functools.partial(env_option, environ=environ)
    opt = parser.add_argument_group("node and cluster")
    option(opt, "--node-name", env=names.ENV_NODE_NAME, required=True,
           help="the node this agent serves; also the ResourceSlice pool name")
    option(opt, "--namespace", env=names.ENV_NAMESPACE, default="default",
           help="the driver namespace, where ComputeDomainCliques live")
    add_kube_client_flags(opt, option)
    option(opt, "--feature-gates", env=names.ENV_FEATURE_GATES, default="",
           help="Name=bool,Name=bool")
    add_resource_api_flag(opt, option)
    paths = parser.add_argument_group("host paths")
    option(paths, "--cdi-root", env=names.ENV_CDI_ROOT, type=Path,
           default=Path(names.DEFAULT_CDI_ROOT), help="directory for generated CDI specs")
    option(paths, "--nvidia-driver-root", "--host-driver-root",
           env=(names.ENV_NVIDIA_DRIVER_ROOT, names.ENV_HOST_DRIVER_ROOT), type=Path,
           default=Path(names.DEFAULT_HOST_DRIVER_ROOT),
           help="the NVIDIA driver root as the host sees it (/ or /run/nvidia/driver)")
    option(paths, "--container-driver-root", env=names.ENV_CONTAINER_DRIVER_ROOT, type=Path,
           default=Path(names.DEFAULT_CONTAINER_DRIVER_ROOT),
           help="where the host driver root is visible to this process")
    option(paths, "--nvidia-cdi-hook-path", env=names.ENV_NVIDIA_CDI_HOOK_PATH, default="",
           help="host path of nvidia-cdi-hook for the base CDI spec")
    option(paths, "--kubelet-registrar-directory-path",
           env=names.ENV_KUBELET_REGISTRAR_DIRECTORY_PATH, type=Path,
           default=Path(names.KUBELET_REGISTRY_DIR), help="kubelet's plugin registry dir")
    option(paths, "--kubelet-plugins-directory-path",
           env=names.ENV_KUBELET_PLUGINS_DIRECTORY_PATH, type=Path,
           default=Path(names.KUBELET_PLUGINS_DIR), help="kubelet's plugins dir")
    option(paths, "--proc-devices-path", env=("PROC_DEVICES_PATH",
                                              names.ENV_ALT_PROC_DEVICES_PATH),
           type=Path, default=Path(names.DEFAULT_PROC_DEVICES),
           help="the /proc/devices file to read device majors from")
    option(paths, "--fabric-imex-mgmt-path", env="FABRIC_IMEX_MGMT_PATH", type=Path,
           default=Path(names.FABRIC_IMEX_MGMT_CAPABILITY),
           help="the fabric-imex-mgmt capability file")
    option(paths, "--boot-id-path", env="BOOT_ID_PATH", type=Path,
           default=Path(names.DEFAULT_BOOT_ID_FILE), help="the kernel boot id file")
    option(paths, "--nvml-source", env="NVML_SOURCE", default="driver",
           help="'driver' (NVML from the driver root) or 'fixture:PATH' (simulated GPUs)")
    serve = parser.add_argument_group("serving")
    option(serve, "--healthcheck-port", env=names.ENV_HEALTHCHECK_PORT, type=int, default=-1,
           help="gRPC health port: >0 that port, 0 a free port, <0 disabled")
    option(serve, "--healthcheck-address", env=names.ENV_HEALTHCHECK_ADDRESS, default="",
           help="address the gRPC health server binds (the pod IP); empty: every address")
    option(serve, "--http-endpoint", env=names.ENV_HTTP_ENDPOINT, default="",
           help="host:port for Prometheus metrics; empty disables")
    option(serve, "--metrics-path", env=names.ENV_METRICS_PATH, default="/metrics",
           help="HTTP path of the metrics")
    option(serve, "--gpu-clique-label-enabled", env=names.ENV_GPU_CLIQUE_LABEL_ENABLED,
           type=parse_bool, default=False, help="own the nvidia.com/gpu.clique node label")
    option(serve, "--prepare-timeout", env="PREPARE_TIMEOUT", type=parse_duration,
           default=40.0, help="how long one Prepare call may wait for the node's IMEX "
           "daemon before kubelet is told to retry (kubelet gives up at 45s)")
    option(serve, "--clique-refresh-interval", env="CLIQUE_REFRESH_INTERVAL",
           type=parse_duration, default=600.0, help="how often to re-read the clique ID")
    option(serve, "--cleanup-interval", env="CLEANUP_INTERVAL", type=parse_duration,
           default=600.0, help="how often to clean stale claims, CDI files and domains")
    imex = parser.add_argument_group("IMEX")
    option(imex, "--imex-mode", env=names.ENV_IMEX_MODE, default="driverManaged",
           help="driverManaged or hostManaged")
    option(imex, "--imex-isolation", env=names.ENV_IMEX_ISOLATION, default="domain",
           help="domain (channel is not implemented)")
    option(imex, "--imex-host-socket-path", env=names.ENV_IMEX_HOST_SOCKET_PATH,
           default=names.DEFAULT_IMEX_HOST_SOCKET,
           help="host nvidia-imex command socket, inside the driver root (hostManaged)")
    option(imex, "--imex-ctl-chroot", env="IMEX_CTL_CHROOT", type=parse_bool, default=True,
           help="run nvidia-imex-ctl chrooted into the driver root (hostManaged)")
    add_imex_placement_flag(imex, option)
    option(imex, "--imex-address", env=names.ENV_IMEX_ADDRESS, default="",
           help="agent placement: the address nvidia-imex listens on and its peers reach "
           "(the pod IP in the DaemonSet; this node's address under systemd)")
    option(imex, "--imex", env="IMEX_BINARY", default="",
           help="agent placement: nvidia-imex to run; empty: found in the driver root")
    option(imex, "--imex-ctl", env="IMEX_CTL", default="",
           help="agent placement: nvidia-imex-ctl to query; empty: found in the driver root")
    option(imex, "--imex-hosts-file", env="IMEX_HOSTS_FILE", type=Path,
           default=Path(names.DEFAULT_HOSTS_FILE),
           help="agent placement: the hosts file that maps the IMEX peer names (the "
           "container's own /etc/hosts in the DaemonSet)")
    option(imex, "--max-nodes-per-imex-domain", env=names.ENV_MAX_NODES_PER_IMEX_DOMAIN,
           type=int, default=names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
           help="agent placement: nodes per IMEX domain (the controller's value)")
    option(imex, "--imex-poll-interval", env="IMEX_POLL_INTERVAL", type=parse_duration,
           default=1.0, help="agent placement: how often to ask nvidia-imex-ctl -q")
    option(imex, "--imex-reload-interval", env="IMEX_RELOAD_INTERVAL", type=parse_duration,
           default=5.0, help="agent placement: at most one SIGUSR1 to nvidia-imex per this long")
    option(imex, "--imex-not-ready-event-after", env="IMEX_NOT_READY_EVENT_AFTER",
           type=parse_duration, default=60.0, help="agent placement: record an "
           "IMEXDaemonNotReady Event on the Node once nvidia-imex has not been READY this "
           "long (0: never)")


def config_from_args(args: argparse.Namespace) -> PluginConfig:
    """Validate flags into a config; a ValidationError's message is the one-line fatal error."""
    gates = FeatureGates.parse(args.feature_gates)
    gates.validate()
    imex = ImexConfig(mode=args.imex_mode, isolation=args.imex_isolation)
    imex.validate(host_managed_gate=gates.enabled("HostManagedIMEXDaemon"))
    if imex.host_managed:
        gates = gates.with_values(IMEXDaemonsWithDNSNames=False, ComputeDomainCliques=False)
    if not args.node_name.strip():
        raise ValidationError("--node-name (NODE_NAME) is empty: set it to this node's name")
    if args.prepare_timeout <= 0 or args.prepare_timeout > 44:
        raise ValidationError(
            "--prepare-timeout must be between 0 and 44s so kubelet (45s) sees the answer")
    for flag, sock in (("--kubelet-plugins-directory-path", args.kubelet_plugins_directory_path
                        / names.DRIVER_NAME / names.DRA_SOCKET_NAME),
                       ("--kubelet-registrar-directory-path",
                        args.kubelet_registrar_directory_path / names.REGISTRATION_SOCKET_NAME)):
        if len(str(sock).encode()) > UNIX_PATH_MAX:
            raise ValidationError(
                f"socket path {sock} is {len(str(sock).encode())} bytes; unix sockets allow "
                f"at most {UNIX_PATH_MAX}: use a shorter {flag}")
    if args.http_endpoint:
        _, sep, port = args.http_endpoint.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535:
            raise ValidationError(f"--http-endpoint {args.http_endpoint!r} is not host:port "
                                  "(e.g. :8081 or 0.0.0.0:8081)")
    _check_placement(args, imex.host_managed)
    source = args.nvml_source
    if source != "driver" and not source.startswith("fixture:"):
        raise ValidationError(
            f"--nvml-source {source!r} is not valid: use 'driver' or 'fixture:/path/to/file.json'")
    return PluginConfig(
        node_name=args.node_name.strip(), namespace=args.namespace, kubeconfig=args.kubeconfig,
        cdi_root=args.cdi_root, host_driver_root=args.nvidia_driver_root,
        container_driver_root=args.container_driver_root,
        nvidia_cdi_hook_path=args.nvidia_cdi_hook_path,
        registrar_dir=args.kubelet_registrar_directory_path,
        plugins_dir=args.kubelet_plugins_directory_path,
        healthcheck_port=args.healthcheck_port,
        healthcheck_address=args.healthcheck_address.strip(), http_endpoint=args.http_endpoint,
        metrics_path=args.metrics_path, gpu_clique_label=args.gpu_clique_label_enabled,
        imex=imex, imex_host_socket_path=args.imex_host_socket_path,
        imex_ctl_chroot=args.imex_ctl_chroot, gates=gates, proc_devices=args.proc_devices_path,
        fabric_imex_mgmt=args.fabric_imex_mgmt_path, boot_id_file=args.boot_id_path,
        nvml_source=source, prepare_window_s=args.prepare_timeout,
        clique_refresh_s=args.clique_refresh_interval, cleanup_interval_s=args.cleanup_interval,
        resource_api_version=args.resource_api_version,
        imex_placement=args.imex_placement, imex_address=args.imex_address.strip(),
        imex_binary=args.imex, imex_ctl_binary=args.imex_ctl,
        imex_hosts_file=args.imex_hosts_file,
        max_nodes_per_imex_domain=args.max_nodes_per_imex_domain,
        imex_poll_s=args.imex_poll_interval, imex_reload_s=args.imex_reload_interval,
        imex_not_ready_event_after_s=args.imex_not_ready_event_after,
    )


def _check_placement(args: argparse.Namespace, host_managed: bool) -> None:
    """Agent placement needs an address for nvidia-imex; it means nothing when the host
    runs nvidia-imex."""
    if args.imex_placement != names.PLACEMENT_AGENT:
        return
    if host_managed:
        raise ValidationError(
            "--imex-placement=agent (IMEX_PLACEMENT) applies to imex.mode=driverManaged "
            "only: with hostManaged the host runs nvidia-imex; unset it")
    address = args.imex_address.strip()
    if not is_peer_address(address):
        raise ValidationError(
            f"--imex-address (IMEX_ADDRESS) {address!r} is not an IP address: agent "
            "placement needs the address nvidia-imex listens on and its peers reach (the "
            "chart sets it from the pod IP; under systemd set this node's address)")
    if not 1 <= args.max_nodes_per_imex_domain <= 1000:
        raise ValidationError("--max-nodes-per-imex-domain must be 1..1000")
    if (args.imex_poll_interval <= 0 or args.imex_reload_interval < 0
            or args.imex_not_ready_event_after < 0):
        raise ValidationError("--imex-poll-interval must be positive, --imex-reload-interval "
                              "and --imex-not-ready-event-after not negative")
