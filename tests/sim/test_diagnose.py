"""`compute-domain-agent diagnose` in the simulated cluster: each boundary broken on purpose
must be the one the verdict names, in the reference's words; a healthy domain is all ok."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from eventually import eventually_async
from kubernetes import client
from kubernetes.client.rest import ApiException
from scenario_env import NAMESPACE, ready, run_scenario

from agent.diagnose.command import diagnose
from agent.diagnose.reader import Reader
from agent.diagnose.report import BROKEN, OK, SKIPPED, UNCHECKED, Report
from api import names
from runtime.kubecall import call
from sim.cluster.cluster import SimCluster
from sim.cluster.demo import create_objects
from sim.cluster.example import builtin
from sim.cluster.node import clique_id

AGENT = Path(sys.executable).parent / "compute-domain-agent"
BOUNDARIES = ["installation", "publication", "reconciliation", "allocation", "bootstrap",
              "injection", "cleanup"]


async def diagnosis(cluster: SimCluster, name: str, grace: float = 120.0) -> Report:
    return await asyncio.to_thread(diagnose, Reader(cluster.admin), NAMESPACE, name,
                                   cluster.namespace, grace=grace, sim_root=cluster.root)


async def verdict(cluster: SimCluster, name: str, boundary: str | None, status: str,
                  words: str, *, grace: float = 120.0, timeout: float = 60.0) -> Report:
    """Diagnose until the verdict is `status` at `boundary` and its cause holds `words`."""
    last: list[Report] = []

    async def matches() -> Report | None:
        report = await diagnosis(cluster, name, grace)
        last[:] = [report]
        got = report.verdict()
        if (got["boundary"], got["status"]) == (boundary, status) and words in got["cause"]:
            return report
        return None

    try:
        return await eventually_async(matches, timeout=timeout, interval=0.5)
    except AssertionError:
        raise AssertionError(f"wanted {status} at {boundary} ({words!r}), got:\n"
                             + last[-1].render()) from None


def statuses(report: Report) -> dict[str, str]:
    return {b.name: b.status for b in report.boundaries}


def cli(cluster: SimCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AGENT), "diagnose", "--kubeconfig", str(cluster.kubeconfigs["admin"]),
         "--driver-namespace", cluster.namespace, "--sim-root", str(cluster.root), *args],
        capture_output=True, text=True, timeout=60)


# --- a healthy domain, then the cluster-side boundaries broken one by one ------------------


def test_healthy_then_taken_template_unschedulable_foreign_finalizer_no_device_class(
        short_dir, control_plane):
    async def body(cluster: SimCluster) -> None:
        good = builtin(clique_id(1), 2, name="good")
        await create_objects(cluster.admin, good)
        observed = await ready(cluster, "good")
        report = await verdict(cluster, "good", None, OK, "every boundary holds")
        assert statuses(report) == {**dict.fromkeys(BOUNDARIES, OK), "cleanup": SKIPPED}
        injection = "\n".join(report.boundaries[5].evidence)
        assert "/dev/nvidia-caps-imex-channels/channel0" in injection
        assert f"{names.CDI_KIND_CLAIM}=" in injection

        # The command line, as an admin runs it: exit 0 and the documented JSON.
        done = await asyncio.to_thread(cli, cluster, f"{NAMESPACE}/good", "--json")
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert set(doc) == {"apiVersion", "computeDomain", "verdict", "boundaries",
                            "unreadable"}
        assert doc["apiVersion"] == "diagnose.compute-domain.nvidia.com/v1"
        assert doc["computeDomain"]["uid"] == observed.uid
        assert doc["computeDomain"]["nodes"] == ["node-01", "node-02"]
        assert doc["verdict"] == {"status": "ok", "boundary": None, "next": "",
                                  "cause": report.verdict()["cause"]}
        assert [b["name"] for b in doc["boundaries"]] == BOUNDARIES
        assert all(set(b) == {"name", "title", "status", "evidence", "cause", "next"}
                   for b in doc["boundaries"])
        text = await asyncio.to_thread(cli, cluster, f"{NAMESPACE}/good")
        assert text.returncode == 0 and "Verdict: OK" in text.stdout
        # Read-only: an auditor allowed only get/list sees the same, and the server counts
        # nothing but reads from it.
        auditor = await _auditor(cluster)
        done = await asyncio.to_thread(cli, cluster, f"{NAMESPACE}/good", "--json",
                                       "--kubeconfig", str(auditor))
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["unreadable"] == {}
        verbs = dict(cluster.control_plane.requests_by_user()["auditor"])
        assert set(verbs) <= {"get", "list"} and verbs, verbs
        # A user RBAC lets read nothing: "could not look" never reads as "not there".
        nobody = await _user(cluster, "nobody")
        done = await asyncio.to_thread(cli, cluster, f"{NAMESPACE}/good", "--json",
                                       "--kubeconfig", str(nobody))
        doc = json.loads(done.stdout)
        assert done.returncode == 1
        assert doc["verdict"]["cause"].startswith(f"cannot read ComputeDomain {NAMESPACE}/good")
        assert doc["boundaries"][0]["status"] == "ok"
        assert "could not read it (403" in "\n".join(doc["boundaries"][0]["evidence"])
        assert any("403" in why for why in doc["unreadable"].values())
        usage = await asyncio.to_thread(cli, cluster, "good")
        assert usage.returncode == 2 and "NAMESPACE/NAME" in usage.stderr
        missing = await asyncio.to_thread(cli, cluster, f"{NAMESPACE}/nope")
        assert missing.returncode == 1 and "does not exist" in missing.stdout

        # The workload template's name is already taken by someone else's template.
        resource = client.ResourceV1Api(cluster.admin)
        await call(resource.create_namespaced_resource_claim_template, NAMESPACE, {
            "metadata": {"name": "taken-channel"},
            "spec": {"spec": {"devices": {"requests": [{"name": "x", "exactly": {
                "deviceClassName": names.DEVICE_CLASS_DEFAULT_CHANNEL}}]}}}})
        taken = builtin(None, 1, name="taken", node="node-01")
        await create_objects(cluster.admin, taken[:1])
        report = await verdict(cluster, "taken", "reconciliation", BROKEN,
                               "is taken by another object")
        assert report.exit_status == 1
        assert "resourceclaimtemplate taken-channel" in report.verdict()["next"]

        # A pod pinned to a clique that has no nodes: the scheduler's reason, stable.
        nowhere = builtin("no-such-clique", 1, name="nowhere")
        await create_objects(cluster.admin, nowhere)
        await verdict(cluster, "nowhere", "allocation", "waiting", "cannot be scheduled")
        report = await verdict(cluster, "nowhere", "allocation", BROKEN, "cannot be scheduled",
                               grace=3.0)
        assert names.LABEL_GPU_CLIQUE in report.verdict()["next"]

        # Deletion held up by a finalizer nobody in the driver owns.
        custom = client.CustomObjectsApi(cluster.admin)
        await call(custom.patch_namespaced_custom_object, names.GROUP, names.VERSION,
                   NAMESPACE, names.PLURAL_COMPUTE_DOMAINS, "good",
                   {"metadata": {"finalizers": [names.FINALIZER, "example.com/hold"]}})
        await call(custom.delete_namespaced_custom_object, names.GROUP, names.VERSION,
                   NAMESPACE, names.PLURAL_COMPUTE_DOMAINS, "good")
        report = await verdict(cluster, "good", "cleanup", BROKEN,
                               "finalizer(s) the driver does not own: example.com/hold")
        assert report.domain["deleting"] is True

        # Drop only ours, at the resourceVersion read: the controller may drop its own
        # finalizer in between (then the patch conflicts and is made again).
        for _ in range(10):
            held = await call(custom.get_namespaced_custom_object, names.GROUP, names.VERSION,
                              NAMESPACE, names.PLURAL_COMPUTE_DOMAINS, "good")
            try:
                await call(custom.patch_namespaced_custom_object, names.GROUP, names.VERSION,
                           NAMESPACE, names.PLURAL_COMPUTE_DOMAINS, "good",
                           {"metadata": {"resourceVersion": held["metadata"]["resourceVersion"],
                                         "finalizers": [f for f in held["metadata"]["finalizers"]
                                                        if f != "example.com/hold"]}})
                break
            except ApiException as err:
                if err.status != 409:
                    raise
        await verdict(cluster, "good", "reconciliation", BROKEN, "does not exist")

        # An installation without the channel DeviceClass.
        await call(resource.delete_device_class, names.DEVICE_CLASS_DEFAULT_CHANNEL)
        report = await verdict(cluster, "nowhere", "installation", BROKEN,
                               f"DeviceClass {names.DEVICE_CLASS_DEFAULT_CHANNEL} is missing")
        assert all(b.status == UNCHECKED for b in report.boundaries[1:6])

    run_scenario(short_dir, body, control_plane=control_plane, nodes=2, cliques=1)


async def _user(cluster: SimCluster, name: str) -> Path:
    """A kubeconfig for a new user `name` (with no permissions yet)."""
    return cluster.user_kubeconfig(name)


async def _auditor(cluster: SimCluster) -> Path:
    """A user who may get and list everything and nothing else; its kubeconfig."""
    kubeconfig = await _user(cluster, "auditor")
    rbac = client.RbacAuthorizationV1Api(cluster.admin)
    await call(rbac.create_cluster_role, {
        "metadata": {"name": "auditor"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]}]})
    await call(rbac.create_cluster_role_binding, {
        "metadata": {"name": "auditor"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "auditor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "auditor"}]})
    return kubeconfig


# --- node-side failures, driver-managed ------------------------------------------------------


def test_plugin_not_running_imex_never_ready_non_fabric_node(short_dir, control_plane):
    async def body(cluster: SimCluster) -> None:
        # node-01: its IMEX daemon never becomes ready.
        cluster.nodes["node-01"].kubelet.env_extra.update(
            {"FAKE_IMEX_NEVER_READY": "1", "IMEX_NOT_READY_EVENT_AFTER": "2s"})
        stuck = builtin(None, 1, name="stuck", node="node-01")
        await create_objects(cluster.admin, stuck)
        await verdict(cluster, "stuck", "bootstrap", "waiting",
                      "the IMEX daemon on node node-01 is not ready")
        report = await verdict(cluster, "stuck", "bootstrap", BROKEN,
                               "the IMEX daemon on node node-01 is not ready (IMEXDaemonNotReady")
        assert "describe pod" in report.verdict()["next"]

        # node-02: the kubelet plugin is not running.
        await cluster.stop_agent("node-02")
        orphan = builtin(None, 1, name="orphan", node="node-02")
        await create_objects(cluster.admin, orphan)
        report = await verdict(cluster, "orphan", "publication", BROKEN,
                               "the plugin is not registered on node node-02")
        assert "spec.nodeName=node-02" in report.verdict()["next"]
        await cluster.start_agent("node-02")
        await ready(cluster, "orphan")
        await verdict(cluster, "orphan", None, OK, "every boundary holds")

        # node-03 has no NVLink fabric: the pod runs, without a channel.
        lonely = builtin(None, 1, name="lonely", node="node-03")
        await create_objects(cluster.admin, lonely)
        report = await verdict(cluster, "lonely", "injection", BROKEN, "false success")
        assert "no NVLink clique ID" in report.verdict()["cause"]

    run_scenario(short_dir, body, control_plane=control_plane, nodes=2, cliques=1,
                 non_fabric=1, slice_wipe_delay=1.0)


def test_clique_full(short_dir, control_plane):
    async def body(cluster: SimCluster) -> None:
        objects = builtin(clique_id(1), 2, name="crowded")
        await create_objects(cluster.admin, objects)
        report = await verdict(cluster, "crowded", "bootstrap", BROKEN, "clique full")
        assert "already at maximum (1)" in report.verdict()["cause"]
        assert names.ENV_MAX_NODES_PER_IMEX_DOMAIN in report.verdict()["next"]

    run_scenario(short_dir, body, control_plane=control_plane, nodes=2, cliques=1,
                 controller_env={names.ENV_MAX_NODES_PER_IMEX_DOMAIN: "1"})


# --- agent placement -----------------------------------------------------------------------


def test_agent_placement_ready_domain_is_ok_without_daemon_objects(short_dir, control_plane):
    """The node agents run nvidia-imex: no daemon DeviceClass, DaemonSet or pods, and the
    bootstrap evidence is each node's agent pod and its clique entry."""

    async def body(cluster: SimCluster) -> None:
        placed = builtin(clique_id(1), 2, name="placed")
        await create_objects(cluster.admin, placed)
        await ready(cluster, "placed")
        report = await verdict(cluster, "placed", None, OK, "every boundary holds")
        assert statuses(report) == {**dict.fromkeys(BOUNDARIES, OK), "cleanup": SKIPPED}
        installation = "\n".join(report.boundaries[0].evidence)
        assert "IMEX placement: agent (the controller Deployment's IMEX_PLACEMENT)" in (
            installation)
        assert names.DEVICE_CLASS_DAEMON not in installation
        assert "IMEX runs in the node agents" in "\n".join(report.boundaries[2].evidence)
        bootstrap = "\n".join(report.boundaries[4].evidence)
        for node in ("node-01", "node-02"):
            assert f"{node}: node agent pod {cluster.namespace}/" in bootstrap
            assert f"{node}: clique entry in " in bootstrap
        done = await asyncio.to_thread(cli, cluster, f"{NAMESPACE}/placed", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        assert doc["computeDomain"]["placement"] == "agent"
        assert doc["computeDomain"]["nodes"] == ["node-01", "node-02"]

    run_scenario(short_dir, body, control_plane=control_plane, nodes=2, cliques=1,
                 imex_placement="agent")


# --- host-managed --------------------------------------------------------------------------


def test_host_imex_not_ready_and_channel_owned_by_another_claim(short_dir, control_plane):
    async def body(cluster: SimCluster) -> None:
        peers = [n.ip for n in cluster.nodes.values()]
        host_imex = cluster.nodes["node-02"].host_imex
        assert host_imex is not None
        await host_imex.restart(peers, FAKE_IMEX_NEVER_READY="1")
        hosted = builtin(None, 1, name="hosted", node="node-02")
        await create_objects(cluster.admin, hosted)
        report = await verdict(cluster, "hosted", "bootstrap", BROKEN,
                               "host nvidia-imex on node node-02 is not ready", grace=3.0)
        assert "INIT_GPU" in report.verdict()["cause"]
        assert "nvidia-imex-ctl -q" in report.verdict()["next"]

        # A claim prepared on node-01 whose kubelet never unprepared it (its object was
        # deleted behind the kubelet's back): channel 0 stays owned in the checkpoint.
        await _stale_claim_on(cluster, "node-01")
        second = builtin(None, 1, name="second", node="node-01")
        await create_objects(cluster.admin, second)
        report = await verdict(cluster, "second", "injection", BROKEN,
                               "another claim owns channel 0 on this node (node-01)")
        assert "already allocated" in report.verdict()["cause"]
        assert "resourceclaims -A" in report.verdict()["next"]

    run_scenario(short_dir, body, control_plane=control_plane, nodes=2, cliques=1,
                 mode="hostManaged")


async def _stale_claim_on(cluster: SimCluster, node: str) -> None:
    """Prepare a channel claim on `node` through its DRA socket as a kubelet would, then
    delete the claim and its domain from the API without Unprepare."""
    from sim.cluster.dra import ClaimRef

    first = builtin(None, 1, name="first", node=node)
    await create_objects(cluster.admin, first[:1])  # the domain only, no pod
    custom = client.CustomObjectsApi(cluster.admin)
    cd = await call(custom.get_namespaced_custom_object, names.GROUP, names.VERSION,
                    NAMESPACE, names.PLURAL_COMPUTE_DOMAINS, "first")
    resource = client.ResourceV1Api(cluster.admin)
    claim = await call(resource.create_namespaced_resource_claim, NAMESPACE, {
        "metadata": {"name": "by-hand"},
        "spec": {"devices": {
            "requests": [{"name": "channel", "exactly": {
                "deviceClassName": names.DEVICE_CLASS_DEFAULT_CHANNEL}}],
            "config": [{"requests": ["channel"], "opaque": {
                "driver": names.DRIVER_NAME, "parameters": {
                    "apiVersion": names.API_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
                    "domainID": cd["metadata"]["uid"], "allocationMode": "Single"}}}]}}})
    config = claim.spec.devices.config
    await call(resource.replace_namespaced_resource_claim_status, "by-hand", NAMESPACE, {
        "metadata": {"name": "by-hand", "resourceVersion": claim.metadata.resource_version},
        "spec": cluster.admin.sanitize_for_serialization(claim.spec),
        "status": {"allocation": {
            "devices": {
                "results": [{"request": "channel", "driver": names.DRIVER_NAME, "pool": node,
                             "device": names.DEVICE_CHANNEL_0}],
                "config": [{"source": "FromClaim", "requests": ["channel"],
                            "opaque": cluster.admin.sanitize_for_serialization(
                                config[0].opaque)}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
                "key": "metadata.name", "operator": "In", "values": [node]}]}]}}}})
    kubelet = cluster.nodes[node].kubelet
    plugin = kubelet.watcher.plugins[kubelet.driver_name]
    prepared = await kubelet.dra.prepare(
        plugin, [ClaimRef(NAMESPACE, "by-hand", claim.metadata.uid)])
    assert prepared  # the agent now holds channel 0 of node-01 for this claim
    await call(resource.delete_namespaced_resource_claim, "by-hand", NAMESPACE)
    await call(custom.delete_namespaced_custom_object, names.GROUP, names.VERSION,
               NAMESPACE, names.PLURAL_COMPUTE_DOMAINS, "first")

