"""The Helm chart (packaging/helm/dra-driver-nvidia-gpu) rendered by the real helm
(`make helm`): lint, the reference chart's names for the same release and values, each IMEX
mode and placement, the reference's own values file, and the clear failure of every value it
refuses. The install into a running cluster is tests/sim/test_helm_install.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from api import names
from api.version import __version__
from sim.cluster import manifests

CHART = str(manifests.CHART_DIR)
REPO = Path(__file__).resolve().parents[2]
REFERENCE_VALUES = REPO / "tests" / "data" / "reference-chart" / "values.yaml"
RELEASE = NS = "dra-driver-nvidia-gpu"

# What the reference chart renders for the ComputeDomain part of release
# dra-driver-nvidia-gpu in namespace dra-driver-nvidia-gpu (resources.gpus.enabled=false).
REFERENCE_NAMES = {
    ("Deployment", NS, "dra-driver-nvidia-gpu-controller"),
    ("DaemonSet", NS, "dra-driver-nvidia-gpu-kubelet-plugin"),
    ("ServiceAccount", NS, "dra-driver-nvidia-gpu-service-account-controller"),
    ("ServiceAccount", NS, "dra-driver-nvidia-gpu-service-account-kubeletplugin"),
    ("ServiceAccount", NS, "compute-domain-daemon-service-account"),
    ("ClusterRole", "", "dra-driver-nvidia-gpu-clusterrole-controller"),
    ("ClusterRole", "", "dra-driver-nvidia-gpu-clusterrole-kubeletplugin"),
    ("ClusterRole", "", "compute-domain-daemon-role"),
    ("ClusterRoleBinding", "", f"dra-driver-nvidia-gpu-clusterrole-binding-controller-{NS}"),
    ("ClusterRoleBinding", "", "dra-driver-nvidia-gpu-clusterrole-binding-kubeletplugin"),
    ("ClusterRoleBinding", "", "compute-domain-daemon-role-binding"),
    ("Role", NS, "dra-driver-nvidia-gpu-role-controller"),
    ("Role", NS, "dra-driver-nvidia-gpu-role-kubeletplugin"),
    ("RoleBinding", NS, "dra-driver-nvidia-gpu-role-binding-controller"),
    ("RoleBinding", NS, "dra-driver-nvidia-gpu-role-binding-kubeletplugin"),
    ("DeviceClass", "", names.DEVICE_CLASS_DEFAULT_CHANNEL),
    ("DeviceClass", "", names.DEVICE_CLASS_DAEMON),
    ("ValidatingAdmissionPolicy", "", "resourceslices-policy-dra-driver-nvidia-gpu"),
    ("ValidatingAdmissionPolicyBinding", "", "resourceslices-policy-dra-driver-nvidia-gpu"),
}
CONTROL_PLANE_TOLERATIONS = [
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
]
GPU_NODE_TERMS = [
    {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
    for key, value in (
        ("feature.node.kubernetes.io/pci-10de.present", "true"),
        ("feature.node.kubernetes.io/pci-0302_10de.present", "true"),
        ("feature.node.kubernetes.io/pci-0300_10de.present", "true"),
        ("feature.node.kubernetes.io/cpu-model.vendor_id", "NVIDIA"),
        ("nvidia.com/gpu.present", "true"),
    )
]

Obj = dict[str, Any]


def helm(helm_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return manifests.run_helm(helm_bin, args, check=False)


def render(helm_bin: Path, *args: str, release: str = RELEASE, namespace: str = NS) -> list[Obj]:
    done = helm(helm_bin, "template", release, CHART, "--namespace", namespace, *args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def refused(helm_bin: Path, *args: str, namespace: str = NS) -> str:
    done = helm(helm_bin, "template", RELEASE, CHART, "--namespace", namespace, *args)
    assert done.returncode == 1, done.stdout[:2000]
    return done.stderr


def key(obj: Obj) -> tuple[str, str, str]:
    md = obj["metadata"]
    return obj["kind"], md.get("namespace", ""), md["name"]


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    [found] = [o for o in objects if o["kind"] == kind
               and (name is None or o["metadata"]["name"] == name)]
    return found


def pod_spec(objects: list[Obj], kind: str) -> Obj:
    spec: Obj = one(objects, kind)["spec"]["template"]["spec"]
    return spec


def env(container: Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or ()}


def test_lint_is_clean_in_each_mode_and_placement(helm_bin: Path) -> None:
    for values in (*manifests.MODE_VALUES.values(), manifests.PLACEMENT_VALUES["agent"]):
        sets = [f"--set={k}={v}" for k, v in values.items()]
        done = helm(helm_bin, "lint", "--strict", CHART, "--namespace", NS, *sets)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_chart_version_is_the_projects() -> None:
    chart = yaml.safe_load((manifests.CHART_DIR / "Chart.yaml").read_text())
    assert chart["name"] == "dra-driver-nvidia-gpu"
    assert chart["version"] == chart["appVersion"] == __version__
    assert chart["kubeVersion"] == ">=1.32.0-0"


def test_names_labels_and_scheduling_equal_the_reference_charts(helm_bin: Path) -> None:
    objects = render(helm_bin)
    assert {key(o) for o in objects} >= REFERENCE_NAMES
    for obj in objects:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    for kind, component, container in (("Deployment", "controller", "compute-domain"),
                                       ("DaemonSet", "kubelet-plugin", "compute-domains")):
        workload = one(objects, kind)
        selector = {"dra-driver-nvidia-gpu-component": component}
        assert workload["spec"]["selector"] == {"matchLabels": selector}
        assert workload["spec"]["template"]["metadata"]["labels"] == {
            "app.kubernetes.io/name": "dra-driver-nvidia-gpu",
            "app.kubernetes.io/instance": RELEASE,
            **selector,
            "nvidia-dra-driver-gpu-component": component,
        }
        chart_label = workload["metadata"]["labels"]["helm.sh/chart"]
        assert chart_label == f"dra-driver-nvidia-gpu-{__version__}"
        spec = workload["spec"]["template"]["spec"]
        assert [c["name"] for c in spec["containers"]] == [container]
        assert spec["priorityClassName"] == "system-node-critical"
    controller = pod_spec(objects, "Deployment")
    assert controller["serviceAccountName"] == "dra-driver-nvidia-gpu-service-account-controller"
    assert controller["tolerations"] == CONTROL_PLANE_TOLERATIONS
    [spread] = controller["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert spread["podAffinityTerm"]["labelSelector"] == {
        "matchLabels": {"dra-driver-nvidia-gpu-component": "controller"}}
    controller_env = env(controller["containers"][0])
    assert controller_env["LEADER_ELECTION_LEASE_LOCK_NAME"] == "dra-driver-nvidia-gpu-controller"
    assert controller_env["LEADER_ELECTION_LEASE_LOCK_NAMESPACE"] == NS
    assert controller_env["IMAGE_NAME"] == f"nvcr.io/nvidia/compute-domain-driver:v{__version__}"
    plugin = pod_spec(objects, "DaemonSet")
    assert plugin["serviceAccountName"] == "dra-driver-nvidia-gpu-service-account-kubeletplugin"
    assert plugin["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert plugin["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": GPU_NODE_TERMS}
    # The reference's init container waits for the driver under the driver root.
    [init] = plugin["initContainers"]
    assert init["name"] == "init-container"
    assert init["command"] == ["compute-domain-agent", "prestart"]
    assert one(objects, "DaemonSet")["spec"]["updateStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}


def test_release_name_and_overrides_name_things_as_the_reference(helm_bin: Path) -> None:
    objects = render(helm_bin, release="cd")
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    assert accounts == {"cd-dra-driver-nvidia-gpu-service-account-controller",
                        "cd-dra-driver-nvidia-gpu-service-account-kubeletplugin",
                        names.DAEMON_SERVICE_ACCOUNT}
    assert one(objects, "Deployment")["metadata"]["name"] == "dra-driver-nvidia-gpu-controller"
    objects = render(helm_bin, "--set", "nameOverride=gpu-dra", "--set",
                     "fullnameOverride=site", "--set", "namespaceOverride=drivers")
    deployment = one(objects, "Deployment")
    assert key(deployment) == ("Deployment", "drivers", "gpu-dra-controller")
    assert deployment["spec"]["selector"]["matchLabels"] == {"gpu-dra-component": "controller"}
    assert env(deployment["spec"]["template"]["spec"]["containers"][0])[
        "LEADER_ELECTION_LEASE_LOCK_NAME"] == "gpu-dra-controller"
    assert pod_spec(objects, "DaemonSet")["serviceAccountName"] == (
        "site-service-account-kubeletplugin")
    assert {o["metadata"].get("namespace") for o in objects} == {"drivers", None}
    objects = render(helm_bin, "--set", "serviceAccount.name=drv")
    assert pod_spec(objects, "Deployment")["serviceAccountName"] == "drv-controller"
    objects = render(helm_bin, "--set", "serviceAccount.create=false")
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")
                and "dra-driver-nvidia-gpu" in o["metadata"]["name"]]
    assert pod_spec(objects, "DaemonSet")["serviceAccountName"] == "default-kubeletplugin"
    objects = render(helm_bin, "--set-json", 'selectorLabelsOverride={"team":"gpu"}')
    assert one(objects, "DaemonSet")["spec"]["selector"] == {"matchLabels": {"team": "gpu"}}


def test_host_managed_renders_no_daemon_device_class_and_no_daemon_rbac(helm_bin: Path) -> None:
    driver = {key(o) for o in render(helm_bin)}
    objects = render(helm_bin, "--set", "resources.computeDomains.imex.mode=hostManaged",
                     "--set", "featureGates.HostManagedIMEXDaemon=true", "--set",
                     "resources.computeDomains.imex.hostSocketPath=/var/run/nvidia-imex.sock")
    host = {key(o) for o in objects}
    assert host < driver
    assert not [k for k in host if k[0] == "DeviceClass" and k[2] == names.DEVICE_CLASS_DAEMON]
    assert not [k for k in host if "compute-domain-daemon" in k[2]]
    for kind in ("Deployment", "DaemonSet"):
        container = env(pod_spec(objects, kind)["containers"][0])
        assert container["IMEX_MODE"] == "hostManaged"
        assert container["FEATURE_GATES"] == "HostManagedIMEXDaemon=true,"
    plugin = env(pod_spec(objects, "DaemonSet")["containers"][0])
    assert plugin["IMEX_HOST_SOCKET_PATH"] == "/var/run/nvidia-imex.sock"
    default = env(pod_spec(render(helm_bin), "DaemonSet")["containers"][0])
    assert "IMEX_HOST_SOCKET_PATH" not in default


AGENT = ("--set", "resources.computeDomains.imex.placement=agent")


def rules(objects: list[Obj], kind: str, name: str, namespace: str = "") -> dict[str, list[str]]:
    """resource -> verbs of a (Cluster)Role."""
    [role] = [o for o in objects if key(o) == (kind, namespace, name)]
    return {r: rule["verbs"] for rule in role["rules"] for r in rule["resources"]}


def test_agent_placement_runs_imex_in_the_plugin_without_daemon_pieces(helm_bin: Path) -> None:
    driver = render(helm_bin)
    objects = render(helm_bin, *AGENT)
    for obj in objects:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    pod, agent = {key(o) for o in driver}, {key(o) for o in objects}
    plugin_policies = {(kind, "", f"compute-domain-kubelet-plugin-{name}")
                       for kind in ("ValidatingAdmissionPolicy",
                                    "ValidatingAdmissionPolicyBinding")
                       for name in ("cliques", "status")}
    # No daemon DeviceClass, ServiceAccount, RBAC or daemon policies; the plugin's own
    # clique and status policies instead.
    assert agent - pod == plugin_policies
    assert {k for k in pod - agent} == {k for k in pod if "compute-domain-daemon" in k[2]}
    assert not [k for k in agent if "compute-domain-daemon" in k[2]]
    for kind in ("Deployment", "DaemonSet"):
        assert env(pod_spec(driver, kind)["containers"][0])["IMEX_PLACEMENT"] == "pod"
        assert env(pod_spec(objects, kind)["containers"][0])["IMEX_PLACEMENT"] == "agent"
    [plugin] = pod_spec(objects, "DaemonSet")["containers"]
    # nvidia-imex listens on the pod IP; `keep` restarts a plugin that died, whose IMEX
    # children live on.
    assert env(plugin)["IMEX_ADDRESS"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert plugin["command"] == ["compute-domain-agent", "keep", "plugin"]
    [default_plugin] = pod_spec(driver, "DaemonSet")["containers"]
    assert default_plugin["command"] == ["compute-domain-agent", "plugin"]
    assert "IMEX_ADDRESS" not in env(default_plugin)
    # The plugin writes cliques and (without them) ComputeDomain status as a daemon did;
    # the controller deletes a deleted domain's cliques (no daemon pod owns them).
    role, cluster_role = "dra-driver-nvidia-gpu-role-", "dra-driver-nvidia-gpu-clusterrole-"
    assert rules(objects, "Role", f"{role}kubeletplugin", NS)["computedomaincliques"] == [
        "get", "list", "watch", "create", "update", "patch"]
    assert rules(driver, "Role", f"{role}kubeletplugin", NS)["computedomaincliques"] == [
        "list", "watch"]
    assert rules(objects, "ClusterRole", f"{cluster_role}kubeletplugin")[
        "computedomains/status"] == ["update"]
    assert "computedomains/status" not in rules(driver, "ClusterRole",
                                                f"{cluster_role}kubeletplugin")
    assert rules(objects, "Role", f"{role}controller", NS)["computedomaincliques"] == [
        "update", "delete"]
    assert rules(driver, "Role", f"{role}controller", NS)["computedomaincliques"] == ["update"]
    assert "list" in rules(objects, "ClusterRole", f"{cluster_role}controller")["nodes"]
    # Events on its own Node (namespace default) are the plugin's in agent placement only.
    events = one(objects, "ValidatingAdmissionPolicy", "compute-domain-kubelet-plugin-events")
    [check] = events["spec"]["validations"]
    assert 'object.involvedObject.kind == "Node"' in check["expression"]
    events = one(driver, "ValidatingAdmissionPolicy", "compute-domain-kubelet-plugin-events")
    assert '"Node"' not in events["spec"]["validations"][0]["expression"]


def test_pod_placement_is_the_default_and_renders_as_before(helm_bin: Path) -> None:
    default = helm(helm_bin, "template", RELEASE, CHART, "--namespace", NS)
    explicit = helm(helm_bin, "template", RELEASE, CHART, "--namespace", NS,
                    "--set", "resources.computeDomains.imex.placement=pod")
    assert default.returncode == explicit.returncode == 0, default.stderr + explicit.stderr
    assert default.stdout == explicit.stdout
    # The one addition of the placement to a pod-placement render: IMEX_PLACEMENT=pod.
    assert default.stdout.count('- name: IMEX_PLACEMENT\n          value: "pod"\n') == 2
    assert '"keep"' not in default.stdout and "IMEX_ADDRESS" not in default.stdout


def test_values_reach_the_containers(helm_bin: Path) -> None:
    objects = render(
        helm_bin, "--set", "logVerbosity=6", "--set", "logFormat=json",
        "--set", "featureGates.IMEXDaemonsWithDNSNames=false",
        "--set", "featureGates.ComputeDomainCliques=true",
        "--set", "nvidiaDriverRoot=/run/nvidia/driver", "--set", "altProcDevices=/var/fake",
        "--set", "imagePullSecrets[0].name=a", "--set", "imagePullSecrets[1].name=b",
        "--set", "image.tag=v9", "--set", "controller.metrics.enabled=false",
        "--set", "kubeletPlugin.containers.computeDomains.healthcheckPort=-1",
        "--set-json", 'controller.containers.computeDomain.env=[{"name":"ADDITIONAL_NAMESPACES",'
        '"value":"old-ns, dra-driver-nvidia-gpu ,,other"}]',
    )  # fmt: skip
    controller = pod_spec(objects, "Deployment")
    plugin = pod_spec(objects, "DaemonSet")
    ctl, agent = env(controller["containers"][0]), env(plugin["containers"][0])
    for container in (ctl, agent):
        assert container["LOG_VERBOSITY"] == "6"
        assert container["LOGGING_FORMAT"] == "json"
        gates = "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=false,"
        assert container["FEATURE_GATES"] == gates
    assert ctl["LOG_VERBOSITY_CD_DAEMON"] == "6"
    assert ctl["IMAGE_NAME"] == "nvcr.io/nvidia/compute-domain-driver:v9"
    assert ctl["CD_DAEMON_IMAGE_PULL_SECRET_NAMES"] == "a,b"
    assert controller["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]
    # Metrics off: /metrics is not served, the probes' /healthz and /readyz still are.
    assert ctl["METRICS_PATH"] == "" and ctl["HTTP_ENDPOINT"] == ":8080"
    # No health port: no probes and no HEALTHCHECK_PORT.
    assert "HEALTHCHECK_PORT" not in agent
    assert "startupProbe" not in plugin["containers"][0]
    assert agent["NVIDIA_DRIVER_ROOT"] == "/run/nvidia/driver"
    assert agent["ALT_PROC_DEVICES_PATH"] == "/alt-proc-devices"
    volumes = {v["name"]: v["hostPath"] for v in plugin["volumes"]}
    assert volumes["driver-root"]["path"] == "/run/nvidia/driver"
    assert volumes["driver-root-parent"]["path"] == "/run/nvidia"
    assert volumes["alt-proc-devices"] == {"path": "/var/fake", "type": "File"}
    assert env(plugin["initContainers"][0])["DRIVER_ROOT_CTR_PATH"] == "/driver-root-parent/driver"
    # The controller's Role, the plugin's and the daemon ServiceAccount in every namespace
    # the controller manages.
    for kind, name in (("Role", "dra-driver-nvidia-gpu-role-controller"),
                       ("ServiceAccount", names.DAEMON_SERVICE_ACCOUNT),
                       ("RoleBinding", "dra-driver-nvidia-gpu-role-binding-kubeletplugin")):
        assert {o["metadata"]["namespace"] for o in objects
                if o["kind"] == kind and o["metadata"]["name"] == name} == {NS, "old-ns", "other"}


def test_resource_api_version_is_honoured(helm_bin: Path) -> None:
    for version in ("resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"):
        objects = render(helm_bin, "--set", f"resourceApiVersion={version}")
        assert {o["apiVersion"] for o in objects if o["kind"] == "DeviceClass"} == {version}
        # The driver speaks the pinned version too, not only the DeviceClasses.
        for kind in ("Deployment", "DaemonSet"):
            assert env(pod_spec(objects, kind)["containers"][0])[
                "RESOURCE_API_VERSION"] == version
    # helm template's own capabilities include v1; a 1.32 cluster's discovery does not
    # (tests/sim/test_helm_install.py installs into one).
    objects = render(helm_bin, "--api-versions", "resource.k8s.io/v1")
    assert {o["apiVersion"] for o in objects if o["kind"] == "DeviceClass"} == {
        "resource.k8s.io/v1"}
    # Unpinned, the driver finds the served version itself (runtime/draclient.py).
    for kind in ("Deployment", "DaemonSet"):
        assert "RESOURCE_API_VERSION" not in env(pod_spec(objects, kind)["containers"][0])


def test_the_reference_values_file_renders_once_gpus_are_off(helm_bin: Path) -> None:
    stderr = refused(helm_bin, "-f", str(REFERENCE_VALUES))
    assert "resources.gpus.enabled=true" in stderr and "resources.gpus.enabled=false" in stderr
    objects = render(helm_bin, "-f", str(REFERENCE_VALUES), "--set", "resources.gpus.enabled=false")
    assert {key(o) for o in objects} >= REFERENCE_NAMES
    image = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.1.0"
    assert pod_spec(objects, "Deployment")["containers"][0]["image"] == image
    # gpuCliqueLabelEnabled is used; consumableShares (the GPU plugin's) has no effect.
    agent = env(pod_spec(objects, "DaemonSet")["containers"][0])
    assert agent[names.ENV_GPU_CLIQUE_LABEL_ENABLED] == "true"
    assert "CONSUMABLE_SHARES" not in yaml.safe_dump_all(objects)
    done = helm(helm_bin, "lint", "--strict", CHART, "--namespace", NS, "-f", str(REFERENCE_VALUES),
                "--set", "resources.gpus.enabled=false")
    assert done.returncode == 0, done.stdout + done.stderr


def key_paths(values: Obj, prefix: str = "") -> set[str]:
    out = set()
    for name, value in values.items():
        path = f"{prefix}.{name}" if prefix else name
        out.add(path)
        if isinstance(value, dict):
            out |= key_paths(value, path)
    return out


def test_every_key_of_the_reference_values_is_in_ours() -> None:
    """Each reference key is in our values.yaml, whose comment says what it does here (or
    that it is accepted with no effect)."""
    ours = yaml.safe_load((manifests.CHART_DIR / "values.yaml").read_text())
    reference = yaml.safe_load(REFERENCE_VALUES.read_text())
    assert key_paths(reference) - key_paths(ours) == set()


def test_gpu_clique_label_is_off_unless_enabled(helm_bin: Path) -> None:
    agent = env(pod_spec(render(helm_bin), "DaemonSet")["containers"][0])
    assert agent[names.ENV_GPU_CLIQUE_LABEL_ENABLED] == "false"
    objects = render(helm_bin, "--set",
                     "kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled=true")
    agent = env(pod_spec(objects, "DaemonSet")["containers"][0])
    assert agent[names.ENV_GPU_CLIQUE_LABEL_ENABLED] == "true"


def make_print_image(*overrides: str) -> str:
    done = subprocess.run(["make", "-s", "--no-print-directory", "print-image", *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def images(objects: list[Obj]) -> set[str]:
    """Every image the chart runs: its containers' and the IMEX daemon pods' (IMAGE_NAME)."""
    out = set()
    for kind in ("Deployment", "DaemonSet"):
        spec = pod_spec(objects, kind)
        out |= {c["image"] for c in spec["containers"] + spec.get("initContainers", [])}
    out.add(env(pod_spec(objects, "Deployment")["containers"][0])["IMAGE_NAME"])
    return out


def test_the_default_image_is_the_one_make_image_tags(helm_bin: Path) -> None:
    tagged = make_print_image()
    assert tagged == f"nvcr.io/nvidia/compute-domain-driver:v{__version__}"
    assert images(render(helm_bin)) == {tagged}
    # A private registry: the same repository in make and helm, the tag left to the chart.
    tagged = make_print_image("IMAGE_REPOSITORY=registry.example.com/gpu/cd")
    assert tagged == f"registry.example.com/gpu/cd:v{__version__}"
    objects = render(helm_bin, "--set", "image.repository=registry.example.com/gpu/cd")
    assert images(objects) == {tagged}


# The values the reference's templates take through `with` or `toYaml`, so null works there
# (its own tests install with --set controller.affinity=null).
NULLABLE = [
    "selectorLabelsOverride", "imagePullSecrets", "serviceAccount.annotations", "featureGates",
    "webhook.strategy", "webhook.podAnnotations", "webhook.podSecurityContext",
    "webhook.nodeSelector", "webhook.tolerations", "webhook.affinity",
    "webhook.containers.webhook.securityContext", "webhook.containers.webhook.resources",
    "webhook.tls.certManager.dnsNames",
    "controller.podAnnotations", "controller.podSecurityContext", "controller.nodeSelector",
    "controller.tolerations", "controller.affinity",
    "controller.containers.computeDomain.securityContext",
    "controller.containers.computeDomain.env", "controller.containers.computeDomain.resources",
    "kubeletPlugin.updateStrategy", "kubeletPlugin.podAnnotations",
    "kubeletPlugin.podSecurityContext", "kubeletPlugin.nodeSelector", "kubeletPlugin.tolerations",
    "kubeletPlugin.affinity", "kubeletPlugin.containers.init.securityContext",
    "kubeletPlugin.containers.init.resources", "kubeletPlugin.containers.computeDomains.env",
    "kubeletPlugin.containers.computeDomains.securityContext",
    "kubeletPlugin.containers.computeDomains.resources", "kubeletPlugin.containers.gpus.env",
    "kubeletPlugin.containers.gpus.securityContext", "kubeletPlugin.containers.gpus.resources",
]


@pytest.mark.parametrize("path", NULLABLE)
def test_null_installs_and_upgrades_with_reuse_values(
    helm_bin: Path, path: str, tmp_path: Path
) -> None:
    """`helm install --set <path>=null`, then `helm upgrade --reuse-values`: helm's upgrade
    renders the chart with the first install's values as the chart's defaults (where the null
    removed the key) and the stored `--set` values over them, so the null reaches the schema
    and the templates. Rendering a copy of the chart so prepared is what that upgrade does."""
    render(helm_bin, "--set", f"{path}=null")
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    *parents, leaf = path.split(".")
    defaults = yaml.safe_load((chart / "values.yaml").read_text())
    stored: Obj = {}
    node, user = defaults, stored
    for name in parents:
        node, user = node[name], user.setdefault(name, {})
    del node[leaf]
    user[leaf] = None
    (chart / "values.yaml").write_text(yaml.safe_dump(defaults))
    (tmp_path / "stored.yaml").write_text(yaml.safe_dump(stored))
    done = helm(helm_bin, "template", RELEASE, str(chart), "--namespace", NS,
                "-f", str(tmp_path / "stored.yaml"))
    assert done.returncode == 0, done.stderr
    for obj in yaml.safe_load_all(done.stdout):
        if obj:
            kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "resources.gpus.enabled=true", "--set", "gpuResourcesEnabledOverride=true"],
         "resources.gpus.enabled=true: this chart installs the ComputeDomain driver"),
        (["--set", "webhook.enabled=true"], "webhook.enabled=true: this chart has no admission"),
        (["--set", "resources.computeDomains.enabled=false"],
         "resources.computeDomains.enabled=false leaves nothing to install"),
        (["--set", "resources.computeDomains.imex.mode=hostManaged"],
         'resources.computeDomains.imex.mode="hostManaged" requires the HostManagedIMEXDaemon '
         "feature gate to be enabled: add --set featureGates.HostManagedIMEXDaemon=true"),
        (["--set", "resources.computeDomains.imex.mode=host"],
         'unknown resources.computeDomains.imex.mode "host": set it to driverManaged'),
        (["--set", "resources.computeDomains.imex.placement=agent", "--set",
          "resources.computeDomains.imex.mode=hostManaged", "--set",
          "featureGates.HostManagedIMEXDaemon=true"],
         'resources.computeDomains.imex.placement="agent" applies to mode driverManaged only'),
        (["--set", "resources.computeDomains.imex.placement=host"],
         "at '/resources/computeDomains/imex/placement': value must be one of 'pod', 'agent'"),
        (["--skip-schema-validation", "--set", "resources.computeDomains.imex.placement=host"],
         'unknown resources.computeDomains.imex.placement "host": set it to pod'),
        (["--set", "resources.computeDomains.imex.isolation=channel"],
         'resources.computeDomains.imex.isolation="channel" is not supported yet: per-workload '
         "IMEX channel allocation is not implemented"),
        (["--set", "resources.computeDomains.imex.isolation=pod"],
         'unknown resources.computeDomains.imex.isolation "pod": must be "domain" or "channel"'),
        (["--set", "resources.computeDomains.imex.mode=hostManaged", "--set",
          "featureGates.HostManagedIMEXDaemon=true", "--set",
          "resources.computeDomains.imex.hostSocketPath=imex.sock"],
         'hostSocketPath "imex.sock" must be an absolute path'),
        (["--set", "namespace=gpu"], "Use --namespace gpu"),
        (["--set", "nosuchkey=1"], "additional properties 'nosuchkey' not allowed"),
        (["--set", "controller.replicas=two"],
         "at '/controller/replicas': got string, want integer"),
        (["--set", "logVerbosity=8"], "at '/logVerbosity'"),
        (["--set", "logFormat=xml"], "at '/logFormat'"),
        (["--set", "nvidiaDriverRoot=run/nvidia"], "at '/nvidiaDriverRoot'"),
        (["--set", "resourceApiVersion=resource.k8s.io/v2"], "at '/resourceApiVersion'"),
        (["--set", "kubeletPlugin.metrics.computeDomainHttpEndpoint=8081"],
         "at '/kubeletPlugin/metrics/computeDomainHttpEndpoint'"),
    ],
)  # fmt: skip
def test_refused_values_say_what_to_do(helm_bin: Path, args: list[str], message: str) -> None:
    assert message in refused(helm_bin, *args)


def test_the_default_namespace_is_refused_unless_allowed(helm_bin: Path) -> None:
    assert "allowDefaultNamespace=true" in refused(helm_bin, namespace="default")
    assert render(helm_bin, "--set", "allowDefaultNamespace=true", namespace="default")
