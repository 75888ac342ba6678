"""The defaults kube-apiserver writes into built-in objects it stores, and what its default
admission plugins add to a new Pod.

A real server defaults every object as it decodes it (`pkg/apis/*/v1/defaults.go`), then
on Pod creation the ServiceAccount, Priority and DefaultTolerationSeconds admission
plugins fill in the account, the priority and two tolerations, and the pod strategy
resets the status to Pending with its QoS class. Tools and tests read these fields back
(`restartPolicy`, `terminationGracePeriodSeconds`, probe periods), so the emulator stores
them as the real server does; DRA device requests get their allocation mode and count. What it
leaves out: the ServiceAccount admission's projected `kube-api-access-<random>` token
volume and its mounts.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any, Final

Obj = MutableMapping[str, Any]

DEFAULT_TOLERATION_SECONDS: Final = 300
_UNREACHABLE_TAINTS: Final = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_VOLUME_MODE: Final = 0o644  # defaultMode of configMap, secret, downwardAPI, projected


def _set(obj: Obj, key: str, value: Any) -> None:
    if obj.get(key) in (None, ""):
        obj[key] = value


def _image_tag(image: str) -> str:
    """The tag of an image reference ("latest" when it names none and no digest)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        return last.rsplit(":", 1)[1]
    return "" if "@" in image else "latest"


def _probe(probe: Any) -> None:
    if not isinstance(probe, dict):
        return
    if probe.get("initialDelaySeconds") == 0:  # omitempty: a zero never comes back
        del probe["initialDelaySeconds"]
    for key, value in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1),
                       ("failureThreshold", 3)):  # fmt: skip
        if not probe.get(key):
            probe[key] = value
    http = probe.get("httpGet")
    if isinstance(http, dict):
        _set(http, "path", "/")
        _set(http, "scheme", "HTTP")


def _field_ref(item: Any) -> None:
    ref = ((item or {}).get("valueFrom") or {}).get("fieldRef") if isinstance(item, dict) else None
    if isinstance(ref, dict):
        _set(ref, "apiVersion", "v1")


def _container(container: Any) -> None:
    if not isinstance(container, dict):
        return
    if not container.get("imagePullPolicy"):
        tag = _image_tag(str(container.get("image") or ""))
        container["imagePullPolicy"] = "Always" if tag == "latest" else "IfNotPresent"
    _set(container, "terminationMessagePath", "/dev/termination-log")
    _set(container, "terminationMessagePolicy", "File")
    container.setdefault("resources", {})  # a struct: always serialized
    for port in container.get("ports") or ():
        if isinstance(port, dict):
            _set(port, "protocol", "TCP")
    for item in container.get("env") or ():
        _field_ref(item)
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        _probe(container.get(kind))


def _volume(volume: Any) -> None:
    if not isinstance(volume, dict):
        return
    host_path = volume.get("hostPath")
    if isinstance(host_path, dict):
        host_path.setdefault("type", "")
    for kind in ("configMap", "secret", "downwardAPI", "projected"):
        source = volume.get(kind)
        if isinstance(source, dict):
            source.setdefault("defaultMode", _VOLUME_MODE)
            for item in source.get("items") or ():
                if isinstance(item, dict):
                    ref = item.get("fieldRef")
                    if isinstance(ref, dict):
                        _set(ref, "apiVersion", "v1")


def pod_spec(spec: Any) -> None:
    """SetDefaults_PodSpec and what it reaches (containers, probes, env, volumes)."""
    if not isinstance(spec, dict):
        return
    if spec.get("serviceAccount") and not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"]
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    _set(spec, "dnsPolicy", "ClusterFirst")
    _set(spec, "restartPolicy", "Always")
    spec.setdefault("securityContext", {})
    if spec.get("terminationGracePeriodSeconds") is None:
        spec["terminationGracePeriodSeconds"] = 30
    _set(spec, "schedulerName", "default-scheduler")
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or ():
            _container(container)
    for volume in spec.get("volumes") or ():
        _volume(volume)


def _template(obj: Obj) -> None:
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict):
        pod_spec(template.get("spec"))


