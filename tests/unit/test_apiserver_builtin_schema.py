"""sim.apiserver.builtin_schema: built-in objects against the Kubernetes JSON schemas plus
the hand-written rules the project's controller output must satisfy."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from apiserver_cases import (
    API_VERSION,
    JSON_VALUES,
    SUBDOMAIN_MSG,
    load_crd,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.apiserver import defaults
from sim.apiserver.builtin_schema import BuiltinSchemas
from sim.apiserver.crd_validation import validate_crd
from sim.apiserver.errors import ApiError


@pytest.fixture(scope="module")
def cd_crd() -> dict[str, Any]:
    return load_crd("computedomains")


@pytest.fixture(scope="module")
def builtin() -> BuiltinSchemas:
    return BuiltinSchemas()


# --- built-in objects -------------------------------------------------------------------

CD_UID = "3f1c9a52-6a5e-4c2b-9d7e-0a1b2c3d4e5f"
CD_LABEL = {"resource.nvidia.com/computeDomain": CD_UID}


def daemonset() -> dict[str, Any]:
    """What the controller renders for one ComputeDomain's IMEX daemons."""
    check = {"exec": {"command": ["compute-domain-daemon", "check"]}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": f"computedomain-daemon-{CD_UID[:8]}",
            "namespace": "nvidia-dra-driver",
            "labels": dict(CD_LABEL),
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "ComputeDomain",
                    "name": "cd",
                    "uid": CD_UID,
                    "controller": True,
                }
            ],
            "finalizers": ["resource.nvidia.com/computeDomain"],
        },
        "spec": {
            "selector": {"matchLabels": dict(CD_LABEL)},
            "template": {
                "metadata": {"labels": dict(CD_LABEL)},
                "spec": {
                    "serviceAccountName": "compute-domain-daemon-service-account",
                    "nodeSelector": dict(CD_LABEL),
                    "resourceClaims": [
                        {
                            "name": "compute-domain-daemon",
                            "resourceClaimTemplateName": "cd-daemon-claim",
                        }
                    ],
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"operator": "Exists"},
                    ],
                    "containers": [
                        {
                            "name": "compute-domain-daemon",
                            "image": "nvcr.io/nvidia/k8s-dra-driver:v25.8.0",
                            "command": ["compute-domain-daemon", "run"],
                            "env": [
                                {
                                    "name": "NODE_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                },
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "status.podIP",
                                        }
                                    },
                                },
                                {"name": "CLIQUE_ID", "value": ""},
                            ],
                            "startupProbe": {**check, "periodSeconds": 1, "failureThreshold": 60},
                            "livenessProbe": {**check, "periodSeconds": 10},
                            "readinessProbe": dict(check),
                            "resources": {
                                "claims": [{"name": "compute-domain-daemon"}],
                                "limits": {"memory": "256Mi", "cpu": 1},
                            },
                            "securityContext": {"privileged": True},
                            "volumeMounts": [{"name": "run", "mountPath": "/run/nvidia"}],
                        }
                    ],
                    "volumes": [{"name": "run", "hostPath": {"path": "/run/nvidia"}}],
                },
            },
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "100%"},
            },
        },
    }


def claim_template() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "imex-channel-0", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "channel",
                            "exactly": {
                                "deviceClassName": "compute-domain-default-channel.nvidia.com"
                            },
                        }
                    ],
                    "config": [
                        {
                            "requests": ["channel"],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {
                                    "apiVersion": API_VERSION,
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": CD_UID,
                                    "allocationMode": "Single",
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def claim() -> dict[str, Any]:
    result = {
        "request": "channel",
        "driver": "compute-domain.nvidia.com",
        "pool": "node-1",
        "device": "channel-0",
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "workload-0-imex-x7k2p", "namespace": "default"},
        "spec": claim_template()["spec"]["spec"],
        "status": {
            "allocation": {
                "devices": {
                    "results": [result],
                    "config": [
                        {
                            "source": "FromClaim",
                            "requests": ["channel"],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {"a": 1},
                            },
                        }
                    ],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [
                {
                    "resource": "pods",
                    "name": "workload-0",
                    "uid": "1b1c2d3e-0000-1111-2222-333344445555",
                }
            ],
        },
    }


def resource_slice() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-1-compute-domain.nvidia.com-abcde"},
        "spec": {
            "driver": "compute-domain.nvidia.com",
            "nodeName": "node-1",
            "pool": {"name": "node-1", "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "channel-0",
                    "attributes": {"type": {"string": "channel"}, "id": {"int": 0}},
                },
                {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}}},
            ],
        },
    }


