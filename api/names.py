"""Every exact string of the contract with Kubernetes, kubelet and the reference driver.

A ComputeDomain manifest written for the reference Go driver must keep working
with ours, so these values are part of the wire contract: change one and
existing clusters break. Other modules import them from here; no other module
spells them out.
"""

from __future__ import annotations

from typing import Final

# --- API group, kinds -------------------------------------------------------

GROUP: Final = "resource.nvidia.com"
VERSION: Final = "v1beta1"
# GROUP/VERSION, spelled out so that type checkers see the literal the models' `apiVersion`
# fields (Literal["resource.nvidia.com/v1beta1"]) take.
API_VERSION: Final = "resource.nvidia.com/v1beta1"

KIND_COMPUTE_DOMAIN: Final = "ComputeDomain"
KIND_COMPUTE_DOMAIN_LIST: Final = "ComputeDomainList"
PLURAL_COMPUTE_DOMAINS: Final = "computedomains"
SINGULAR_COMPUTE_DOMAIN: Final = "computedomain"

KIND_CLIQUE: Final = "ComputeDomainClique"
KIND_CLIQUE_LIST: Final = "ComputeDomainCliqueList"
PLURAL_CLIQUES: Final = "computedomaincliques"
SINGULAR_CLIQUE: Final = "computedomainclique"

KIND_CHANNEL_CONFIG: Final = "ComputeDomainChannelConfig"
KIND_DAEMON_CONFIG: Final = "ComputeDomainDaemonConfig"

CRD_COMPUTE_DOMAINS: Final = f"{PLURAL_COMPUTE_DOMAINS}.{GROUP}"
CRD_CLIQUES: Final = f"{PLURAL_CLIQUES}.{GROUP}"

# --- DRA driver ---------------------------------------------------------------

DRIVER_NAME: Final = "compute-domain.nvidia.com"

DEVICE_CLASS_DEFAULT_CHANNEL: Final = "compute-domain-default-channel.nvidia.com"
DEVICE_CLASS_DAEMON: Final = "compute-domain-daemon.nvidia.com"
# Declared by the reference but never rendered or referenced; kept so nobody reuses the name.
DEVICE_CLASS_CHANNEL_UNUSED: Final = "compute-domain-channel.nvidia.com"

DEVICE_TYPE_CHANNEL: Final = "channel"
DEVICE_TYPE_DAEMON: Final = "daemon"
DEVICE_CHANNEL_0: Final = "channel-0"
DEVICE_DAEMON_0: Final = "daemon-0"
# ResourceSlice attribute names (unqualified; the driver name is their domain).
ATTRIBUTE_TYPE: Final = "type"
ATTRIBUTE_ID: Final = "id"

MAX_IMEX_CHANNELS: Final = 2048

# Request names in the generated ResourceClaimTemplates.
REQUEST_CHANNEL: Final = "channel"
REQUEST_DAEMON: Final = "daemon"
# The pod-level claim name in the daemon DaemonSet.
DAEMON_POD_CLAIM_NAME: Final = "compute-domain-daemon"
DAEMON_CONTAINER_NAME: Final = "compute-domain-daemon"

# CEL selectors of the two DeviceClasses, as the reference chart's deviceclass-compute-domain-*
# templates write them (the default channel class selects channel 0 only):
# https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/tree/main/deployments/helm/dra-driver-nvidia-gpu/templates
DEVICE_CLASS_DEFAULT_CHANNEL_SELECTOR: Final = (
    f"device.driver == '{DRIVER_NAME}' && "
    f"device.attributes['{DRIVER_NAME}'].{ATTRIBUTE_TYPE} == '{DEVICE_TYPE_CHANNEL}' && "
    f"device.attributes['{DRIVER_NAME}'].{ATTRIBUTE_ID} == 0"
)
DEVICE_CLASS_DAEMON_SELECTOR: Final = (
    f"device.driver == '{DRIVER_NAME}' && "
    f"device.attributes['{DRIVER_NAME}'].{ATTRIBUTE_TYPE} == '{DEVICE_TYPE_DAEMON}'"
)

# --- labels, finalizer, objects ------------------------------------------------

