"""controller.render: the objects created per ComputeDomain, field for field.

The fields are those of the reference's templates/*.tmpl.yaml as its controller fills them in
(https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/tree/main/cmd/compute-domain-controller).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from api import names
from api.computedomain import StoredComputeDomain
from api.featuregates import FeatureGates
from api.objects import K8sObject
from api.opaque import ComputeDomainChannelConfig, ComputeDomainDaemonConfig, decode_config
from controller.render import (
    RenderSettings,
    cd_label_selector,
    cd_uid_of,
    cd_uid_selector,
    channel_allocation_mode,
    daemon_claim_template,
    daemon_set,
    is_ours,
    labels_of,
    parse_pull_secret_names,
    workload_claim_template,
)
from sim.apiserver import defaults
from sim.apiserver.builtin_schema import BuiltinSchemas
from sim.apiserver.errors import ApiError

U = "6b1f0c7e-2d4a-4e8b-9c3f-5a7d1e2b4c6f"
DAEMON_NAME = f"computedomain-daemon-{U}"
IMAGE = "registry.example.com/nvidia/compute-domain-driver:v0.5.0"
CD_LABEL = "resource.nvidia.com/computeDomain"
TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
FINALIZERS = ["resource.nvidia.com/computeDomain"]
REFERENCE_DEFAULT_GATES = (
    "AllAlpha=false,AllBeta=false,ComputeDomainCliques=true,ConsumableShares=false,"
    "ContextualLogging=true,CrashOnNVLinkFabricErrors=true,DRAListTypeAttributes=false,"
    "DeviceMetadata=false,DynamicMIG=false,FabricManagerPartitioning=false,"
    "HostManagedIMEXDaemon=false,IMEXDaemonsWithDNSNames=true,LoggingAlphaOptions=false,"
    "LoggingBetaOptions=true,MPSSupport=false,NVMLDeviceHealthCheck=false,"
    "PassthroughSupport=false,TimeSlicingSettings=false,"
)


def compute_domain(mode: str | None = "Single") -> StoredComputeDomain:
    """The CD as the controller reads it from its cache."""
    return StoredComputeDomain.from_dict(compute_domain_json(mode))


def compute_domain_json(mode: str | None = "Single") -> dict[str, Any]:
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": "rct"}}
    if mode is not None:
        channel["allocationMode"] = mode
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "ns1", "uid": U},
        "spec": {"numNodes": 0, "channel": channel},
    }


def settings(**overrides: Any) -> RenderSettings:
    values: dict[str, Any] = {"namespace": "drv", "image": IMAGE, "daemon_log_verbosity": 4}
    return RenderSettings(**(values | overrides))


@pytest.fixture(scope="module")
def builtin() -> BuiltinSchemas:
    return BuiltinSchemas()


def admitted(builtin: BuiltinSchemas, obj: dict[str, Any]) -> None:
    """The emulator's built-in admission takes the object without warnings, adding only the
    server's defaults (nothing of what the controller wrote is dropped or changed)."""
    stored, warnings = builtin.admit(obj, field_validation="Strict")
    assert warnings == []
    expected = copy.deepcopy(obj)
    defaults.apply(obj["apiVersion"].rpartition("/")[0], obj["kind"], expected)
    assert stored == expected


# --- one CD's object set: ns1/cd (uid U), RCT name rct, driver namespace drv -----------------


