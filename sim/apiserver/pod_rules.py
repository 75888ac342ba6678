"""Hand-written rules of pods and pod templates (the parts of `ValidatePodSpec` in use).

Containers, probes, env and downward API references, tolerations, volumes and mounts, and
DRA resource claims, which must name a claim of the pod; plus what a pod update may change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import (
    child,
    duplicate,
    forbidden,
    index,
    invalid_each,
    invalid_value,
    not_found,
    not_supported,
    required,
)
from sim.apiserver.go_format import GoRepr, go_quote
from sim.apiserver.json_values import as_list, as_str, get_in, json_equal
from sim.apiserver.names_validation import (
    dns1123_label_problems,
    dns1123_subdomain_problems,
    label_value_problems,
    qualified_name_problems,
)
from sim.apiserver.object_meta import validate_labels

_ENV_FIELD_PATHS: Final = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
_PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")
TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_PROBE_HANDLERS: Final = ("exec", "httpGet", "tcpSocket", "grpc")


def _probe(probe: Any, path: str, *, liveness_like: bool) -> list[Cause]:
    if not isinstance(probe, Mapping):
        return []
    out: list[Cause] = []
    handlers = [h for h in _PROBE_HANDLERS if probe.get(h) is not None]
    if not handlers:
        out.append(required(path, "must specify a handler type"))
    for extra in handlers[1:]:
        out.append(forbidden(child(path, extra), "may not specify more than 1 handler type"))
    if handlers and handlers[0] == "exec" and not as_list(get_in(probe, "exec", "command")):
        out.append(required(child(child(path, "exec"), "command")))
    for key in (
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ):
        value = probe.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            out.append(invalid_value(child(path, key), value, "must be greater than or equal to 0"))
    threshold = probe.get("successThreshold")
    if liveness_like and isinstance(threshold, int) and threshold not in (0, 1):
        out.append(invalid_value(child(path, "successThreshold"), threshold, "must be 1"))
    return out


def _env(env: list[Any], path: str) -> list[Cause]:
    out: list[Cause] = []
    for i, var in enumerate(env):
        if not isinstance(var, Mapping):
            continue
        vpath = index(path, i)
        name = as_str(var.get("name"))
        if not name:
            out.append(required(child(vpath, "name")))
        elif any(not (32 <= ord(c) < 127) or c == "=" for c in name):
            out.append(
                invalid_value(
                    child(vpath, "name"),
                    name,
                    "a valid environment variable "
                    "name must consist only of printable ASCII characters other "
                    "than '='",
                )
            )
        source = var.get("valueFrom")
        if not isinstance(source, Mapping):
            continue
        fpath = child(vpath, "valueFrom")
        kinds = [
            k
            for k in (
                "fieldRef",
                "resourceFieldRef",
                "configMapKeyRef",
                "secretKeyRef",
                "fileKeyRef",
            )
            if source.get(k) is not None
        ]
        if not kinds:
            out.append(
                invalid_value(
                    fpath,
                    "",
                    "must specify one of: `fieldRef`, "
                    "`resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                )
            )
        if var.get("value"):
            if kinds:
                out.append(
                    invalid_value(fpath, "", "may not be specified when `value` is not empty")
                )
        elif len(kinds) > 1:
            out.append(
                invalid_value(fpath, "", "may not have more than one field specified at a time")
            )
        ref = source.get("fieldRef")
        if isinstance(ref, Mapping):
            out += _field_ref(ref, child(fpath, "fieldRef"))
    return out


def _field_ref(ref: Mapping[str, Any], path: str) -> list[Cause]:
    field_path = as_str(ref.get("fieldPath"))
    api_version = ref.get("apiVersion") or "v1"  # defaulted
    if not field_path:
        return [required(child(path, "fieldPath"))]
    if api_version != "v1":
        return [
            invalid_value(
                child(path, "fieldPath"),
                field_path,
                f"error converting fieldPath: unsupported pod version: {api_version}",
            )
        ]
    if m := re.fullmatch(r"(metadata\.(?:labels|annotations))\['(.*)'\]", field_path):
        return invalid_each(path, m.group(2), qualified_name_problems(m.group(2)))
    if "[" in field_path:
        return [invalid_value(path, field_path.split("[", 1)[0], "does not support subscript")]
    if field_path not in _ENV_FIELD_PATHS:
        return [not_supported(child(path, "fieldPath"), field_path, _ENV_FIELD_PATHS)]
    return []


def _tolerations(tolerations: list[Any], path: str) -> list[Cause]:
    out: list[Cause] = []
    for i, tol in enumerate(tolerations):
        if not isinstance(tol, Mapping):
            continue
        tpath = index(path, i)
        key = as_str(tol.get("key"))
        operator = tol.get("operator") or "Equal"
        effect = as_str(tol.get("effect"))
        if key:
            out += invalid_each(child(tpath, "key"), key, qualified_name_problems(key))
        elif operator != "Exists":
            out.append(
                invalid_value(
                    child(tpath, "operator"),
                    as_str(tol.get("operator")),
                    "operator must be Exists when `key` is empty, which means "
                    '"match all values and all keys"',
                )
            )
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            out.append(
                invalid_value(
                    child(tpath, "effect"),
                    effect,
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                )
            )
        value = as_str(tol.get("value"))
        if operator == "Equal":
            if problems := label_value_problems(value):
                out.append(invalid_value(child(tpath, "operator"), value, ";".join(problems)))
        elif operator == "Exists":
            if value:
                out.append(
                    invalid_value(
                        child(tpath, "operator"),
                        GoRepr(
                            f'core.Toleration{{Key:{go_quote(key)}, Operator:"Exists", '
                            f"Value:{go_quote(value)}, Effect:{go_quote(effect)}}}"
                        ),
                        "value must be empty when `operator` is 'Exists'",
                    )
                )
        else:
            out.append(not_supported(child(tpath, "operator"), operator, ("Equal", "Exists")))
        if effect and effect not in TAINT_EFFECTS:
            out.append(not_supported(child(tpath, "effect"), effect, TAINT_EFFECTS))
    return out


def _pointer(value: Any) -> str:
    return "(*string)(nil)" if value is None else f"(*string)({go_quote(str(value))})"


def _containers(
    containers: list[Any], path: str, claim_names: set[str], *, seen: set[str], init: bool
) -> list[Cause]:
    out: list[Cause] = []
    for i, ctr in enumerate(containers):
        if not isinstance(ctr, Mapping):
            continue
        cpath = index(path, i)
        name = as_str(ctr.get("name"))
        if not name:
            out.append(required(child(cpath, "name")))
        else:
            out += invalid_each(child(cpath, "name"), name, dns1123_label_problems(name))
            if name in seen:
                out.append(duplicate(child(cpath, "name"), name))
            seen.add(name)
        if not as_str(ctr.get("image")):
            out.append(required(child(cpath, "image")))
        policy = ctr.get("imagePullPolicy")
        if policy is not None and policy not in _PULL_POLICIES:
            out.append(not_supported(child(cpath, "imagePullPolicy"), policy, _PULL_POLICIES))
        out += _env(as_list(ctr.get("env")), child(cpath, "env"))
        for j, port in enumerate(as_list(ctr.get("ports"))):
            number = port.get("containerPort") if isinstance(port, Mapping) else None
            if (isinstance(number, int) and not 1 <= number <= 65535) or number is None:
                out.append(
                    invalid_value(
                        child(index(child(cpath, "ports"), j), "containerPort"),
                        number or 0,
                        "must be between 1 and 65535, inclusive",
                    )
                )
        restartable = ctr.get("restartPolicy") == "Always"
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if ctr.get(probe) is None:
                continue
            if init and not restartable:
                out.append(
                    forbidden(
                        child(cpath, probe),
                        "may not be set for init containers without restartPolicy=Always",
                    )
                )
            else:
                out += _probe(
                    ctr[probe], child(cpath, probe), liveness_like=probe != "readinessProbe"
                )
        if not init and ctr.get("restartPolicy") is not None:
            out.append(
                forbidden(child(cpath, "restartPolicy"), "may not be set for non-init containers")
            )
        claims_path = child(child(cpath, "resources"), "claims")
        claim_seen: set[str] = set()
        for j, claim in enumerate(as_list(get_in(ctr, "resources", "claims"))):
            cname = as_str(claim.get("name")) if isinstance(claim, Mapping) else ""
            if not cname:
                out.append(required(index(claims_path, j)))
                continue
            if cname in claim_seen:
                out.append(duplicate(index(claims_path, j), cname))
            claim_seen.add(cname)
            if cname not in claim_names:
                detail = "must be one of the names in pod.spec.resourceClaims"
                detail += (
                    ": " + ", ".join(sorted(claim_names)) if claim_names else " which is empty"
                )
                out.append(not_found(index(claims_path, j), cname, detail))
    return out


def validate_pod_spec(spec: Any, path: str, *, template: bool = False) -> list[Cause]:
    """The parts of `ValidatePodSpec` that this project's pods and templates exercise."""
    if not isinstance(spec, Mapping):
        return [required(child(path, "containers"))]
    out: list[Cause] = []
    claim_names: set[str] = set()
    for i, claim in enumerate(as_list(spec.get("resourceClaims"))):
        if not isinstance(claim, Mapping):
            continue
        cpath = index(child(path, "resourceClaims"), i)
        name = as_str(claim.get("name"))
        if not name:
            out.append(required(child(cpath, "name")))
        elif name in claim_names:
            out.append(duplicate(child(cpath, "name"), name))
        else:
            out += invalid_each(child(cpath, "name"), name, dns1123_label_problems(name))
            claim_names.add(name)
        by_name, by_template = (
            claim.get("resourceClaimName"),
            claim.get("resourceClaimTemplateName"),
        )
        shown = GoRepr(
            f"core.PodResourceClaim{{Name:{go_quote(name)}, ResourceClaimName:"
            f"{_pointer(by_name)}, ResourceClaimTemplateName:{_pointer(by_template)}}}"
        )
        if by_name is not None and by_template is not None:
            out.append(
                invalid_value(
                    cpath,
                    shown,
                    "at most one of `resourceClaimName` or "
                    "`resourceClaimTemplateName` may be specified",
                )
            )
        if by_name is None and by_template is None:
            out.append(
                invalid_value(
                    cpath,
                    shown,
                    "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
                )
            )
        for key, value in (
            ("resourceClaimName", by_name),
            ("resourceClaimTemplateName", by_template),
        ):
            if isinstance(value, str):
                out += invalid_each(child(cpath, key), value, dns1123_subdomain_problems(value))
    containers = as_list(spec.get("containers"))
    seen: set[str] = set()
    if not containers:
        out.append(required(child(path, "containers")))
    out += _containers(containers, child(path, "containers"), claim_names, seen=seen, init=False)
    out += _containers(
        as_list(spec.get("initContainers")),
        child(path, "initContainers"),
        claim_names,
        seen=seen,
        init=True,
    )
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in ("Always", "OnFailure", "Never"):
        out.append(
            not_supported(child(path, "restartPolicy"), policy, ("Always", "OnFailure", "Never"))
        )
    dns = spec.get("dnsPolicy")
    if dns is not None and dns not in (
        "ClusterFirstWithHostNet",
        "ClusterFirst",
        "Default",
        "None",
    ):
        out.append(
            not_supported(
                child(path, "dnsPolicy"),
                dns,
                ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"),
            )
        )
    out += validate_labels(spec.get("nodeSelector"), child(path, "nodeSelector"))
    out += _tolerations(as_list(spec.get("tolerations")), child(path, "tolerations"))
    for key, check in (
        ("serviceAccountName", dns1123_subdomain_problems),
        ("nodeName", dns1123_subdomain_problems),
        ("priorityClassName", dns1123_subdomain_problems),
        ("hostname", dns1123_label_problems),
        ("subdomain", dns1123_label_problems),
    ):
        value = spec.get(key)
        if isinstance(value, str) and value:
            out += invalid_each(child(path, key), value, check(value))
    volumes: set[str] = set()
    for i, vol in enumerate(as_list(spec.get("volumes"))):
        vname = as_str(get_in(vol, "name"))
        vpath = child(index(child(path, "volumes"), i), "name")
        if not vname:
            out.append(required(vpath))
        elif vname in volumes:
            out.append(duplicate(vpath, vname))
        else:
            out += invalid_each(vpath, vname, dns1123_label_problems(vname))
        volumes.add(vname)
    for kind in ("containers", "initContainers"):
        for i, ctr in enumerate(as_list(spec.get(kind))):
            for j, mount in enumerate(as_list(get_in(ctr, "volumeMounts"))):
                mpath = index(child(index(child(path, kind), i), "volumeMounts"), j)
                mname = as_str(get_in(mount, "name"))
                if not mname:
                    out.append(required(child(mpath, "name")))
                elif mname not in volumes:
                    out.append(not_found(child(mpath, "name"), mname))
                if not as_str(get_in(mount, "mountPath")):
                    out.append(required(child(mpath, "mountPath")))
    if template and spec.get("ephemeralContainers"):
        out.append(
            forbidden(
                child(path, "ephemeralContainers"),
                "ephemeral containers not allowed in pod template",
            )
        )
    return out


def check_pod(obj: Mapping[str, Any]) -> list[Cause]:
    """A Pod: its spec."""
    return validate_pod_spec(obj.get("spec"), "spec")


_MUTABLE_POD_SPEC: Final = frozenset(
    {"activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"}
)


def pod_spec_immutable(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """Pod updates may change images, deadlines, tolerations (additions) and gates only."""
    a, b = get_in(new, "spec"), get_in(old, "spec")
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return []

    def comparable(spec: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in spec.items() if k not in _MUTABLE_POD_SPEC}
        for kind in ("containers", "initContainers"):
            if isinstance(out.get(kind), list):
                out[kind] = [
                    {k: v for k, v in c.items() if k != "image"} if isinstance(c, Mapping) else c
                    for c in out[kind]
                ]
        return out

    if json_equal(comparable(a), comparable(b)):
        return []
    return [
        forbidden(
            "spec",
            "pod updates may not change fields other than "
            "`spec.containers[*].image`,`spec.initContainers[*].image`,"
            "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions "
            "to existing tolerations),`spec.terminationGracePeriodSeconds` "
            "(allow it to be set to 1 if it was previously negative)",
        )
    ]