LABEL_COMPUTE_DOMAIN: Final = "resource.nvidia.com/computeDomain"
LABEL_CLIQUE_ID: Final = "resource.nvidia.com/computeDomain.cliqueID"
LABEL_TARGET: Final = "resource.nvidia.com/computeDomainTarget"
TARGET_DAEMON: Final = "Daemon"
TARGET_WORKLOAD: Final = "Workload"
# Same string as the label key, as in the reference.
FINALIZER: Final = "resource.nvidia.com/computeDomain"
LABEL_GPU_CLIQUE: Final = "nvidia.com/gpu.clique"

DAEMON_SERVICE_ACCOUNT: Final = "compute-domain-daemon-service-account"

STATUS_READY: Final = "Ready"
STATUS_NOT_READY: Final = "NotReady"

ALLOCATION_MODE_SINGLE: Final = "Single"
ALLOCATION_MODE_ALL: Final = "All"


def daemon_object_name(cd_uid: str) -> str:
    """Name of both the daemon DaemonSet and its ResourceClaimTemplate (deterministic: retries
    of a create are idempotent)."""
    return f"computedomain-daemon-{cd_uid}"


def clique_object_name(cd_uid: str, clique_id: str) -> str:
    """Name of the ComputeDomainClique that the daemons of one CD in one NVLink clique share."""
    return f"{cd_uid}.{clique_id}"


# --- IMEX daemon DNS names -----------------------------------------------------

# The reference names peers `compute-domain-daemon-NNNN`, the same in every domain, so names
# leak across domains; we scope them with the ComputeDomain UID:
# https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/1447
REFERENCE_DNS_NAME_PREFIX: Final = "compute-domain-daemon-"
DNS_NAME_PREFIX: Final = "imex-"
DNS_LABEL_MAX: Final = 63


def reference_dns_name(index: int) -> str:
    """The reference driver's peer name for an index (kept for recognising its hosts entries)."""
    return f"{REFERENCE_DNS_NAME_PREFIX}{index:04d}"


def dns_name(cd_uid: str, index: int) -> str:
    """Domain-scoped peer name `imex-<cdUID>-NNNN` written to nodes.cfg and the hosts file.

    A UUID makes the name 46 characters, well inside one DNS label.
    """
    if index < 0:
        raise ValueError(f"IMEX daemon index must be >= 0, got {index}")
    name = f"{DNS_NAME_PREFIX}{cd_uid}-{index:04d}"
    if len(name) > DNS_LABEL_MAX:
        raise ValueError(f"DNS name {name!r} is longer than {DNS_LABEL_MAX} characters")
    return name


# --- CDI -------------------------------------------------------------------------

CDI_VENDOR: Final = "k8s.compute-domain.nvidia.com"
CDI_CLASS_DEVICE: Final = "device"
CDI_CLASS_CLAIM: Final = "claim"
CDI_KIND_DEVICE: Final = f"{CDI_VENDOR}/{CDI_CLASS_DEVICE}"
CDI_KIND_CLAIM: Final = f"{CDI_VENDOR}/{CDI_CLASS_CLAIM}"
CDI_BASE_SPEC_ID: Final = "base"
CDI_BASE_DEVICE: Final = "all"


def cdi_claim_device_name(claim_uid: str, device_name: str) -> str:
    """CDI device name of one prepared device of a claim, e.g. `<uid>-channel-0`."""
    return f"{claim_uid}-{device_name}"


def channel_device_path(channel: int) -> str:
    return f"/dev/nvidia-caps-imex-channels/channel{channel}"


def nvcap_device_path(minor: int) -> str:
    return f"/dev/nvidia-caps/nvidia-cap{minor}"


PROC_DEVICES_IMEX_CHANNELS: Final = "nvidia-caps-imex-channels"
PROC_DEVICES_NVIDIA_CAPS: Final = "nvidia-caps"

# --- kubelet ------------------------------------------------------------------------

KUBELET_PLUGINS_DIR: Final = "/var/lib/kubelet/plugins"
KUBELET_REGISTRY_DIR: Final = "/var/lib/kubelet/plugins_registry"
REGISTRATION_SOCKET_NAME: Final = f"{DRIVER_NAME}-reg.sock"
DRA_SOCKET_NAME: Final = "dra.sock"
PLUGIN_TYPE_DRA: Final = "DRAPlugin"
DRA_SERVICE_V1: Final = "v1.DRAPlugin"
DRA_SERVICE_V1BETA1: Final = "v1beta1.DRAPlugin"
SUPPORTED_DRA_SERVICES: Final = (DRA_SERVICE_V1, DRA_SERVICE_V1BETA1)
KUBELET_CALL_TIMEOUT_S: Final = 45.0