def device_class() -> dict[str, Any]:
    expr = (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel'"
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "compute-domain-default-channel.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": expr}}]},
    }


def node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-1", "labels": {"nvidia.com/gpu.clique": "c1.1"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "8", "nvidia.com/gpu": 4},
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2024-01-01T00:00:00Z"}
            ],
            "nodeInfo": {"kubeletVersion": "v1.34.0"},
        },
    }


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "workload-0", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "ubuntu:22.04",
                    "resources": {"claims": [{"name": "imex"}]},
                }
            ],
            "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": "imex-channel-0"}],
            "restartPolicy": "Never",
        },
        "status": {"phase": "Running", "podIP": "10.0.0.5"},
    }


def lease() -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "compute-domain-controller", "namespace": "nvidia"},
        "spec": {
            "holderIdentity": "pod-1",
            "leaseDurationSeconds": 15,
            "renewTime": "2024-01-01T00:00:05.123456Z",
            "leaseTransitions": 0,
        },
    }


def event() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "cd.17a8b9c0d1e2f3a4", "namespace": "default"},
        "involvedObject": {"kind": "ComputeDomain", "name": "cd", "namespace": "default"},
        "reason": "Created",
        "message": "created",
        "type": "Normal",
        "count": 1,
        "firstTimestamp": "2024-01-01T00:00:00Z",
        "source": {"component": "controller"},
    }


def role() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "compute-domain-daemon", "namespace": "nvidia"},
        "rules": [
            {
                "apiGroups": ["resource.nvidia.com"],
                "resources": ["computedomaincliques"],
                "verbs": ["get", "update"],
            }
        ],
    }


def cluster_role() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "system:compute-domain-controller"},
        "rules": [
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["*"]},
            {"nonResourceURLs": ["/healthz"], "verbs": ["get"]},
        ],
    }


def role_binding() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "compute-domain-daemon", "namespace": "nvidia"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "compute-domain-daemon",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": "daemon", "namespace": "nvidia"},
            {"kind": "User", "name": "alice"},
        ],
    }


VALID = [
    daemonset,
    claim_template,
    claim,
    resource_slice,
    device_class,
    node,
    pod,
    lease,
    event,
    role,
    cluster_role,
    role_binding,
]


@pytest.mark.parametrize("make", VALID, ids=lambda f: f.__name__)
def test_realistic_builtins_are_valid(builtin: BuiltinSchemas, make: Callable[[], Any]) -> None:
    obj = make()
    assert builtin.has_schema(obj["apiVersion"], obj["kind"])
    assert builtin.validate(obj) == []
    assert builtin.unknown_fields(obj) == []
    assert builtin.decode_error(obj) is None
    sent = copy.deepcopy(obj)
    stored, warnings = builtin.admit(obj)
    assert obj == sent and warnings == []  # the caller's object is left alone
    group = obj["apiVersion"].rpartition("/")[0]
    defaults.apply(group, obj["kind"], sent)
    assert stored == sent  # nothing lost, only the server's defaults added


