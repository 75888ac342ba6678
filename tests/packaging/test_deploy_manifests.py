"""The static deploy manifests: that they are the chart's `helm template` output, what they
hold, and that the shipped least-privilege RBAC really lets each component make the calls its
code makes."""

from __future__ import annotations

import argparse
import asyncio
import copy
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from api import names
from api.version import __version__
from runtime.draclient import DraApi
from sim.apiserver.authn import TokenAuthenticator
from sim.apiserver.runner import ServerThread
from sim.cluster import manifests

MODES = ("driverManaged", "hostManaged")
# Every static manifest: each mode with pod placement, driverManaged with agent placement.
VARIANTS = (*((mode, "pod") for mode in MODES), ("driverManaged", "agent"))
VARIANT_IDS = [f"{mode}-{placement}" for mode, placement in VARIANTS]
DRIVER_NS = "dra-driver-nvidia-gpu"
USER_NS = "team-a"
IMAGE = f"nvcr.io/nvidia/compute-domain-driver:v{__version__}"
# The reference chart's names for the release dra-driver-nvidia-gpu.
CONTROLLER = "dra-driver-nvidia-gpu-controller"
PLUGIN = "dra-driver-nvidia-gpu-kubelet-plugin"
SA_CONTROLLER = "dra-driver-nvidia-gpu-service-account-controller"
SA_PLUGIN = "dra-driver-nvidia-gpu-service-account-kubeletplugin"
LEASE = "dra-driver-nvidia-gpu-controller"
DAEMON_CD = "0f3c2a9e-1b2c-4d5e-8f90-123456789abc"
DAEMON_POD = f"{names.daemon_object_name(DAEMON_CD)}-abcde"  # what its DaemonSet names it
DAEMON_RBAC = {("ServiceAccount", names.DAEMON_SERVICE_ACCOUNT),
               ("Role", "compute-domain-daemon-role"),
               ("RoleBinding", "compute-domain-daemon-role-binding"),
               ("ClusterRole", "compute-domain-daemon-role"),
               ("ClusterRoleBinding", "compute-domain-daemon-role-binding")}


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    md = obj["metadata"]
    return obj["kind"], md.get("namespace", ""), md["name"]