CHECKPOINT_FILE: Final = "checkpoint.json"
PREPARE_LOCK_FILE: Final = "pu.lock"
DOMAINS_DIR: Final = "domains"

# --- default host paths ------------------------------------------------------------

DEFAULT_CDI_ROOT: Final = "/var/run/cdi"  # what the reference's Helm chart sets
DEFAULT_HOST_DRIVER_ROOT: Final = "/"
DEFAULT_CONTAINER_DRIVER_ROOT: Final = "/driver-root"
DEFAULT_PROC_DEVICES: Final = "/proc/devices"
DEFAULT_BOOT_ID_FILE: Final = "/proc/sys/kernel/random/boot_id"
FABRIC_IMEX_MGMT_CAPABILITY: Final = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
DEFAULT_IMEX_HOST_SOCKET: Final = "/etc/nvidia-imex/imex_ctrl.sock"
DEFAULT_HOSTS_FILE: Final = "/etc/hosts"
IMEXD_DIR: Final = "/imexd"
IMEXD_CONFIG_TEMPLATE: Final = "imexd.cfg.tmpl"
IMEXD_CONFIG: Final = "imexd.cfg"
IMEXD_NODES_CONFIG: Final = "nodes.cfg"
IMEXD_MOUNT_OPTIONS: Final = ("rw", "nosuid", "nodev", "bind")
IMEX_BINARY: Final = "nvidia-imex"
IMEX_CTL_BINARY: Final = "nvidia-imex-ctl"
IMEX_SERVER_PORT: Final = 50000
IMEX_CMD_PORT: Final = 50005
DEFAULT_MAX_NODES_PER_IMEX_DOMAIN: Final = 18
MIN_DRIVER_VERSION_DNS_NAMES: Final = "570.158.01"

# --- environment variables ---------------------------------------------------------