def _pod(obj: Obj) -> None:
    spec = obj.get("spec")
    pod_spec(spec)
    if isinstance(spec, dict):
        if (spec.get("terminationGracePeriodSeconds") or 0) < 0:
            spec["terminationGracePeriodSeconds"] = 1
        if spec.get("enableServiceLinks") is None:
            spec["enableServiceLinks"] = True


def _daemon_set(obj: Obj) -> None:
    _template(obj)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    strategy = spec.setdefault("updateStrategy", {})
    _set(strategy, "type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", 1)
        rolling.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)


def _deployment(obj: Obj) -> None:
    """SetDefaults_Deployment (apps/v1): one replica, RollingUpdate 25%/25%."""
    _template(obj)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    _set(strategy, "type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)


def _replica_set(obj: Obj) -> None:
    _template(obj)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.setdefault("replicas", 1)


def _device_request(request: Any) -> None:
    """SetDefaults_ExactDeviceRequest / _DeviceSubRequest (resource.k8s.io/v1)."""
    if not isinstance(request, dict):
        return
    _set(request, "allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1


def _claim_spec(spec: Any) -> None:
    for request in ((spec or {}).get("devices") or {}).get("requests") or ():
        if isinstance(request, dict):
            _device_request(request.get("exactly"))
            for sub in request.get("firstAvailable") or ():
                _device_request(sub)


def _event(obj: Obj) -> None:
    obj.setdefault("eventTime", None)  # a MicroTime struct: serialized even when unset


def _namespace(obj: Obj) -> None:
    """Every namespace carries its own name as a label (for namespace selectors)."""
    md = obj.setdefault("metadata", {})
    if md.get("name"):
        md.setdefault("labels", {})["kubernetes.io/metadata.name"] = md["name"]


DEFAULTS: Final[dict[tuple[str, str], Callable[[Obj], None]]] = {
    ("", "Namespace"): _namespace,
    # A struct, not a pointer: a Node always has a spec, if only `{}`.
    ("", "Node"): lambda o: o.setdefault("spec", {}),
    ("", "Event"): _event,
    ("", "Secret"): lambda o: _set(o, "type", "Opaque"),  # SetDefaults_Secret
    ("scheduling.k8s.io", "PriorityClass"): lambda o: _set(
        o, "preemptionPolicy", "PreemptLowerPriority"
    ),
    ("resource.k8s.io", "ResourceClaim"): lambda o: _claim_spec(o.get("spec")),
    ("resource.k8s.io", "ResourceClaimTemplate"): lambda o: _claim_spec(
        (o.get("spec") or {}).get("spec")
    ),
    ("", "Pod"): _pod,
    ("", "PodTemplate"): lambda o: pod_spec((o.get("template") or {}).get("spec")),
    ("apps", "DaemonSet"): _daemon_set,
    ("apps", "Deployment"): _deployment,
    ("apps", "ReplicaSet"): _replica_set,
}


def apply(group: str, kind: str, obj: Obj) -> None:
    """Default `obj` in place, as decoding it in kube-apiserver would."""
    fill = DEFAULTS.get((group, kind))
    if fill is not None:
        fill(obj)


def _qos_class(spec: Any) -> str:
    containers = [c for c in (spec or {}).get("containers") or () if isinstance(c, dict)]
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        limits = r.get("limits") or {}
        requests = r.get("requests") or limits
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name) != limits[name]:
                return "Burstable"
    return "Guaranteed"


def admit_new_pod(pod: Obj) -> None:
    """What a new Pod gets from admission (ServiceAccount, Priority,
    DefaultTolerationSeconds) and the pod strategy (status)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"] = "default"
    if not spec.get("priorityClassName") and spec.get("priority") is None:
        spec["priority"] = 0
    if spec.get("priority") is not None:
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.get("tolerations") or []
    for key in _UNREACHABLE_TAINTS:
        if not any(
            isinstance(t, dict)
            and t.get("key") in (key, "", None)
            and t.get("effect") in ("NoExecute", "", None)
            for t in tolerations
        ):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})  # fmt: skip
    spec["tolerations"] = tolerations
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