def _find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [obj] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def _container(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [container] = _find(objects, kind, name)["spec"]["template"]["spec"]["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {mode: manifests.load(mode) for mode in MODES}


# --- rendering ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agent_rendered() -> list[dict[str, Any]]:
    return manifests.load("driverManaged", placement="agent")


@pytest.mark.parametrize(("mode", "placement"), VARIANTS, ids=VARIANT_IDS)
def test_committed_manifests_equal_helm_template(mode: str, placement: str, helm_bin) -> None:
    """`make manifests` was run after the last chart change: the committed file is the
    chart's render, byte for byte."""
    path = manifests.manifest_path(mode, placement)
    assert manifests.render_static(helm_bin, mode, placement) == path.read_text(), (
        f"{path} is stale: run `make manifests`")


@pytest.mark.parametrize(("mode", "placement"), VARIANTS, ids=VARIANT_IDS)
def test_every_object_validates(mode: str, placement: str) -> None:
    version = kubernetes_validate.latest_version()
    for obj in manifests.load(mode, placement):
        kubernetes_validate.validate(obj, version, strict=True)


def test_modes_differ_only_in_daemon_pieces_and_imex_mode(rendered: dict) -> None:
    driver = {(o["kind"], o["metadata"]["name"]) for o in rendered["driverManaged"]}
    host = {(o["kind"], o["metadata"]["name"]) for o in rendered["hostManaged"]}
    daemon_policies = {(kind, f"compute-domain-daemon-{name}")
                       for kind in ("ValidatingAdmissionPolicy",
                                    "ValidatingAdmissionPolicyBinding")
                       for name in ("cliques", "pods", "events", "status", "device-class")}
    assert driver - host == DAEMON_RBAC | daemon_policies | {
        ("DeviceClass", names.DEVICE_CLASS_DAEMON)}
    assert host <= driver
    for mode, objects in rendered.items():
        channel = _find(objects, "DeviceClass", names.DEVICE_CLASS_DEFAULT_CHANNEL)
        assert channel["spec"]["selectors"] == [
            {"cel": {"expression": names.DEVICE_CLASS_DEFAULT_CHANNEL_SELECTOR}}]
        for kind, name in (("Deployment", CONTROLLER), ("DaemonSet", PLUGIN)):
            env = _env(_container(objects, kind, name))
            assert env["IMEX_MODE"] == mode
            gates = "HostManagedIMEXDaemon=true," if mode == "hostManaged" else ""
            assert env.get("FEATURE_GATES", "") == gates
    daemon = _find(rendered["driverManaged"], "DeviceClass", names.DEVICE_CLASS_DAEMON)
    assert daemon["spec"]["selectors"] == [
        {"cel": {"expression": names.DEVICE_CLASS_DAEMON_SELECTOR}}]


def test_agent_placement_differs_only_in_daemon_pieces_and_plugin_policies(
    rendered: dict, agent_rendered: list[dict[str, Any]]
) -> None:
    pod = {(o["kind"], o["metadata"]["name"]) for o in rendered["driverManaged"]}
    agent = {(o["kind"], o["metadata"]["name"]) for o in agent_rendered}
    daemon_policies = {(kind, f"compute-domain-daemon-{name}")
                       for kind in ("ValidatingAdmissionPolicy",
                                    "ValidatingAdmissionPolicyBinding")
                       for name in ("cliques", "pods", "events", "status", "device-class")}
    plugin_policies = {(kind, f"compute-domain-kubelet-plugin-{name}")
                       for kind in ("ValidatingAdmissionPolicy",
                                    "ValidatingAdmissionPolicyBinding")
                       for name in ("cliques", "status")}
    assert pod - agent == DAEMON_RBAC | daemon_policies | {
        ("DeviceClass", names.DEVICE_CLASS_DAEMON)}
    assert agent - pod == plugin_policies
    for kind, name in (("Deployment", CONTROLLER), ("DaemonSet", PLUGIN)):
        env = _env(_container(agent_rendered, kind, name))
        assert (env["IMEX_MODE"], env["IMEX_PLACEMENT"]) == ("driverManaged", "agent")
        assert _env(_container(rendered["driverManaged"], kind, name))["IMEX_PLACEMENT"] == "pod"
    plugin = _container(agent_rendered, "DaemonSet", PLUGIN)
    assert plugin["command"] == ["compute-domain-agent", "keep", "plugin"]
    assert {"name": names.ENV_IMEX_ADDRESS,
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in plugin["env"]


def test_one_image_for_controller_plugin_and_daemon_pods(rendered: dict) -> None:
    for objects in rendered.values():
        controller = _container(objects, "Deployment", CONTROLLER)
        assert controller["image"] == IMAGE
        assert _env(controller)["IMAGE_NAME"] == IMAGE
        assert _container(objects, "DaemonSet", PLUGIN)["image"] == IMAGE


POD_IP = "10.0.0.1"


def _parse_env(monkeypatch: pytest.MonkeyPatch, container: dict[str, Any],
               add_flags: Callable[[argparse.ArgumentParser], None]) -> argparse.Namespace:
    """The container's env as the program's own flag parser reads it (fieldRefs faked)."""
    for item in container["env"]:
        field = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        monkeypatch.setenv(item["name"], item.get("value", POD_IP if field == "status.podIP"
                                                  else "from-field-ref"))
    parser = argparse.ArgumentParser()
    add_flags(parser)
    args, extra = parser.parse_known_args(container["command"][1:])
    # `keep plugin`: the keeper runs the plugin with these flags.
    assert extra in ([], ["plugin"], ["keep", "plugin"])
    return args


@pytest.mark.parametrize(("mode", "placement"), VARIANTS, ids=VARIANT_IDS)
def test_env_is_accepted_by_the_real_flag_parsers(mode: str, placement: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.plugin.config import add_plugin_flags
    from agent.plugin.config import config_from_args as plugin_config
    from controller.config import add_controller_flags
    from controller.config import config_from_args as controller_config

    objects = manifests.load(mode, placement)
    with monkeypatch.context() as m:
        cfg = controller_config(_parse_env(m, _container(objects, "Deployment", CONTROLLER),
                                           add_controller_flags))
    assert cfg.host_managed == (mode == "hostManaged")
    assert cfg.agent_placement == (placement == "agent")
    # The reference chart's defaults: one replica, leader election off, its Lease name.
    assert not cfg.leader_election and cfg.http_endpoint == ":8080"
    assert cfg.lease_name == LEASE
    with monkeypatch.context() as m:
        agent = plugin_config(_parse_env(m, _container(objects, "DaemonSet", PLUGIN),
                                         add_plugin_flags))
    assert agent.host_managed == (mode == "hostManaged")
    assert agent.agent_placement == (placement == "agent")
    assert agent.imex_address == (POD_IP if placement == "agent" else "")
    assert str(agent.plugins_dir) == names.KUBELET_PLUGINS_DIR
    assert str(agent.registrar_dir) == names.KUBELET_REGISTRY_DIR
    assert str(agent.cdi_root) == names.DEFAULT_CDI_ROOT
    assert agent.healthcheck_port == 51515
    ds = _find(objects, "DaemonSet", PLUGIN)["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"]
              for m in _container(objects, "DaemonSet", PLUGIN)["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in ds["volumes"]}
    assert mounts["plugins"] == host["plugins"] == str(agent.plugins_dir)
    assert mounts["plugins-registry"] == host["plugins-registry"] == str(agent.registrar_dir)
    assert mounts["cdi"] == host["cdi"] == str(agent.cdi_root)
    assert mounts["driver-root"] == str(agent.container_driver_root)
    assert host["driver-root"] == str(agent.host_driver_root)


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown IMEX mode 'bogus': use one of"):
        manifests.manifest_path("bogus")
    with pytest.raises(ValueError, match="unknown IMEX placement 'host': use one of"):
        manifests.manifest_path("driverManaged", "host")
    with pytest.raises(ValueError, match="applies to driverManaged only, not hostManaged"):
        manifests.load("hostManaged", placement="agent")


# --- RBAC against the emulator ------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(rendered: dict) -> Iterator[dict[str, client.ApiClient]]:
    """The driver-managed overlay applied with RBAC enforced; a client per ServiceAccount."""
    auth = TokenAuthenticator()
    auth.add_admin("admin")
    auth.add_service_account(SA_CONTROLLER, DRIVER_NS, SA_CONTROLLER)
    # The plugin's token as one bound to its pod or Node authenticates (the node-scoping
    # policies key on the node); the daemon's is bound to its pod (DAEMON_POD on node-1).
    auth.add_service_account(SA_PLUGIN, DRIVER_NS, SA_PLUGIN, extra={
        "authentication.kubernetes.io/node-name": ("node-1",)})
    auth.add_service_account(names.DAEMON_SERVICE_ACCOUNT, DRIVER_NS,
                             names.DAEMON_SERVICE_ACCOUNT, extra={
                                 "authentication.kubernetes.io/pod-name": (DAEMON_POD,),
                                 "authentication.kubernetes.io/node-name": ("node-1",)})
    thread = ServerThread(authenticator=auth).start()
    clients = {name: thread.api_client(name)
               for name in ("admin", SA_CONTROLLER, SA_PLUGIN, names.DAEMON_SERVICE_ACCOUNT)}
    try:
        created = manifests.apply(clients["admin"], rendered["driverManaged"])
        assert sorted(map(_key, created)) == sorted(map(_key, rendered["driverManaged"]))
        assert manifests.apply(clients["admin"], rendered["driverManaged"]) == []
        admin_core = client.CoreV1Api(clients["admin"])
        admin_core.create_namespace({"metadata": {"name": USER_NS}})
        admin_core.create_node({"metadata": {"name": "node-1"}})
        yield clients
    finally:
        for api in clients.values():
            api.close()
        thread.close()


def _forbidden(call: Callable[[], Any]) -> None:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body


def _allowed_but_absent(call: Callable[[], Any]) -> None:
    """Authorized (the 404 comes after the RBAC check), the object just does not exist."""
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 404, err.value.body


def _create_cd(admin: client.ApiClient, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(admin).create_namespaced_custom_object(
        names.GROUP, names.VERSION, USER_NS, names.PLURAL_COMPUTE_DOMAINS, {
            "apiVersion": names.API_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": name},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": name}}}})


def test_controller_service_account(secured: dict[str, client.ApiClient]) -> None:
    from api.computedomain import StoredComputeDomain
    from controller.render import (
        RenderSettings,
        daemon_claim_template,
        daemon_set,
        workload_claim_template,
    )

    sa = secured[SA_CONTROLLER]
    custom, core = client.CustomObjectsApi(sa), client.CoreV1Api(sa)
    apps, resource = client.AppsV1Api(sa), client.ResourceV1Api(sa)
    cd = _create_cd(secured["admin"], "ctrl")
    uid = cd["metadata"]["uid"]
    settings = RenderSettings(namespace=DRIVER_NS, image=IMAGE, daemon_log_verbosity=4)
    # Informers (cluster-wide lists).
    custom.list_cluster_custom_object(names.GROUP, names.VERSION, names.PLURAL_COMPUTE_DOMAINS)
    custom.list_cluster_custom_object(names.GROUP, names.VERSION, names.PLURAL_CLIQUES)
    resource.list_resource_claim_template_for_all_namespaces(label_selector="x")
    apps.list_daemon_set_for_all_namespaces()
    core.list_pod_for_all_namespaces()
    core.list_node()
    # Reconcile: finalizer, templates, DaemonSet, status, events.
    cd = custom.patch_namespaced_custom_object(
        names.GROUP, names.VERSION, USER_NS, names.PLURAL_COMPUTE_DOMAINS, "ctrl",
        {"metadata": {"finalizers": [names.FINALIZER]}})
    resource.create_namespaced_resource_claim_template(
        USER_NS, workload_claim_template(StoredComputeDomain.from_dict(cd), settings))
    resource.create_namespaced_resource_claim_template(DRIVER_NS,
                                                       daemon_claim_template(uid, settings))
    ds = daemon_set(uid, settings)
    apps.create_namespaced_daemon_set(DRIVER_NS, ds)
    live = apps.read_namespaced_daemon_set(ds["metadata"]["name"], DRIVER_NS)
    apps.replace_namespaced_daemon_set(ds["metadata"]["name"], DRIVER_NS, live)
    custom.replace_namespaced_custom_object_status(
        names.GROUP, names.VERSION, USER_NS, names.PLURAL_COMPUTE_DOMAINS, "ctrl",
        {**cd, "status": {"status": names.STATUS_NOT_READY, "nodes": []}})
    event = core.create_namespaced_event(USER_NS, {
        "metadata": {"generateName": "ctrl-"}, "reason": "Test", "message": "m",
        "type": "Warning", "involvedObject": {"kind": "ComputeDomain", "name": "ctrl",
                                              "namespace": USER_NS}})
    core.patch_namespaced_event(event.metadata.name, USER_NS, {"count": 2})
    listed = core.list_node().items[0]
    core.replace_node(listed.metadata.name, listed)
    apps.delete_namespaced_daemon_set(ds["metadata"]["name"], DRIVER_NS)
    # Leader election.
    coord = client.CoordinationV1Api(sa)
    lease = coord.create_namespaced_lease(DRIVER_NS, {
        "metadata": {"name": LEASE},
        "spec": {"holderIdentity": "me"}})
    lease = coord.read_namespaced_lease(LEASE, DRIVER_NS)
    coord.replace_namespaced_lease(LEASE, DRIVER_NS, lease)
    # Outside its role.
    _forbidden(lambda: coord.read_namespaced_lease("someone-elses-lease", DRIVER_NS))
    _forbidden(lambda: apps.create_namespaced_daemon_set(USER_NS, ds))
    _forbidden(lambda: core.delete_namespace(USER_NS))
    _forbidden(lambda: core.read_namespaced_secret("x", DRIVER_NS))
    _forbidden(lambda: core.read_node("node-1"))
    _forbidden(lambda: custom.delete_namespaced_custom_object(
        names.GROUP, names.VERSION, USER_NS, names.PLURAL_COMPUTE_DOMAINS, "ctrl"))


def test_kubelet_plugin_service_account(secured: dict[str, client.ApiClient]) -> None:
    from agent.plugin.claimevents import ClaimEvents
    from agent.plugin.nodeops import NodeOps
    from agent.plugin.slices import SlicePublisher
    from api.resourceclaim import ResourceClaim
    from runtime.events import EventRecorder

    sa = secured[SA_PLUGIN]
    custom, core = client.CustomObjectsApi(sa), client.CoreV1Api(sa)
    resource = client.ResourceV1Api(sa)
    custom.list_cluster_custom_object(names.GROUP, names.VERSION, names.PLURAL_COMPUTE_DOMAINS)
    custom.list_namespaced_custom_object(names.GROUP, names.VERSION, DRIVER_NS,
                                         names.PLURAL_CLIQUES)
    _allowed_but_absent(lambda: resource.read_namespaced_resource_claim("c", USER_NS))

    async def agent_calls() -> dict[str, Any]:
        published = await SlicePublisher(sa, DraApi(sa), "node-1", host_managed=False).reconcile()
        ops = NodeOps(sa, DraApi(sa), "node-1")
        await ops.add_cd_label("0f3c2a9e-1b2c-4d5e-8f90-123456789abc")
        await ops.set_clique_label("clique-1")
        await ops.remove_cd_label("0f3c2a9e-1b2c-4d5e-8f90-123456789abc")
        # Events on a workload pod in a user namespace, written by the plugin's own code.
        recorder = EventRecorder(sa, names.EVENT_COMPONENT_PLUGIN, "node-1")
        ClaimEvents(recorder, "node-1").failed(ResourceClaim.from_dict(
            {"metadata": {"name": "c", "namespace": USER_NS, "uid": "claim-uid"},
             "status": {"reservedFor": [{"resource": "pods", "name": "wl", "uid": "pod-uid"}]}}),
            "prepare failed")
        await recorder.close()
        return published

    published = asyncio.run(agent_calls())
    resource.delete_resource_slice(published["metadata"]["name"])
    labels = core.read_node("node-1").metadata.labels or {}
    assert labels.get(names.LABEL_GPU_CLIQUE) == "clique-1"
    admin_core = client.CoreV1Api(secured["admin"])
    [event] = [e for e in admin_core.list_namespaced_event(USER_NS).items
               if e.involved_object.name == "wl"]
    assert (event.reason, event.type) == (names.EVENT_PREPARE_FAILED, "Warning")
    _forbidden(lambda: core.patch_namespaced_event(event.metadata.name, USER_NS, {"count": 2}))
    # Outside its role.
    _forbidden(lambda: core.delete_namespace(USER_NS))
    _forbidden(lambda: core.delete_node("node-1"))
    _forbidden(lambda: custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, DRIVER_NS, names.PLURAL_CLIQUES,
        {"apiVersion": names.API_VERSION, "kind": names.KIND_CLIQUE,
         "metadata": {"name": "x"}}))
    _forbidden(lambda: custom.list_namespaced_custom_object(
        names.GROUP, names.VERSION, USER_NS, names.PLURAL_CLIQUES))


def test_daemon_service_account(secured: dict[str, client.ApiClient]) -> None:
    sa = secured[names.DAEMON_SERVICE_ACCOUNT]
    custom, core = client.CustomObjectsApi(sa), client.CoreV1Api(sa)
    admin_core = client.CoreV1Api(secured["admin"])
    pod = admin_core.create_namespaced_pod(DRIVER_NS, {
        "metadata": {"name": DAEMON_POD}, "spec": {
            "nodeName": "node-1", "containers": [{"name": "d", "image": "i"}]}})
    name = names.clique_object_name(DAEMON_CD, "c.1")
    args = (names.GROUP, names.VERSION, DRIVER_NS, names.PLURAL_CLIQUES)
    custom.create_namespaced_custom_object(*args, {
        "apiVersion": names.API_VERSION, "kind": names.KIND_CLIQUE,
        "metadata": {"name": name, "labels": {names.LABEL_COMPUTE_DOMAIN: DAEMON_CD},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                          "name": DAEMON_POD, "uid": pod.metadata.uid}]},
        "daemons": []})
    clique = custom.get_namespaced_custom_object(*args, name)
    custom.replace_namespaced_custom_object(*args, name, clique)
    custom.list_namespaced_custom_object(*args)
    core.patch_namespaced_pod(DAEMON_POD, DRIVER_NS,
                              {"metadata": {"labels": {names.LABEL_CLIQUE_ID: "c.1"}}})
    # Warning Events on its own pod, written by the daemon's own code (create only).
    from agent.daemon.events import REASON_EXITED, PodEvents
    from agent.daemon.identity import DaemonIdentity

    identity = DaemonIdentity(
        clique_id="c.1", cd_uid=DAEMON_CD, cd_name="x",
        cd_namespace=USER_NS, node_name="node-1", pod_ip="10.0.0.1",
        pod_uid=pod.metadata.uid, pod_name=DAEMON_POD, pod_namespace=DRIVER_NS, max_nodes=1)

    async def record() -> None:
        events = PodEvents(sa, identity)
        assert events.warning(REASON_EXITED, "nvidia-imex exited with code 1")
        await events.close()

    asyncio.run(record())
    [event] = [e for e in admin_core.list_namespaced_event(DRIVER_NS).items
               if e.involved_object.name == DAEMON_POD]
    assert (event.reason, event.type) == (REASON_EXITED, "Warning")
    assert event.involved_object.uid == pod.metadata.uid
    # Legacy layout (ComputeDomainCliques=false): the ComputeDomain's status. RBAC lets the
    # daemon try any domain's; the policy (policies-daemon.yaml) refuses all but its own.
    cd = _create_cd(secured["admin"], "legacy")
    cd_args = (names.GROUP, names.VERSION, USER_NS, names.PLURAL_COMPUTE_DOMAINS)
    cd = custom.get_namespaced_custom_object(*cd_args, "legacy")
    custom.list_namespaced_custom_object(*cd_args)
    with pytest.raises(ApiException) as err:
        custom.replace_namespaced_custom_object_status(*cd_args, "legacy", {
            **cd, "status": {"status": names.STATUS_NOT_READY, "nodes": []}})
    assert err.value.status == 403, err.value.body
    assert "compute-domain-daemon-status" in err.value.body, err.value.body
    # Outside its role.
    from controller.render import RenderSettings, daemon_set

    ds = daemon_set(cd["metadata"]["uid"], RenderSettings(namespace=DRIVER_NS, image=IMAGE,
                                                          daemon_log_verbosity=4))
    apps = client.AppsV1Api(sa)
    _forbidden(lambda: apps.create_namespaced_daemon_set(DRIVER_NS, ds))
    _forbidden(lambda: core.patch_namespaced_pod(DAEMON_POD, USER_NS, {"metadata": {}}))
    _forbidden(lambda: core.delete_namespaced_pod(DAEMON_POD, DRIVER_NS))
    _forbidden(lambda: core.patch_namespaced_event(event.metadata.name, DRIVER_NS, {"count": 2}))
    _forbidden(lambda: core.create_namespaced_event(USER_NS, {
        "metadata": {"generateName": "x-"}, "reason": "R", "message": "m",
        "involvedObject": {"kind": "Pod", "name": DAEMON_POD, "namespace": USER_NS}}))
    _forbidden(lambda: custom.patch_namespaced_custom_object(*cd_args, "legacy", {}))
    _forbidden(lambda: custom.delete_namespaced_custom_object(*args, name))


