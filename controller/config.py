"""`compute-domain-controller` flags and env vars, validated.

The reference controller's flags and env vars (`newApp` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-controller/main.go),
plus tuning flags of our own (`--workers`, `--resync-interval`, `--status-write-interval`).
Validation order and messages follow the reference: feature gates first, then the IMEX
settings; host-managed mode then turns the DNS-names and cliques gates off.
"""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass

from api import names
from api.featuregates import COMPUTE_DOMAIN_CLIQUES, HOST_MANAGED_IMEX_DAEMON, FeatureGates
from api.imex import ImexConfig
from api.validation_error import ValidationError
from controller.render import RenderSettings, parse_pull_secret_names
from runtime.cli import (
    add_imex_placement_flag,
    add_kube_client_flags,
    add_resource_api_flag,
    env_option,
    parse_bool,
    parse_duration,
)
from runtime.logsetup import add_logging_flags, parse_verbosity


@dataclass(frozen=True)
class ControllerConfig:
    pod_name: str
    namespace: str
    kubeconfig: str
    image: str
    pull_secrets: tuple[str, ...]
    daemon_log_verbosity: int
    max_nodes_per_imex_domain: int
    imex: ImexConfig
    gates: FeatureGates
    http_endpoint: str
    metrics_path: str
    additional_namespaces: tuple[str, ...]
    leader_election: bool
    lease_namespace: str
    lease_name: str
    lease_duration_s: float
    renew_deadline_s: float
    retry_period_s: float
    workers: int
    resync_s: float
    resource_api_version: str = ""
    status_interval_s: float = 1.0
    imex_placement: str = names.PLACEMENT_POD

    @property
    def host_managed(self) -> bool:
        return self.imex.host_managed

    @property
    def agent_placement(self) -> bool:
        """The node agents supervise nvidia-imex: no daemon DaemonSets, templates or pods."""
        return not self.host_managed and self.imex_placement == names.PLACEMENT_AGENT

    @property
    def daemon_pods(self) -> bool:
        """Per-domain IMEX daemon pods exist (driver-managed, pod placement)."""
        return not self.host_managed and not self.agent_placement

    @property
    def cliques(self) -> bool:
        return self.gates.enabled(COMPUTE_DOMAIN_CLIQUES)

    @property
    def managed_namespaces(self) -> tuple[str, ...]:
        """The driver namespace first, then additional ones, without duplicates."""
        return tuple(dict.fromkeys((self.namespace, *self.additional_namespaces)))

    def manager_config(self) -> str:
        """The reference's `controller manager config: %+v` of its ManagerConfig (its
        controller.go), from our settings: what admins read for the effective limits."""
        def slice_of(items: tuple[str, ...]) -> str:
            return "[" + " ".join(items) + "]"

        imex = f"{{mode:{self.imex.effective_mode} isolation:{self.imex.isolation}}}"
        return (f"&{{driverName:{names.DRIVER_NAME} driverNamespace:{self.namespace} "
                f"imageName:{self.image} maxNodesPerIMEXDomain:{self.max_nodes_per_imex_domain} "
                f"imexConfig:{imex} additionalNamespaces:{slice_of(self.additional_namespaces)} "
                f"logVerbosityCDDaemon:{self.daemon_log_verbosity} "
                f"httpEndpoint:{self.http_endpoint} metricsPath:{self.metrics_path} "
                f"imagePullSecretNames:{slice_of(self.pull_secrets)}}}")

    def render_settings(self) -> RenderSettings:
        return RenderSettings(
            namespace=self.namespace, image=self.image,
            daemon_log_verbosity=self.daemon_log_verbosity,
            max_nodes_per_imex_domain=self.max_nodes_per_imex_domain,
            feature_gates=self.gates, image_pull_secrets=self.pull_secrets,
            host_managed=self.host_managed)


