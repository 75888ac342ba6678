"""The objects the controller creates for a ComputeDomain, as pure functions.

Each function returns the API JSON (a plain dict) of one object, field for field as the
reference driver renders it from its YAML templates (its templates/*.tmpl.yaml, filled in
by cmd/compute-domain-controller: https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu),
so that clusters, tools and tests written against the Go driver see the same objects. The one
deliberate difference: the daemon container runs our agent (`compute-domain-agent daemon
run|check`), not the reference's `compute-domain-daemon` binary.

Nothing here talks to the API or keeps state; the reconciler decides when to create what.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from api import names
from api.computedomain import StoredComputeDomain
from api.featuregates import FeatureGates
from api.objects import K8sObject

AGENT_PROGRAM: Final = "compute-domain-agent"
# Verbosity reaches the agent through the LOG_VERBOSITY env var (its `-v` flag's env source),
# so unlike the reference no `$(LOG_VERBOSITY)` expansion is needed in the commands.
DAEMON_RUN_COMMAND: Final = (AGENT_PROGRAM, "daemon", "run")
DAEMON_CHECK_COMMAND: Final = (AGENT_PROGRAM, "daemon", "check")
# The reference's toleration effects: tolerate every taint
# (https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/305).
TOLERATED_EFFECTS: Final = ("NoSchedule", "NoExecute", "PreferNoSchedule")
RESOURCE_API_VERSION: Final = "resource.k8s.io/v1"
KIND_RESOURCE_CLAIM_TEMPLATE: Final = "ResourceClaimTemplate"
KIND_DAEMON_SET: Final = "DaemonSet"
APPS_API_VERSION: Final = "apps/v1"


@dataclass(frozen=True)
class RenderSettings:
    """The controller-wide inputs of rendering (its flags), fixed for the process lifetime."""

    namespace: str
    image: str
    daemon_log_verbosity: int
    max_nodes_per_imex_domain: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    image_pull_secrets: tuple[str, ...] = ()
    host_managed: bool = False


def parse_pull_secret_names(text: str | None) -> tuple[str, ...]:
    """`--cd-daemon-image-pull-secret-names`: commas and whitespace both separate names."""
    return tuple((text or "").strip().replace(",", " ").split())


def channel_allocation_mode(cd_mode: str | None, host_managed: bool) -> str | None:
    """The allocationMode written into the workload channel config.

    Host-managed IMEX only ever has channel 0 to give out, so the mode is forced to
    Single there; driverManaged passes the CD's value through unchanged (even "").
    """
    if host_managed:
        return names.ALLOCATION_MODE_SINGLE
    return cd_mode


# --- labels ------------------------------------------------------------------------------


def labels_of(obj: K8sObject) -> dict[str, str]:
    """The object's labels ({} when it has none), a copy."""
    labels = obj.metadata.labels
    return dict(labels) if labels else {}


def cd_uid_of(obj: K8sObject) -> str | None:
    """The ComputeDomain UID an object is labeled with, None when unlabeled."""
    return obj.label(names.LABEL_COMPUTE_DOMAIN)


def is_ours(obj: K8sObject, cd_uid: str, target: str | None = None) -> bool:
    """Whether `obj` belongs to this CD (and, for claim templates, to this target).

    The reference finds its objects by label, never by name: a same-named object without
    our labels is a user's (or another CD's) and must not be adopted or deleted.
    """
    if obj.label(names.LABEL_COMPUTE_DOMAIN) != cd_uid:
        return False
    return target is None or obj.label(names.LABEL_TARGET) == target


def cd_label_selector(target: str | None = None) -> str:
    """Label selector of the controller's informers: "CD label exists" (and the target)."""
    selector = names.LABEL_COMPUTE_DOMAIN
    if target is not None:
        selector += f",{names.LABEL_TARGET} in ({target})"
    return selector


def cd_uid_selector(cd_uid: str) -> str:
    """Label selector of the objects (e.g. nodes) labeled with one CD's UID."""
    return f"{names.LABEL_COMPUTE_DOMAIN} in ({cd_uid})"


def _labels(cd_uid: str, target: str | None = None) -> dict[str, str]:
    labels = {names.LABEL_COMPUTE_DOMAIN: cd_uid}
    if target is not None:
        labels[names.LABEL_TARGET] = target
    return labels


def _metadata(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    # No ownerReferences and no annotations, as in the reference: cleanup relies on the
    # finalizer, the CD label and the cleanup loops (a CD in another namespace cannot own
    # objects in the driver namespace anyway).
    return {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "finalizers": [names.FINALIZER],
    }


# --- ResourceClaimTemplates -----------------------------------------------------------------


def _claim_template(
    name: str,
    namespace: str,
    labels: dict[str, str],
    request: str,
    device_class: str,
    parameters: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": KIND_RESOURCE_CLAIM_TEMPLATE,
        "metadata": _metadata(name, namespace, labels),
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
                    "config": [
                        {
                            "requests": [request],
                            "opaque": {"driver": names.DRIVER_NAME, "parameters": parameters},
                        }
                    ],
                }
            }
        },
    }


def _required(value: str | None, what: str) -> str:
    if not value:
        raise ValueError(f"ComputeDomain has no {what}")
    return value