# Injected by CDI into the daemon container.
ENV_CLIQUE_ID: Final = "CLIQUE_ID"
ENV_COMPUTE_DOMAIN_UUID: Final = "COMPUTE_DOMAIN_UUID"
ENV_COMPUTE_DOMAIN_NAME: Final = "COMPUTE_DOMAIN_NAME"
ENV_COMPUTE_DOMAIN_NAMESPACE: Final = "COMPUTE_DOMAIN_NAMESPACE"
# Set on the daemon pod by the controller's DaemonSet (static and downward API).
ENV_LOG_VERBOSITY: Final = "LOG_VERBOSITY"
ENV_MAX_NODES_PER_IMEX_DOMAIN: Final = "MAX_NODES_PER_IMEX_DOMAIN"
ENV_NODE_NAME: Final = "NODE_NAME"
ENV_POD_IP: Final = "POD_IP"
ENV_POD_UID: Final = "POD_UID"
ENV_POD_NAME: Final = "POD_NAME"
ENV_POD_NAMESPACE: Final = "POD_NAMESPACE"
ENV_NVIDIA_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
ENV_FEATURE_GATES: Final = "FEATURE_GATES"
# Shared by agent and controller flags.
ENV_NAMESPACE: Final = "NAMESPACE"
ENV_KUBECONFIG: Final = "KUBECONFIG"
ENV_KUBE_API_QPS: Final = "KUBE_API_QPS"
ENV_KUBE_API_BURST: Final = "KUBE_API_BURST"
# resource.k8s.io version to speak (v1, v1beta2, v1beta1); empty: the newest served.
ENV_RESOURCE_API_VERSION: Final = "RESOURCE_API_VERSION"
ENV_HTTP_ENDPOINT: Final = "HTTP_ENDPOINT"
ENV_METRICS_PATH: Final = "METRICS_PATH"
ENV_IMEX_MODE: Final = "IMEX_MODE"
# Where nvidia-imex runs for driver-managed domains: a daemon pod per domain and node
# ("pod", the reference's model) or the node agent itself ("agent").
ENV_IMEX_PLACEMENT: Final = "IMEX_PLACEMENT"
ENV_IMEX_ADDRESS: Final = "IMEX_ADDRESS"
PLACEMENT_POD: Final = "pod"
PLACEMENT_AGENT: Final = "agent"
PLACEMENTS: Final = (PLACEMENT_POD, PLACEMENT_AGENT)
ENV_IMEX_ISOLATION: Final = "IMEX_ISOLATION"
# Agent (kubelet plugin).
ENV_CDI_ROOT: Final = "CDI_ROOT"
ENV_NVIDIA_DRIVER_ROOT: Final = "NVIDIA_DRIVER_ROOT"
ENV_HOST_DRIVER_ROOT: Final = "HOST_DRIVER_ROOT"
ENV_CONTAINER_DRIVER_ROOT: Final = "DRIVER_ROOT_CTR_PATH"
ENV_NVIDIA_CDI_HOOK_PATH: Final = "NVIDIA_CDI_HOOK_PATH"
ENV_KUBELET_REGISTRAR_DIRECTORY_PATH: Final = "KUBELET_REGISTRAR_DIRECTORY_PATH"
ENV_KUBELET_PLUGINS_DIRECTORY_PATH: Final = "KUBELET_PLUGINS_DIRECTORY_PATH"
ENV_HEALTHCHECK_PORT: Final = "HEALTHCHECK_PORT"
ENV_HEALTHCHECK_ADDRESS: Final = "HEALTHCHECK_ADDRESS"
ENV_GPU_CLIQUE_LABEL_ENABLED: Final = "GPU_CLIQUE_LABEL_ENABLED"
ENV_IMEX_HOST_SOCKET_PATH: Final = "IMEX_HOST_SOCKET_PATH"
ENV_ALT_PROC_DEVICES_PATH: Final = "ALT_PROC_DEVICES_PATH"
# Controller.
ENV_IMAGE_NAME: Final = "IMAGE_NAME"
ENV_CD_DAEMON_IMAGE_PULL_SECRET_NAMES: Final = "CD_DAEMON_IMAGE_PULL_SECRET_NAMES"
ENV_LOG_VERBOSITY_CD_DAEMON: Final = "LOG_VERBOSITY_CD_DAEMON"
ENV_ADDITIONAL_NAMESPACES: Final = "ADDITIONAL_NAMESPACES"
ENV_LEADER_ELECTION_ENABLED: Final = "LEADER_ELECTION_ENABLED"
ENV_LEADER_ELECTION_LEASE_LOCK_NAMESPACE: Final = "LEADER_ELECTION_LEASE_LOCK_NAMESPACE"
ENV_LEADER_ELECTION_LEASE_LOCK_NAME: Final = "LEADER_ELECTION_LEASE_LOCK_NAME"
ENV_LEADER_ELECTION_LEASE_DURATION: Final = "LEADER_ELECTION_LEASE_DURATION"
ENV_LEADER_ELECTION_RENEW_DEADLINE: Final = "LEADER_ELECTION_RENEW_DEADLINE"
ENV_LEADER_ELECTION_RETRY_PERIOD: Final = "LEADER_ELECTION_RETRY_PERIOD"
DEFAULT_LEADER_ELECTION_LEASE_NAME: Final = "nvidia-compute-domain-controller"

# --- Events (the kubelet plugin's, on the pods in a claim's status.reservedFor) -------
# `kubectl describe pod` and `diagnose` read these: why a Prepare waits, fails or succeeded.

EVENT_COMPONENT_PLUGIN: Final = "compute-domain-kubelet-plugin"
# Normal, driverManaged: Prepare waits for this node's IMEX daemon to be Ready (every
# bring-up does for a moment; kubelet's Warning follows if it lasts).
EVENT_CHANNEL_WAITING: Final = "ComputeDomainChannelWaiting"
# Warning, hostManaged: the host nvidia-imex probe did not answer READY.
EVENT_HOST_IMEX_NOT_READY: Final = "HostIMEXNotReady"
# Warning: a permanent error, or a retryable one still failing when the Prepare call ends.
EVENT_PREPARE_FAILED: Final = "ComputeDomainPrepareFailed"
# Normal: a channel claim's first successful Prepare (node, channels, CDI device IDs).
EVENT_CHANNEL_PREPARED: Final = "ComputeDomainChannelPrepared"
# Warning: prepared on a node without an NVLink clique: no IMEX channel device injected.
EVENT_NO_CHANNEL: Final = "NoIMEXChannel"