# --- agent placement: RBAC and policies against the emulator ------------------------------


@pytest.fixture(scope="module")
def secured_agent(agent_rendered: list[dict[str, Any]]) -> Iterator[dict[str, client.ApiClient]]:
    """The agent-placement manifests applied with RBAC enforced; a client for the controller
    and for the plugins of node-1 and node-2 (tokens bound to their pod or Node)."""
    auth = TokenAuthenticator()
    auth.add_admin("admin")
    auth.add_service_account(SA_CONTROLLER, DRIVER_NS, SA_CONTROLLER)
    for node in ("node-1", "node-2"):
        auth.add_service_account(f"plugin@{node}", DRIVER_NS, SA_PLUGIN, extra={
            "authentication.kubernetes.io/node-name": (node,)})
    thread = ServerThread(authenticator=auth).start()
    clients = {name: thread.api_client(name)
               for name in ("admin", SA_CONTROLLER, "plugin@node-1", "plugin@node-2")}
    try:
        created = manifests.apply(clients["admin"], agent_rendered)
        assert sorted(map(_key, created)) == sorted(map(_key, agent_rendered))
        admin_core = client.CoreV1Api(clients["admin"])
        admin_core.create_namespace({"metadata": {"name": USER_NS}})
        for node in ("node-1", "node-2"):
            admin_core.create_node({"metadata": {"name": node, "labels": {
                names.LABEL_COMPUTE_DOMAIN: DAEMON_CD}}})
        yield clients
    finally:
        for api in clients.values():
            api.close()
        thread.close()