def workload_claim_template(cd: StoredComputeDomain, settings: RenderSettings) -> dict[str, Any]:
    """The channel ResourceClaimTemplate workloads reference, in the CD's namespace.

    It goes in the CD namespace because the kubelet plugin refuses claims from any other
    namespace than the CD's. Only channel 0's class is requested; `All` is realized by
    the plugin from the config's allocationMode.
    """
    cd_uid = _required(cd.uid, "metadata.uid")
    namespace = _required(cd.namespace, "metadata.namespace")
    name = _required(cd.workload_template_name, "spec.channel.resourceClaimTemplate.name")
    parameters: dict[str, Any] = {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND_CHANNEL_CONFIG,
        "domainID": cd_uid,
    }
    # The reference renders an empty mode as YAML null; we omit the key instead (the
    # config's allocationMode is omitempty, and both read as Single).
    if mode := channel_allocation_mode(cd.allocation_mode, settings.host_managed):
        parameters["allocationMode"] = mode
    return _claim_template(
        name,
        namespace,
        _labels(cd_uid, names.TARGET_WORKLOAD),
        names.REQUEST_CHANNEL,
        names.DEVICE_CLASS_DEFAULT_CHANNEL,
        parameters,
    )


def _require_driver_managed(settings: RenderSettings) -> None:
    if settings.host_managed:
        raise ValueError("hostManaged mode runs no IMEX daemons: nothing to render")


def daemon_claim_template(cd_uid: str, settings: RenderSettings) -> dict[str, Any]:
    """The daemon's ResourceClaimTemplate in the driver namespace (driverManaged only).

    Named like the DaemonSet so a retried create is idempotent.
    """
    _require_driver_managed(settings)
    _required(cd_uid, "UID")
    return _claim_template(
        names.daemon_object_name(cd_uid),
        settings.namespace,
        _labels(cd_uid, names.TARGET_DAEMON),
        names.REQUEST_DAEMON,
        names.DEVICE_CLASS_DAEMON,
        {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND_DAEMON_CONFIG,
            "domainID": cd_uid,
        },
    )


# --- DaemonSet ---------------------------------------------------------------------------


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _daemon_env(settings: RenderSettings) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": names.ENV_LOG_VERBOSITY, "value": str(settings.daemon_log_verbosity)},
        {
            "name": names.ENV_MAX_NODES_PER_IMEX_DOMAIN,
            "value": str(settings.max_nodes_per_imex_domain),
        },
        _field_env(names.ENV_NODE_NAME, "spec.nodeName"),
        _field_env(names.ENV_POD_IP, "status.podIP"),
        _field_env(names.ENV_POD_UID, "metadata.uid"),
        _field_env(names.ENV_POD_NAME, "metadata.name"),
        _field_env(names.ENV_POD_NAMESPACE, "metadata.namespace"),
        # With runc, an explicit "void" keeps the container from inheriting "all" GPUs.
        {"name": names.ENV_NVIDIA_VISIBLE_DEVICES, "value": "void"},
    ]
    # The daemon must run with the controller's effective gates (hostManaged forcing etc.).
    if gates := settings.feature_gates.render():
        env.append({"name": names.ENV_FEATURE_GATES, "value": gates})
    return env


def _probe(**timing: int) -> dict[str, Any]:
    return {"exec": {"command": list(DAEMON_CHECK_COMMAND)}, **timing}


def daemon_set(cd_uid: str, settings: RenderSettings) -> dict[str, Any]:
    """The per-CD IMEX daemon DaemonSet in the driver namespace (driverManaged only).

    It schedules only onto nodes the kubelet plugin labeled with this CD (where a workload
    channel claim was prepared), tolerates every taint, and gets its daemon device through
    the daemon claim template of the same name.
    """
    _require_driver_managed(settings)
    _required(cd_uid, "UID")
    name = names.daemon_object_name(cd_uid)
    pod_spec: dict[str, Any] = {"serviceAccountName": names.DAEMON_SERVICE_ACCOUNT}
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in settings.image_pull_secrets]
    pod_spec |= {
        "nodeSelector": _labels(cd_uid),
        "tolerations": [{"operator": "Exists", "effect": e} for e in TOLERATED_EFFECTS],
        "resourceClaims": [
            {"name": names.DAEMON_POD_CLAIM_NAME, "resourceClaimTemplateName": name}
        ],
        "containers": [
            {
                "name": names.DAEMON_CONTAINER_NAME,
                "image": settings.image,
                "command": list(DAEMON_RUN_COMMAND),
                "resources": {"claims": [{"name": names.DAEMON_POD_CLAIM_NAME}]},
                "env": _daemon_env(settings),
                # The image runs as 65532 (Dockerfile USER); the daemon writes the pod's
                # /etc/hosts and the IMEX config in the root-owned /imexd mount.
                "securityContext": {"runAsUser": 0, "runAsGroup": 0},
                # About 20 minutes to start (IMEX waits for its peers), then about 20
                # minutes of failed liveness checks before a restart.
                "startupProbe": _probe(
                    initialDelaySeconds=0,
                    periodSeconds=1,
                    timeoutSeconds=10,
                    failureThreshold=1200,
                    successThreshold=1,
                ),
                "livenessProbe": _probe(
                    periodSeconds=60, timeoutSeconds=10, failureThreshold=20, successThreshold=1
                ),
                "readinessProbe": _probe(
                    periodSeconds=10, timeoutSeconds=10, failureThreshold=1, successThreshold=1
                ),
            }
        ],
    }
    return {
        "apiVersion": APPS_API_VERSION,
        "kind": KIND_DAEMON_SET,
        "metadata": _metadata(name, settings.namespace, _labels(cd_uid)),
        "spec": {
            "selector": {"matchLabels": _labels(cd_uid)},
            "template": {"metadata": {"labels": _labels(cd_uid)}, "spec": pod_spec},
        },
    }