def test_workload_claim_template_every_field() -> None:
    assert workload_claim_template(compute_domain("All"), settings()) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": "rct",
            "namespace": "ns1",
            "labels": {CD_LABEL: U, TARGET_LABEL: "Workload"},
            "finalizers": FINALIZERS,
        },
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
                                    "apiVersion": "resource.nvidia.com/v1beta1",
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": U,
                                    "allocationMode": "All",
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def test_daemon_claim_template_every_field() -> None:
    assert daemon_claim_template(U, settings()) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": DAEMON_NAME,
            "namespace": "drv",
            "labels": {CD_LABEL: U, TARGET_LABEL: "Daemon"},
            "finalizers": FINALIZERS,
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "daemon",
                            "exactly": {"deviceClassName": "compute-domain-daemon.nvidia.com"},
                        }
                    ],
                    "config": [
                        {
                            "requests": ["daemon"],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {
                                    "apiVersion": "resource.nvidia.com/v1beta1",
                                    "kind": "ComputeDomainDaemonConfig",
                                    "domainID": U,
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def expected_daemon_set(pull_secrets: list[str] | None = None) -> dict[str, Any]:
    check = {"exec": {"command": ["compute-domain-agent", "daemon", "check"]}}

    def field_env(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    pod_spec: dict[str, Any] = {"serviceAccountName": "compute-domain-daemon-service-account"}
    if pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in pull_secrets]
    pod_spec |= {
        "nodeSelector": {CD_LABEL: U},
        "tolerations": [
            {"operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists", "effect": "NoExecute"},
            {"operator": "Exists", "effect": "PreferNoSchedule"},
        ],
        "resourceClaims": [
            {"name": "compute-domain-daemon", "resourceClaimTemplateName": DAEMON_NAME}
        ],
        "containers": [
            {
                "name": "compute-domain-daemon",
                "image": IMAGE,
                "command": ["compute-domain-agent", "daemon", "run"],
                "resources": {"claims": [{"name": "compute-domain-daemon"}]},
                "env": [
                    {"name": "LOG_VERBOSITY", "value": "4"},
                    {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": "18"},
                    field_env("NODE_NAME", "spec.nodeName"),
                    field_env("POD_IP", "status.podIP"),
                    field_env("POD_UID", "metadata.uid"),
                    field_env("POD_NAME", "metadata.name"),
                    field_env("POD_NAMESPACE", "metadata.namespace"),
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                    {"name": "FEATURE_GATES", "value": REFERENCE_DEFAULT_GATES},
                ],
                # The image's user is 65532; the daemon writes root-owned mounts.
                "securityContext": {"runAsUser": 0, "runAsGroup": 0},
                "startupProbe": check
                | {
                    "initialDelaySeconds": 0,
                    "periodSeconds": 1,
                    "timeoutSeconds": 10,
                    "failureThreshold": 1200,
                    "successThreshold": 1,
                },
                "livenessProbe": check
                | {
                    "periodSeconds": 60,
                    "timeoutSeconds": 10,
                    "failureThreshold": 20,
                    "successThreshold": 1,
                },
                "readinessProbe": check
                | {
                    "periodSeconds": 10,
                    "timeoutSeconds": 10,
                    "failureThreshold": 1,
                    "successThreshold": 1,
                },
            }
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": DAEMON_NAME,
            "namespace": "drv",
            "labels": {CD_LABEL: U},
            "finalizers": FINALIZERS,
        },
        "spec": {
            "selector": {"matchLabels": {CD_LABEL: U}},
            "template": {"metadata": {"labels": {CD_LABEL: U}}, "spec": pod_spec},
        },
    }


def test_daemon_set_every_field() -> None:
    assert daemon_set(U, settings()) == expected_daemon_set()


def test_daemon_set_env_order_matches_reference() -> None:
    env = daemon_set(U, settings())["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == [
        "LOG_VERBOSITY",
        "MAX_NODES_PER_IMEX_DOMAIN",
        "NODE_NAME",
        "POD_IP",
        "POD_UID",
        "POD_NAME",
        "POD_NAMESPACE",
        "NVIDIA_VISIBLE_DEVICES",
        "FEATURE_GATES",
    ]


def test_daemon_set_with_pull_secrets_verbosity_and_max_nodes() -> None:
    ds = daemon_set(
        U,
        settings(
            image_pull_secrets=("a", "b"), daemon_log_verbosity=7, max_nodes_per_imex_domain=4
        ),
    )
    expected = expected_daemon_set(["a", "b"])
    env = expected["spec"]["template"]["spec"]["containers"][0]["env"]
    env[0]["value"], env[1]["value"] = "7", "4"
    assert ds == expected
    # imagePullSecrets sits where the reference template has it (after serviceAccountName).
    assert list(ds["spec"]["template"]["spec"])[:2] == ["serviceAccountName", "imagePullSecrets"]


def test_no_image_pull_secrets_key_when_empty() -> None:
    assert "imagePullSecrets" not in daemon_set(U, settings())["spec"]["template"]["spec"]


def test_feature_gates_are_the_reference_default_string() -> None:
    env = daemon_set(U, settings())["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[-1] == {"name": "FEATURE_GATES", "value": REFERENCE_DEFAULT_GATES}
    assert FeatureGates().render() == REFERENCE_DEFAULT_GATES


def test_feature_gates_carry_the_controllers_effective_map() -> None:
    gates = FeatureGates.parse("MPSSupport=true").with_values(ComputeDomainCliques=False)
    env = daemon_set(U, settings(feature_gates=gates))["spec"]["template"]["spec"]["containers"][0][
        "env"
    ]
    value = next(e["value"] for e in env if e["name"] == "FEATURE_GATES")
    assert value == gates.render()
    assert "ComputeDomainCliques=false," in value
    assert "MPSSupport=true," in value
    assert FeatureGates.parse(value) == gates  # the daemon parses back the same map


def test_daemon_objects_share_the_uid_derived_name() -> None:
    ds = daemon_set(U, settings())
    rct = daemon_claim_template(U, settings())
    assert ds["metadata"]["name"] == rct["metadata"]["name"] == names.daemon_object_name(U)
    claim = ds["spec"]["template"]["spec"]["resourceClaims"][0]
    assert claim["resourceClaimTemplateName"] == rct["metadata"]["name"]


def test_no_owner_references_or_annotations() -> None:
    for obj in (
        workload_claim_template(compute_domain(), settings()),
        daemon_claim_template(U, settings()),
        daemon_set(U, settings()),
    ):
        assert set(obj["metadata"]) == {"name", "namespace", "labels", "finalizers"}


def test_rendering_returns_fresh_objects() -> None:
    """Callers may mutate what they get (e.g. the API client): no shared state leaks."""
    first = daemon_set(U, settings())
    first["spec"]["template"]["spec"]["containers"][0]["command"].append("x")
    first["metadata"]["finalizers"].append("x")
    assert daemon_set(U, settings()) == expected_daemon_set()


def test_opaque_parameters_decode_with_the_plugins_strict_decoder() -> None:
    wl = workload_claim_template(compute_domain("All"), settings())
    config = decode_config(wl["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"])
    assert isinstance(config, ComputeDomainChannelConfig)
    assert (config.domain_id, config.all_channels) == (U, True)
    dm = daemon_claim_template(U, settings())
    config = decode_config(dm["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"])
    assert isinstance(config, ComputeDomainDaemonConfig)
    assert config.domain_id == U


# --- allocation modes ------------------------------------------------------------------------
# The reference's cases: https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-controller/resourceclaimtemplate_test.go


@pytest.mark.parametrize(
    ("cd_mode", "host_managed", "expected"),
    [
        ("All", True, "Single"),
        ("", True, "Single"),
        ("All", False, "All"),
        ("Single", False, "Single"),
        ("", False, ""),  # derived: driverManaged passes "" through unchanged
        (None, True, "Single"),
        (None, False, None),
    ],
)
def test_channel_allocation_mode(cd_mode: str | None, host_managed: bool, expected: str) -> None:
    assert channel_allocation_mode(cd_mode, host_managed) == expected


def rendered_mode(cd_mode: str | None, host_managed: bool) -> dict[str, Any]:
    rct = workload_claim_template(compute_domain(cd_mode), settings(host_managed=host_managed))
    return rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]


@pytest.mark.parametrize(
    ("cd_mode", "host_managed", "expected"),
    [
        ("All", True, "Single"),
        ("", True, "Single"),
        (None, True, "Single"),
        ("All", False, "All"),
        ("Single", False, "Single"),
    ],
)
def test_workload_template_allocation_mode(
    cd_mode: str | None, host_managed: bool, expected: str
) -> None:
    assert rendered_mode(cd_mode, host_managed)["allocationMode"] == expected


@pytest.mark.parametrize("cd_mode", ["", None])
def test_empty_mode_driver_managed_omits_the_key(cd_mode: str | None) -> None:
    """The reference renders a YAML null here; we never write a null allocationMode."""
    assert "allocationMode" not in rendered_mode(cd_mode, False)


def test_workload_template_is_the_same_in_both_modes_apart_from_the_mode() -> None:
    driver = workload_claim_template(compute_domain("Single"), settings())
    host = workload_claim_template(compute_domain("All"), settings(host_managed=True))
    assert driver == host


def test_host_managed_renders_no_daemon_objects() -> None:
    with pytest.raises(ValueError, match="hostManaged"):
        daemon_set(U, settings(host_managed=True))
    with pytest.raises(ValueError, match="hostManaged"):
        daemon_claim_template(U, settings(host_managed=True))


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (("metadata", "uid"), "metadata.uid"),
        (("metadata", "namespace"), "metadata.namespace"),
        (("spec", "channel", "resourceClaimTemplate", "name"), "resourceClaimTemplate.name"),
    ],
)
def test_workload_template_needs_uid_namespace_and_name(
    path: tuple[str, ...], message: str
) -> None:
    cd = compute_domain_json()
    parent = cd
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    with pytest.raises(ValueError, match=message):
        workload_claim_template(StoredComputeDomain.from_dict(cd), settings())


def test_daemon_objects_need_a_uid() -> None:
    with pytest.raises(ValueError):
        daemon_set("", settings())
    with pytest.raises(ValueError):
        daemon_claim_template("", settings())


# --- pull secret names ------------------------------------------------------------------------
# Parsed as the reference does: commas and whitespace separate names, empty ones are dropped.


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        (None, ()),
        ("   ", ()),
        (",,,", ()),
        ("a", ("a",)),
        ("a,b", ("a", "b")),
        (" a , b ", ("a", "b")),
        ("a,,b,", ("a", "b")),
        ("a b\tc\nd", ("a", "b", "c", "d")),
        ("a, b c,d", ("a", "b", "c", "d")),
    ],
)
def test_parse_pull_secret_names(text: str | None, expected: tuple[str, ...]) -> None:
    assert parse_pull_secret_names(text) == expected