def _refused_by(call: Callable[[], Any], policy: str) -> None:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body
    assert policy in err.value.body, err.value.body


def test_agent_placement_plugin_writes_only_its_own_nodes_clique_entry(
    secured_agent: dict[str, client.ApiClient],
) -> None:
    """The plugin's own clique code (agent/daemon/clique_membership.py, as agent placement
    runs it: no daemon pod) gets through; another node's entry, a relabel, a clique named
    for another domain and a delete do not."""
    from agent.daemon.clique_membership import CliqueMembership

    plugin, other = secured_agent["plugin@node-1"], secured_agent["plugin@node-2"]
    args = (names.GROUP, names.VERSION, DRIVER_NS, names.PLURAL_CLIQUES)
    name = names.clique_object_name(DAEMON_CD, "c.1")

    def membership(api: client.ApiClient, node: str) -> CliqueMembership:
        return CliqueMembership(api, namespace=DRIVER_NS, cd_uid=DAEMON_CD, clique_id="c.1",
                                node_name=node, pod_name="", pod_uid="")

    async def join() -> None:
        first, second = membership(plugin, "node-1"), membership(other, "node-2")
        assert await first.join("10.0.0.1") == 0
        assert await second.join("10.0.0.2") == 1
        await first.set_status(True)
        assert [d["nodeName"] for d in await first.peers()] == ["node-1", "node-2"]

    asyncio.run(join())
    custom = client.CustomObjectsApi(plugin)
    custom.list_namespaced_custom_object(*args)
    clique = custom.get_namespaced_custom_object(*args, name)
    assert [d["status"] for d in clique["daemons"]] == [names.STATUS_READY,
                                                        names.STATUS_NOT_READY]
    assert not clique["metadata"].get("ownerReferences")  # the controller deletes it
    policy = "compute-domain-kubelet-plugin-cliques"
    forged = copy.deepcopy(clique)
    forged["daemons"][1]["status"] = names.STATUS_READY
    _refused_by(lambda: custom.replace_namespaced_custom_object(*args, name, forged), policy)
    dropped = copy.deepcopy(clique)
    del dropped["daemons"][1]
    _refused_by(lambda: custom.replace_namespaced_custom_object(*args, name, dropped), policy)
    relabelled = copy.deepcopy(clique)
    relabelled["metadata"]["labels"]["extra"] = "x"
    _refused_by(lambda: custom.replace_namespaced_custom_object(*args, name, relabelled), policy)
    foreign = "1f3c2a9e-1b2c-4d5e-8f90-123456789abc"
    _refused_by(lambda: custom.create_namespaced_custom_object(*args, {
        "apiVersion": names.API_VERSION, "kind": names.KIND_CLIQUE,
        "metadata": {"name": names.clique_object_name(foreign, "c.1"),
                     "labels": {names.LABEL_COMPUTE_DOMAIN: DAEMON_CD}},
        "daemons": []}), policy)
    _forbidden(lambda: custom.delete_namespaced_custom_object(*args, name))
    _forbidden(lambda: custom.list_namespaced_custom_object(
        names.GROUP, names.VERSION, USER_NS, names.PLURAL_CLIQUES))

    async def leave() -> None:
        await membership(other, "node-2").leave()

    asyncio.run(leave())
    clique = custom.get_namespaced_custom_object(*args, name)
    assert [d["nodeName"] for d in clique["daemons"]] == ["node-1"]
    # The controller prunes entries and deletes a deleted domain's cliques.
    controller = client.CustomObjectsApi(secured_agent[SA_CONTROLLER])
    client.CoreV1Api(secured_agent[SA_CONTROLLER]).list_node(
        label_selector=f"{names.LABEL_COMPUTE_DOMAIN}={DAEMON_CD}")
    controller.replace_namespaced_custom_object(*args, name, clique)
    controller.delete_namespaced_custom_object(*args, name)