def _namespaces(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def add_controller_flags(parser: argparse.ArgumentParser) -> None:
    add_logging_flags(parser)  # -v/--verbosity and --logging-format, as klog's
    env_option(parser, "--pod-name", env=names.ENV_POD_NAME, default=socket.gethostname(),
               help="this pod's name (part of the leader-election identity)")
    env_option(parser, "--namespace", env=names.ENV_NAMESPACE, default="default",
               help="the driver namespace: daemon DaemonSets, their templates, cliques")
    add_kube_client_flags(parser)
    env_option(parser, "--image-name", env=names.ENV_IMAGE_NAME, required=True,
               help="image of the IMEX daemon pods (the driver's own image)")
    env_option(parser, "--cd-daemon-image-pull-secret-names",
               env=names.ENV_CD_DAEMON_IMAGE_PULL_SECRET_NAMES, default="",
               help="comma-separated pull secrets for the daemon pods")
    env_option(parser, "--log-verbosity-cd-daemon", env=names.ENV_LOG_VERBOSITY_CD_DAEMON,
               type=parse_verbosity, default=4, help="log verbosity of the IMEX daemon pods")
    env_option(parser, "--max-nodes-per-imex-domain", env=names.ENV_MAX_NODES_PER_IMEX_DOMAIN,
               type=int, default=names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
               help="nodes per IMEX domain (18 on GB200/GB300 NVL72)")
    env_option(parser, "--imex-mode", env=names.ENV_IMEX_MODE, default="driverManaged",
               help="driverManaged or hostManaged")
    env_option(parser, "--imex-isolation", env=names.ENV_IMEX_ISOLATION, default="domain",
               help="domain (channel is not implemented)")
    env_option(parser, "--feature-gates", env=names.ENV_FEATURE_GATES, default="",
               help="Name=bool,Name=bool")
    env_option(parser, "--http-endpoint", env=names.ENV_HTTP_ENDPOINT, default="",
               help="host:port for /metrics, /healthz and /readyz; empty disables")
    env_option(parser, "--metrics-path", env=names.ENV_METRICS_PATH, default="/metrics",
               help="HTTP path of the metrics")
    env_option(parser, "--additional-namespaces", env=names.ENV_ADDITIONAL_NAMESPACES,
               type=_namespaces, default=(),
               help="more namespaces where daemon DaemonSets may exist (cleanup)")
    env_option(parser, "--leader-election-enabled", env=names.ENV_LEADER_ELECTION_ENABLED,
               type=parse_bool, default=False, help="run only while holding the Lease")
    env_option(parser, "--leader-election-lease-lock-namespace",
               env=names.ENV_LEADER_ELECTION_LEASE_LOCK_NAMESPACE, default="default",
               help="namespace of the Lease")
    env_option(parser, "--leader-election-lease-lock-name",
               env=names.ENV_LEADER_ELECTION_LEASE_LOCK_NAME,
               default=names.DEFAULT_LEADER_ELECTION_LEASE_NAME, help="name of the Lease")
    env_option(parser, "--leader-election-lease-duration",
               env=names.ENV_LEADER_ELECTION_LEASE_DURATION, type=parse_duration, default=15.0,
               help="how long a Lease is valid without renewal")
    env_option(parser, "--leader-election-renew-deadline",
               env=names.ENV_LEADER_ELECTION_RENEW_DEADLINE, type=parse_duration, default=10.0,
               help="how long the leader tries to renew before giving up")
    env_option(parser, "--leader-election-retry-period",
               env=names.ENV_LEADER_ELECTION_RETRY_PERIOD, type=parse_duration, default=2.0,
               help="how often to try to acquire or renew")
    env_option(parser, "--workers", env="RECONCILE_WORKERS", type=int, default=8,
               help="ComputeDomains reconciled concurrently")
    env_option(parser, "--resync-interval", env="RESYNC_INTERVAL", type=parse_duration,
               default=600.0, help="how often every ComputeDomain is reconciled regardless")
    env_option(parser, "--status-write-interval", env="STATUS_WRITE_INTERVAL",
               type=parse_duration, default=1.0,
               help="at most one status write per ComputeDomain per this long (changes in "
               "between are written together at its end; 0: every change at once)")
    add_resource_api_flag(parser)
    add_imex_placement_flag(parser)


def config_from_args(args: argparse.Namespace) -> ControllerConfig:
    """Raises ValidationError with the reference's wording for bad gates or IMEX settings."""
    gates = FeatureGates.parse(args.feature_gates)
    gates.validate()
    imex = ImexConfig(mode=args.imex_mode, isolation=args.imex_isolation)
    imex.validate(host_managed_gate=gates.enabled(HOST_MANAGED_IMEX_DAEMON))
    if imex.host_managed:
        gates = gates.with_values(IMEXDaemonsWithDNSNames=False, ComputeDomainCliques=False)
    if not args.image_name.strip():
        raise ValidationError("--image-name (IMAGE_NAME) is empty: set the driver image")
    if args.max_nodes_per_imex_domain < 1:
        raise ValidationError("--max-nodes-per-imex-domain must be at least 1")
    if args.workers < 1:
        raise ValidationError("--workers must be at least 1")
    if args.status_write_interval < 0:
        raise ValidationError("--status-write-interval must not be negative")
    if not 0 < args.leader_election_retry_period < args.leader_election_renew_deadline \
            < args.leader_election_lease_duration:
        raise ValidationError(
            "leader election needs retry period < renew deadline < lease duration "
            f"(got {args.leader_election_retry_period}s, "
            f"{args.leader_election_renew_deadline}s, {args.leader_election_lease_duration}s)")
    if args.http_endpoint:
        _, sep, port = args.http_endpoint.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535:
            raise ValidationError(f"--http-endpoint {args.http_endpoint!r} is not host:port "
                                  "(e.g. :8080)")
    return ControllerConfig(
        pod_name=args.pod_name, namespace=args.namespace, kubeconfig=args.kubeconfig,
        image=args.image_name.strip(),
        pull_secrets=parse_pull_secret_names(args.cd_daemon_image_pull_secret_names),
        daemon_log_verbosity=args.log_verbosity_cd_daemon,
        max_nodes_per_imex_domain=args.max_nodes_per_imex_domain, imex=imex, gates=gates,
        http_endpoint=args.http_endpoint, metrics_path=args.metrics_path,
        additional_namespaces=tuple(args.additional_namespaces),
        leader_election=args.leader_election_enabled,
        lease_namespace=args.leader_election_lease_lock_namespace,
        lease_name=args.leader_election_lease_lock_name,
        lease_duration_s=args.leader_election_lease_duration,
        renew_deadline_s=args.leader_election_renew_deadline,
        retry_period_s=args.leader_election_retry_period, workers=args.workers,
        resync_s=args.resync_interval, resource_api_version=args.resource_api_version,
        status_interval_s=args.status_write_interval, imex_placement=args.imex_placement)