# --- labels and selectors ----------------------------------------------------------------------


def test_is_ours_checks_uid_and_target() -> None:
    wl = K8sObject.from_dict(workload_claim_template(compute_domain(), settings()))
    dm = K8sObject.from_dict(daemon_claim_template(U, settings()))
    ds = K8sObject.from_dict(daemon_set(U, settings()))
    assert is_ours(wl, U, names.TARGET_WORKLOAD)
    assert not is_ours(wl, U, names.TARGET_DAEMON)
    assert is_ours(dm, U, names.TARGET_DAEMON)
    assert is_ours(ds, U)
    assert not is_ours(ds, U, names.TARGET_DAEMON)  # the DaemonSet has no target label
    assert not is_ours(ds, "other-uid")
    user_rct = K8sObject.from_dict({"metadata": {"name": "rct", "namespace": "ns1"}})  # no labels
    assert not is_ours(user_rct, U, names.TARGET_WORKLOAD)
    assert labels_of(user_rct) == {}
    assert cd_uid_of(user_rct) is None
    assert cd_uid_of(ds) == U


def test_selectors() -> None:
    assert cd_label_selector() == CD_LABEL
    assert cd_label_selector("Workload") == f"{CD_LABEL},{TARGET_LABEL} in (Workload)"
    assert cd_uid_selector(U) == f"{CD_LABEL} in ({U})"