def test_agent_placement_plugin_writes_its_node_events_and_legacy_status_entry(
    secured_agent: dict[str, client.ApiClient],
) -> None:
    from agent.daemon.events import REASON_EXITED, PodEvents
    from agent.daemon.identity import DaemonIdentity
    from agent.daemon.legacy_clique_membership import LegacyMembership
    from runtime.events import node_ref

    plugin = secured_agent["plugin@node-1"]
    core, custom = client.CoreV1Api(plugin), client.CustomObjectsApi(plugin)
    admin_core = client.CoreV1Api(secured_agent["admin"])
    identity = DaemonIdentity(
        clique_id="c.1", cd_uid=DAEMON_CD, cd_name="x", cd_namespace=USER_NS,
        node_name="node-1", pod_ip="10.0.0.1", pod_uid="", pod_name="",
        pod_namespace=DRIVER_NS, max_nodes=2)

    async def record() -> None:
        events = PodEvents(plugin, identity, involved=node_ref("node-1"))
        assert events.warning(REASON_EXITED, "nvidia-imex exited with code 1")
        await events.close()

    asyncio.run(record())
    [event] = [e for e in admin_core.list_namespaced_event("default").items
               if e.involved_object.kind == "Node"]
    assert (event.involved_object.name, event.reason) == ("node-1", REASON_EXITED)
    _refused_by(lambda: core.create_namespaced_event("default", {
        "metadata": {"generateName": "node-2-"}, "reason": "R", "message": "m",
        "reportingComponent": "c", "reportingInstance": "node-1",
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "node-2"}}),
        "compute-domain-kubelet-plugin-events")
    # Legacy layout (ComputeDomainCliques=false): its node's entry in status.nodes.
    cd = _create_cd(secured_agent["admin"], "legacy-agent")
    cd_args = (names.GROUP, names.VERSION, USER_NS, names.PLURAL_COMPUTE_DOMAINS)

    async def join() -> None:
        for api, node, ip in ((plugin, "node-1", "10.0.0.1"),
                              (secured_agent["plugin@node-2"], "node-2", "10.0.0.2")):
            await LegacyMembership(
                api, cd_namespace=USER_NS, cd_name="legacy-agent", cd_uid=cd["metadata"]["uid"],
                clique_id="c.1", node_name=node).join(ip)

    asyncio.run(join())
    current = custom.get_namespaced_custom_object(*cd_args, "legacy-agent")
    assert [n["name"] for n in current["status"]["nodes"]] == ["node-1", "node-2"]
    current["status"]["nodes"][1]["status"] = names.STATUS_READY
    _refused_by(lambda: custom.replace_namespaced_custom_object_status(
        *cd_args, "legacy-agent", current), "compute-domain-kubelet-plugin-status")
    _forbidden(lambda: custom.patch_namespaced_custom_object(*cd_args, "legacy-agent", {}))