def test_pod_defaults_are_the_servers(builtin: BuiltinSchemas) -> None:
    """What kube-apiserver v1.37 stores for a bare pod (its defaults.go)."""
    stored, _ = builtin.admit({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{
            "name": "c", "image": "busybox:1.36",
            "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "ports": [{"containerPort": 80}],
            "readinessProbe": {"httpGet": {"port": 80}},
        }], "volumes": [{"name": "h", "hostPath": {"path": "/x"}}]},
    })  # fmt: skip
    spec = stored["spec"]
    assert {k: spec[k] for k in ("dnsPolicy", "restartPolicy", "schedulerName",
                                 "terminationGracePeriodSeconds", "securityContext",
                                 "enableServiceLinks")} == {
        "dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
        "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30,
        "securityContext": {}, "enableServiceLinks": True}  # fmt: skip
    [container] = spec["containers"]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] == "v1"
    assert container["ports"][0]["protocol"] == "TCP"
    assert container["readinessProbe"] == {
        "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1,
        "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}  # fmt: skip
    assert spec["volumes"][0]["hostPath"] == {"path": "/x", "type": ""}


def test_the_newest_schema_version_is_used(builtin: BuiltinSchemas) -> None:
    assert builtin.schema_dir.name.endswith("-local")  # non-strict
    assert (builtin.schema_dir / "resourceclaimtemplate-resource-v1.json").is_file()
    major, minor = builtin.kubernetes_version.split(".")
    assert (int(major), int(minor)) >= (1, 34)


def _edit(
    make: Callable[[], dict[str, Any]], edit: Callable[[dict[str, Any]], Any]
) -> dict[str, Any]:
    obj = make()
    edit(obj)
    return obj


def _ctr(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]["containers"][0]


def _req(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["spec"]["devices"]["requests"][0]


INVALID = [
    (
        "daemonset without image",
        _edit(daemonset, lambda o: _ctr(o).pop("image")),
        "spec.template.spec.containers[0].image",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "daemonset container without name",
        _edit(daemonset, lambda o: _ctr(o).pop("name")),
        "spec.template.spec.containers[0].name",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "selector does not match",
        _edit(daemonset, lambda o: o["spec"]["template"]["metadata"].update(labels={"app": "x"})),
        "spec.template.metadata.labels",
        "FieldValueInvalid",
        'Invalid value: map[string]string{"app":"x"}: `selector` does not match template `labels`',
    ),
    (
        "empty selector",
        _edit(daemonset, lambda o: o["spec"].update(selector={})),
        "spec.selector",
        "FieldValueInvalid",
        "empty selector is invalid for daemonset",
    ),
    (
        "restartPolicy",
        _edit(daemonset, lambda o: o["spec"]["template"]["spec"].update(restartPolicy="Never")),
        "spec.template.spec.restartPolicy",
        "FieldValueNotSupported",
        'Unsupported value: "Never": supported values: "Always"',
    ),
    (
        "bad name",
        _edit(daemonset, lambda o: o["metadata"].update(name="Bad_Name")),
        "metadata.name",
        "FieldValueInvalid",
        f'Invalid value: "Bad_Name": {SUBDOMAIN_MSG}',
    ),
    (
        "unsupported fieldRef",
        _edit(
            daemonset,
            lambda o: _ctr(o)["env"][0]["valueFrom"]["fieldRef"].update(fieldPath="spec.foo"),
        ),
        "spec.template.spec.containers[0].env[0].valueFrom.fieldRef.fieldPath",
        "FieldValueNotSupported",
        'Unsupported value: "spec.foo": supported values: '
        '"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", '
        '"spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", '
        '"status.podIPs"',
    ),
    (
        "probe without handler",
        _edit(daemonset, lambda o: _ctr(o).update(livenessProbe={"periodSeconds": 1})),
        "spec.template.spec.containers[0].livenessProbe",
        "FieldValueRequired",
        "Required value: must specify a handler type",
    ),
    (
        "claim without source",
        _edit(
            daemonset,
            lambda o: o["spec"]["template"]["spec"]["resourceClaims"][0].pop(
                "resourceClaimTemplateName"
            ),
        ),
        "spec.template.spec.resourceClaims[0]",
        "FieldValueInvalid",
        'Invalid value: core.PodResourceClaim{Name:"compute-domain-daemon", '
        "ResourceClaimName:(*string)(nil), ResourceClaimTemplateName:(*string)(nil)}: must "
        "specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
    ),
    (
        "container claim not in pod",
        _edit(daemonset, lambda o: _ctr(o)["resources"]["claims"][0].update(name="other")),
        "spec.template.spec.containers[0].resources.claims[0]",
        "FieldValueNotFound",
        'Not found: "other": must be one of the names in pod.spec.resourceClaims: '
        "compute-domain-daemon",
    ),
    (
        "toleration effect",
        _edit(
            daemonset,
            lambda o: o["spec"]["template"]["spec"]["tolerations"][0].update(effect="Never"),
        ),
        "spec.template.spec.tolerations[0].effect",
        "FieldValueNotSupported",
        'Unsupported value: "Never": supported values: "NoSchedule", "PreferNoSchedule", '
        '"NoExecute"',
    ),
    (
        "request without exactly",
        _edit(claim_template, lambda o: _req(o).pop("exactly")),
        "spec.spec.devices.requests[0]",
        "FieldValueRequired",
        "Required value: exactly one of `exactly` or `firstAvailable` is required",
    ),
    (
        "request with both",
        _edit(
            claim_template,
            lambda o: _req(o).update(firstAvailable=[{"name": "a", "deviceClassName": "c"}]),
        ),
        "spec.spec.devices.requests[0]",
        "FieldValueInvalid",
        'Invalid value: null: exactly '
        "one of `exactly` or `firstAvailable` is required, but multiple fields are set",
    ),
    (
        "request without class",
        _edit(claim_template, lambda o: _req(o)["exactly"].pop("deviceClassName")),
        "spec.spec.devices.requests[0].exactly.deviceClassName",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "config names unknown request",
        _edit(
            claim_template,
            lambda o: o["spec"]["spec"]["devices"]["config"][0].update(requests=["x"]),
        ),
        "spec.spec.devices.config[0].requests[0]",
        "FieldValueInvalid",
        'Invalid value: "x": must be the name of a request in the claim or the name of a request '
        "and a subrequest separated by '/'",
    ),
    (
        "parameters not an object",
        _edit(
            claim_template,
            lambda o: o["spec"]["spec"]["devices"]["config"][0]["opaque"].update(parameters=[1]),
        ),
        "spec.spec.devices.config[0].opaque.parameters",
        "FieldValueInvalid",
        'Invalid value: "<value omitted>": must be a valid JSON object',
    ),
    (
        "allocation for unknown request",
        _edit(
            claim, lambda o: o["status"]["allocation"]["devices"]["results"][0].update(request="x")
        ),
        "status.allocation.devices.results[0].request",
        "FieldValueInvalid",
        'Invalid value: "x": must be the name of a request in the claim',
    ),
    (
        "reserved without allocation",
        _edit(claim, lambda o: o["status"].pop("allocation")),
        "status.reservedFor",
        "FieldValueForbidden",
        "Forbidden: may not be specified when `allocated` is not set",
    ),
    (
        "slice without node selection",
        _edit(resource_slice, lambda o: o["spec"].pop("nodeName")),
        "spec",
        "FieldValueRequired",
        "Required value: exactly one of "
        "`nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
    ),
    (
        "slice duplicate device",
        _edit(resource_slice, lambda o: o["spec"]["devices"].append({"name": "channel-0"})),
        "spec.devices[2]",
        "FieldValueDuplicate",
        'Duplicate value: "channel-0"',
    ),
    (
        "device class without cel",
        _edit(device_class, lambda o: o["spec"].update(selectors=[{}])),
        "spec.selectors[0].cel",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "node taint effect",
        _edit(node, lambda o: o["spec"]["taints"][0].pop("effect")),
        "spec.taints[0].effect",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "pod duplicate container",
        _edit(pod, lambda o: o["spec"]["containers"].append(dict(o["spec"]["containers"][0]))),
        "spec.containers[1].name",
        "FieldValueDuplicate",
        'Duplicate value: "main"',
    ),
    (
        "pod without containers",
        _edit(pod, lambda o: o["spec"].update(containers=[])),
        "spec.containers",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "lease duration",
        _edit(lease, lambda o: o["spec"].update(leaseDurationSeconds=0)),
        "spec.leaseDurationSeconds",
        "FieldValueInvalid",
        "Invalid value: 0: must be greater than 0",
    ),
    (
        "event without name",
        _edit(event, lambda o: o.pop("metadata")),
        "metadata.name",
        "FieldValueRequired",
        "Required value: name or generateName is required",
    ),
    (
        "role without verbs",
        _edit(role, lambda o: o["rules"][0].update(verbs=[])),
        "rules[0].verbs",
        "FieldValueRequired",
        "Required value: verbs must contain at least one value",
    ),
    (
        "binding to unknown kind",
        _edit(role_binding, lambda o: o["roleRef"].update(kind="X")),
        "roleRef.kind",
        "FieldValueNotSupported",
        'Unsupported value: "X": supported values: "Role", "ClusterRole"',
    ),
    (
        "label value",
        _edit(node, lambda o: o["metadata"]["labels"].update(bad="no way")),
        "metadata.labels",
        "FieldValueInvalid",
        'Invalid value: "no way": a valid label must be',
    ),
]


@pytest.mark.parametrize(
    ("obj", "field", "reason", "message"),
    [case[1:] for case in INVALID],
    ids=[case[0] for case in INVALID],
)
def test_invalid_builtins_are_refused(
    builtin: BuiltinSchemas, obj: dict[str, Any], field: str, reason: str, message: str
) -> None:
    causes = builtin.validate(obj)
    assert [(c.field, c.reason) for c in causes] == [(field, reason)]
    assert message in causes[0].message
    with pytest.raises(ApiError) as exc:
        builtin.admit(obj)
    assert exc.value.code == 422
    assert exc.value.kind == obj["kind"]


def test_missing_selector_reports_both_problems(builtin: BuiltinSchemas) -> None:
    obj = _edit(daemonset, lambda o: o["spec"].pop("selector"))
    assert [(c.field, c.reason) for c in builtin.validate(obj)] == [
        ("spec.selector", "FieldValueRequired"),
        ("spec.template.metadata.labels", "FieldValueInvalid"),
    ]


def test_wrong_types_are_decode_errors(builtin: BuiltinSchemas) -> None:
    """A real server answers JSON that does not fit the Go types with 400, not 422."""
    obj = _edit(daemonset, lambda o: o["spec"].update(revisionHistoryLimit="ten"))
    (cause,) = builtin.validate(obj)
    assert (cause.field, cause.reason) == ("spec.revisionHistoryLimit", "FieldValueTypeInvalid")
    with pytest.raises(ApiError) as exc:
        builtin.admit(obj)
    assert (exc.value.code, exc.value.message) == (
        400,
        'DaemonSet in version "v1" cannot be handled as a DaemonSet: '
        'spec.revisionHistoryLimit in body must be of type integer: "string"',
    )
    port = _edit(daemonset, lambda o: _ctr(o).update(ports=[{"containerPort": 1.5}]))
    error = builtin.decode_error(port)
    assert error is not None and error.message.endswith(
        'spec.template.spec.containers[0].ports[0].containerPort in body must be of type '
        'integer: "number"'
    )
    wide = _edit(daemonset, lambda o: _ctr(o).update(ports=[{"containerPort": 2**31}]))
    error = builtin.decode_error(wide)
    assert error is not None and error.message.endswith(
        "spec.template.spec.containers[0].ports[0].containerPort in body must be of type "
        "int32: 2147483648"
    )
    count = _edit(claim_template, lambda o: _req(o)["exactly"].update(count="1"))
    assert [c.field for c in builtin.validate(count)] == [
        "spec.spec.devices.requests[0].exactly.count"
    ]


def test_nulls_and_quantities_decode_like_go(builtin: BuiltinSchemas) -> None:
    obj = daemonset()
    obj["spec"]["revisionHistoryLimit"] = None
    _ctr(obj)["resources"]["limits"] = {"cpu": 0.5, "memory": "1Gi"}
    _ctr(obj)["ports"] = [{"containerPort": 80, "hostPort": None}]
    assert builtin.validate(obj) == []


def test_unknown_fields_are_reported_and_stripped(builtin: BuiltinSchemas) -> None:
    obj = daemonset()
    _ctr(obj)["imagePullPolcy"] = "Always"
    obj["spec"]["template"]["spec"]["hostnetwork"] = True
    obj["spec"]["weird.key"] = 1
    paths = [
        "spec.template.spec.containers[0].imagePullPolcy",
        "spec.template.spec.hostnetwork",
        "spec.weird.key",
    ]
    assert builtin.validate(obj) == []  # not a validation error: the server drops them
    assert sorted(builtin.unknown_fields(obj)) == sorted(paths)
    stored, warnings = builtin.admit(obj)
    expected = daemonset()
    defaults.apply("apps", "DaemonSet", expected)
    assert stored == expected
    assert sorted(warnings) == sorted(f'unknown field "{p}"' for p in paths)
    assert obj["spec"]["weird.key"] == 1  # input untouched
    with pytest.raises(ApiError) as exc:
        builtin.admit(obj, field_validation="Strict")
    assert exc.value.code == 400 and "strict decoding error: unknown field" in exc.value.message
    assert builtin.admit(obj, field_validation="Ignore") == (expected, [])


def test_kinds_without_schema_pass(builtin: BuiltinSchemas) -> None:
    assert builtin.validate({"apiVersion": API_VERSION, "kind": "ComputeDomain"}) == []
    assert builtin.validate({"apiVersion": "v1", "kind": "NoSuchKind", "spec": 1}) == []
    assert builtin.validate({"kind": "Pod"}) == []
    assert builtin.validate({"apiVersion": "v1", "kind": "../../x"}) == []
    assert not builtin.has_schema("apps/v1", "Pod")


@pytest.mark.parametrize(
    ("make", "edit", "field", "message"),
    [
        (
            daemonset,
            lambda o: o["spec"]["selector"]["matchLabels"].update(x="y"),
            "spec.selector",
            "field is immutable",
        ),
        (
            claim_template,
            lambda o: _req(o)["exactly"].update(deviceClassName="other"),
            "spec",
            "field is immutable",
        ),
        (
            role_binding,
            lambda o: o["roleRef"].update(name="other"),
            "roleRef",
            "cannot change roleRef",
        ),
        (
            pod,
            lambda o: o["spec"].update(nodeName="node-2"),
            "spec",
            "pod updates may not change fields other than",
        ),
    ],
)
def test_immutable_fields_on_update(
    builtin: BuiltinSchemas,
    make: Callable[[], dict[str, Any]],
    edit: Callable[[dict[str, Any]], Any],
    field: str,
    message: str,
) -> None:
    old = make()
    new = _edit(make, edit)
    if make is daemonset:
        new["spec"]["template"]["metadata"]["labels"]["x"] = "y"
    causes = builtin.validate_update(new, old)
    assert [c.field for c in causes] == [field]
    assert message in causes[0].message
    assert builtin.validate_update(copy.deepcopy(old), old) == []
    image_only = _edit(pod, lambda o: o["spec"]["containers"][0].update(image="ubuntu:24.04"))
    assert builtin.validate_update(image_only, pod()) == []


def test_crd_objects_get_schema_checks_only(
    builtin: BuiltinSchemas, cd_crd: dict[str, Any]
) -> None:
    """The CRD-specific rules are validate_crd's; the builtin pass checks shape and names."""
    assert builtin.validate(cd_crd) == []
    broken = copy.deepcopy(cd_crd)
    broken["spec"]["scope"] = "Global"
    assert builtin.validate(broken) == []
    assert [c.field for c in validate_crd(broken)] == ["spec.scope"]
    broken["spec"]["versions"] = "v1"
    assert [c.reason for c in builtin.validate(broken)] == ["FieldValueTypeInvalid"]


def test_quantities_must_parse(builtin: BuiltinSchemas) -> None:
    obj = _edit(daemonset, lambda o: _ctr(o)["resources"]["limits"].update(memory="lots"))
    error = builtin.decode_error(obj)
    assert error is not None and error.code == 400
    assert error.message.endswith(
        "quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


def test_compiled_schemas_are_cached(builtin: BuiltinSchemas) -> None:
    builtin.validate(daemonset())
    first = builtin._kind(daemonset())
    builtin.validate(daemonset())
    assert first is not None and builtin._kind(daemonset()) is first


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    junk=JSON_VALUES, where=st.sampled_from(["spec", "template", "tpl_spec", "container", "meta"])
)
def test_builtin_validation_never_crashes(builtin: BuiltinSchemas, junk: Any, where: str) -> None:
    obj = daemonset()
    target = {
        "spec": obj,
        "template": obj["spec"],
        "tpl_spec": obj["spec"]["template"],
        "container": obj["spec"]["template"]["spec"],
        "meta": obj,
    }[where]
    key = {
        "spec": "spec",
        "template": "template",
        "tpl_spec": "spec",
        "container": "containers",
        "meta": "metadata",
    }[where]
    target[key] = junk
    assert isinstance(builtin.validate(obj), list)
    assert isinstance(builtin.unknown_fields(obj), list)
    builtin.decode_error(obj)