# --- the emulator's built-in admission accepts what we render ---------------------------------


@pytest.mark.parametrize("host_managed", [False, True])
@pytest.mark.parametrize("mode", ["All", "Single", "", None])
def test_workload_template_is_admitted(
    builtin: BuiltinSchemas, mode: str | None, host_managed: bool
) -> None:
    admitted(
        builtin, workload_claim_template(compute_domain(mode), settings(host_managed=host_managed))
    )


def test_daemon_objects_are_admitted(builtin: BuiltinSchemas) -> None:
    admitted(builtin, daemon_claim_template(U, settings()))
    admitted(builtin, daemon_set(U, settings()))
    admitted(builtin, daemon_set(U, settings(image_pull_secrets=("a", "b"))))


def broken_variants() -> list[tuple[str, Any, str]]:
    """(object, how to break it, the field the refusal names)."""

    def no_image(ds: dict[str, Any]) -> None:
        del ds["spec"]["template"]["spec"]["containers"][0]["image"]

    def selector_mismatch(ds: dict[str, Any]) -> None:
        ds["spec"]["selector"]["matchLabels"][CD_LABEL] = "someone-else"

    def no_containers(ds: dict[str, Any]) -> None:
        ds["spec"]["template"]["spec"]["containers"] = []

    def probe_threshold_as_string(ds: dict[str, Any]) -> None:
        ds["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["failureThreshold"] = "x"

    def no_device_class(rct: dict[str, Any]) -> None:
        del rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]

    def bad_name(rct: dict[str, Any]) -> None:
        rct["metadata"]["name"] = "Not_A_Name"

    return [
        ("ds", no_image, "spec.template.spec.containers[0].image: Required value"),
        ("ds", selector_mismatch, "`selector` does not match template `labels`"),
        ("ds", no_containers, "spec.template.spec.containers: Required value"),
        ("ds", probe_threshold_as_string,
         "startupProbe.failureThreshold in body must be of type integer"),
        ("rct", no_device_class, "requests[0].exactly.deviceClassName: Required value"),
        ("rct", bad_name, "metadata.name: Invalid value"),
    ]


@pytest.mark.parametrize(
    ("which", "breaks", "names_field"),
    broken_variants(),
    ids=[b.__name__ for _, b, _ in broken_variants()],
)
def test_broken_copies_are_refused(
    builtin: BuiltinSchemas, which: str, breaks: Any, names_field: str
) -> None:
    """The admission check above bites: a damaged copy of a rendered object is refused."""
    obj = daemon_set(U, settings()) if which == "ds" else daemon_claim_template(U, settings())
    broken = copy.deepcopy(obj)
    breaks(broken)
    with pytest.raises(ApiError) as err:
        builtin.admit(broken)
    assert err.value.code in (400, 422)
    assert names_field in str(err.value)
