"""The plugin's Events on the pods that reserve a claim: why a Prepare waits (this node's
IMEX daemon, the host's nvidia-imex), why it failed, what a fresh Prepare injected, and that
none of it changes what kubelet gets (rate-limited, best effort, a 403 only logged)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from plugin_env import (
    DRIVER_NS,
    NODE,
    AgentThread,
    ClusterObjects,
    Kubelet,
    NodeEnv,
    channel_params,
    waiting_reason,
)

from api import names
from sim.apiserver.authn import TokenAuthenticator
from sim.apiserver.runner import ServerThread
from sim.cluster import manifests

PLUGIN_REASONS = {names.EVENT_CHANNEL_WAITING, names.EVENT_HOST_IMEX_NOT_READY,
                  names.EVENT_PREPARE_FAILED, names.EVENT_CHANNEL_PREPARED,
                  names.EVENT_NO_CHANNEL}


def start(apiserver: ServerThread, env: NodeEnv, tmp_path: Path) -> AgentThread:
    return AgentThread(env.config(apiserver.write_kubeconfig(tmp_path / "kc")))


def flush(agent: AgentThread) -> None:
    """Wait for the Event writes in flight (Prepare returns before they finish)."""
    assert agent.app.events is not None
    agent.run(agent.app.events.close(timeout=10))


def pod(cluster: ClusterObjects, name: str, namespace: str = "default") -> client.V1Pod:
    return cluster.core.create_namespaced_pod(namespace, {
        "metadata": {"name": name},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]}})


def reserve(cluster: ClusterObjects, claim: dict[str, Any], *pods: client.V1Pod
            ) -> dict[str, Any]:
    """The claim as kubelet sees it once the scheduler reserved it for `pods`."""
    meta = claim["metadata"]
    body = dict(claim, status=dict(claim["status"], reservedFor=[
        {"resource": "pods", "name": p.metadata.name, "uid": p.metadata.uid} for p in pods]))
    updated = cluster.resource.replace_namespaced_resource_claim_status(
        meta["name"], meta["namespace"], body)
    return cluster.api.sanitize_for_serialization(updated)


def events(cluster: ClusterObjects, namespace: str = "default") -> list[client.CoreV1Event]:
    """The plugin's Events in `namespace` (in no particular order)."""
    return [e for e in cluster.core.list_namespaced_event(namespace).items
            if e.reason in PLUGIN_REASONS]


def reasons(cluster: ClusterObjects, namespace: str = "default") -> list[tuple[str, str]]:
    """(pod, reason) of the plugin's Events, sorted."""
    return sorted((e.involved_object.name, e.reason) for e in events(cluster, namespace))


@pytest.fixture
def node(short_dir) -> NodeEnv:
    return NodeEnv(short_dir / "node", extra_args=["--prepare-timeout", "1s"])


@pytest.fixture
def agent(apiserver, cluster, node, tmp_path) -> Iterator[AgentThread]:
    thread = start(apiserver, node, tmp_path)
    try:
        yield thread
    finally:
        thread.close()


def test_waiting_is_one_event_per_pod_then_prepared_once(agent, cluster, node):
    uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    p1, p2 = pod(cluster, "wl-0"), pod(cluster, "wl-1")
    claim = reserve(cluster, cluster.channel_claim("wl", "default", uid, "Single"), p1, p2)
    claim_uid = claim["metadata"]["uid"]
    kubelet = Kubelet(node)
    first = waiting_reason(kubelet.prepare([claim]), claim_uid)
    waiting_reason(kubelet.prepare([claim]), claim_uid)  # within the minute: no new Event
    flush(agent)
    waiting = events(cluster)
    assert reasons(cluster) == [
        ("wl-0", names.EVENT_CHANNEL_WAITING), ("wl-1", names.EVENT_CHANNEL_WAITING)]
    for event in waiting:
        assert event.type == "Normal"  # part of every bring-up; kubelet warns if it lasts
        assert event.involved_object.kind == "Pod"
        assert event.involved_object.uid == {"wl-0": p1, "wl-1": p2}[
            event.involved_object.name].metadata.uid
        assert event.source.component == names.EVENT_COMPONENT_PLUGIN
        assert event.source.host == NODE and event.reporting_instance == NODE
        assert f"waiting for the IMEX daemon on {NODE} to report Ready" in event.message
        assert event.message in first, "the message is the one kubelet got"

    cluster.set_clique_daemon(uid, node.clique_id, NODE, "Ready")
    assert agent.app.events is not None
    agent.app.events.interval = 0.0  # from here on only the driver decides what is written
    resp = kubelet.prepare([claim])
    assert resp.claims[claim_uid].error == ""
    again = kubelet.prepare([claim])  # kubelet's idempotent re-Prepare
    assert again.claims[claim_uid] == resp.claims[claim_uid]
    flush(agent)
    prepared = [e for e in events(cluster) if e.reason == names.EVENT_CHANNEL_PREPARED]
    assert sorted(e.involved_object.name for e in prepared) == ["wl-0", "wl-1"]
    cdi_id = f"{names.CDI_KIND_CLAIM}={claim_uid}-channel-0"
    assert list(resp.claims[claim_uid].devices[0].cdi_device_ids) == [cdi_id]
    for event in prepared:
        assert event.type == "Normal"
        assert event.message == (f"prepared on node {NODE}: channel 0 of ComputeDomain {uid}, "
                                 f"CDI devices {cdi_id}")
    assert not [e for e in events(cluster) if e.reason == names.EVENT_PREPARE_FAILED]


def test_all_channels_are_named_in_the_prepared_event(agent, cluster, node):
    uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    cluster.set_clique_daemon(uid, node.clique_id, NODE, "Ready")
    claim = reserve(cluster, cluster.channel_claim("wl", "default", uid, "All"), pod(cluster, "w"))
    assert Kubelet(node).prepare([claim]).claims[claim["metadata"]["uid"]].error == ""
    flush(agent)
    [event] = events(cluster)
    assert event.reason == names.EVENT_CHANNEL_PREPARED
    assert f"all {names.MAX_IMEX_CHANNELS} channels of ComputeDomain {uid}" in event.message


def test_a_permanent_error_is_a_prepare_failed_event(agent, cluster, node):
    cluster.namespace("other")
    uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    workload = pod(cluster, "wl", "other")
    claim = reserve(cluster, cluster.channel_claim("wl", "other", uid), workload)
    error = Kubelet(node).prepare([claim]).claims[claim["metadata"]["uid"]].error
    assert "namespace is different than the ComputeDomain's namespace" in error
    flush(agent)
    [event] = events(cluster, "other")
    assert (event.reason, event.type) == (names.EVENT_PREPARE_FAILED, "Warning")
    assert (event.involved_object.name, event.involved_object.uid) == (
        "wl", workload.metadata.uid)
    # The kubelet gets the reference's words before the claim; the Event names the pod.
    ref = f"other/{claim['metadata']['name']}:{claim['metadata']['uid']}"
    assert error == f"error preparing devices for claim '{ref}': {event.message}"


def test_a_retryable_error_still_failing_at_the_end_is_a_prepare_failed_event(
        agent, cluster, node):
    uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    cluster.set_clique_daemon(uid, node.clique_id, NODE, "Ready")
    kubelet = Kubelet(node)
    owner = reserve(cluster, cluster.channel_claim("wl1", "default", uid), pod(cluster, "p1"))
    assert kubelet.prepare([owner]).claims[owner["metadata"]["uid"]].error == ""
    second = reserve(cluster, cluster.channel_claim("wl2", "default", uid), pod(cluster, "p2"))
    error = waiting_reason(kubelet.prepare([second]), second["metadata"]["uid"])
    flush(agent)
    [failed] = [e for e in events(cluster) if e.involved_object.name == "p2"]
    assert failed.reason == names.EVENT_PREPARE_FAILED
    assert "already allocated" in failed.message and failed.message == error
    assert reasons(cluster) == [("p1", names.EVENT_CHANNEL_PREPARED),
                                ("p2", names.EVENT_PREPARE_FAILED)]


def test_daemon_claims_get_no_channel_events(agent, cluster, node):
    uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    daemon = cluster.daemon_claim("daemon", uid)  # reserved for the domain's daemon pod
    assert Kubelet(node).prepare([daemon]).claims[daemon["metadata"]["uid"]].error == ""
    flush(agent)
    assert events(cluster, DRIVER_NS) == []


def test_a_node_without_clique_says_no_channel_was_injected(apiserver, cluster, short_dir,
                                                           tmp_path):
    env = NodeEnv(short_dir / "plain", clique=None)
    agent = start(apiserver, env, tmp_path)
    try:
        cd = cluster.compute_domain("cd1")
        cluster.set_cd_node_status(cd, NODE, "Ready")
        claim = reserve(cluster, cluster.channel_claim("wl", "default", cd["metadata"]["uid"]),
                        pod(cluster, "wl"))
        kubelet = Kubelet(env)
        result = kubelet.prepare([claim]).claims[claim["metadata"]["uid"]]
        assert result.error == "" and list(result.devices[0].cdi_device_ids) == []
        kubelet.prepare([claim])
        flush(agent)
        [event] = events(cluster)
        assert (event.reason, event.type) == (names.EVENT_NO_CHANNEL, "Warning")
        assert "no NVLink clique ID" in event.message
        assert "no IMEX channel device was injected" in event.message
        assert "without Multi-Node NVLink (MNNVL)" in event.message
    finally:
        agent.close()


def fake_imex_ctl(driver_root: Path, output: str, code: int = 0) -> None:
    ctl = driver_root / "usr" / "bin" / "nvidia-imex-ctl"
    ctl.parent.mkdir(parents=True, exist_ok=True)
    ctl.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\nexit {code}\n")
    ctl.chmod(0o755)


def test_host_managed_not_ready_says_what_the_probe_answered(apiserver, cluster, short_dir,
                                                             tmp_path):
    env = NodeEnv(short_dir / "hm", extra_args=[
        "--imex-mode", "hostManaged", "--feature-gates", "HostManagedIMEXDaemon=true",
        "--imex-ctl-chroot", "false", "--prepare-timeout", "1s"])
    fake_imex_ctl(env.root / "driver-root", "NOT_READY")
    agent = start(apiserver, env, tmp_path)
    try:
        uid = cluster.compute_domain("cd1")["metadata"]["uid"]
        claim = reserve(cluster, cluster.channel_claim("wl", "default", uid), pod(cluster, "wl"))
        kubelet = Kubelet(env)
        error = waiting_reason(kubelet.prepare([claim]), claim["metadata"]["uid"])
        flush(agent)
        [event] = events(cluster)
        assert (event.reason, event.type) == (names.EVENT_HOST_IMEX_NOT_READY, "Warning")
        assert event.message.startswith("host nvidia-imex daemon readiness check failed: ")
        assert "NOT_READY" in event.message and event.message in error
        fake_imex_ctl(env.root / "driver-root", "READY")
        assert kubelet.prepare([claim]).claims[claim["metadata"]["uid"]].error == ""
        flush(agent)
        assert reasons(cluster) == sorted([("wl", names.EVENT_HOST_IMEX_NOT_READY),
                                           ("wl", names.EVENT_CHANNEL_PREPARED)])
        [prepared] = [e for e in events(cluster) if e.reason == names.EVENT_CHANNEL_PREPARED]
        assert f"channel 0 of ComputeDomain {uid}" in prepared.message
    finally:
        agent.close()


# --- RBAC without events: Prepare is the same, the 403 is only logged -------------------

DEPLOY_NS = "dra-driver-nvidia-gpu"
SA_PLUGIN = "dra-driver-nvidia-gpu-service-account-kubeletplugin"
PLUGIN_ROLE = "dra-driver-nvidia-gpu-clusterrole-kubeletplugin"


class RbacNode(NodeEnv):
    def args(self, kubeconfig: Path) -> list[str]:
        return [*self.host.agent_args(kubeconfig, DEPLOY_NS), "--prepare-timeout", "3s"]


def test_a_forbidden_event_does_not_fail_prepare(short_dir, tmp_path, caplog):
    auth = TokenAuthenticator()
    auth.add_admin("admin")
    auth.add_service_account(SA_PLUGIN, DEPLOY_NS, SA_PLUGIN,
                             extra={"authentication.kubernetes.io/node-name": (NODE,)})
    thread = ServerThread(authenticator=auth).start()
    admin = thread.api_client("admin")
    agent = None
    try:
        manifests.apply(admin, manifests.load("driverManaged"))
        objects = ClusterObjects(admin)
        objects.node(NODE)
        rbac = client.RbacAuthorizationV1Api(admin)
        role = rbac.read_cluster_role(PLUGIN_ROLE)
        role.rules = [r for r in role.rules if "events" not in r.resources]
        rbac.replace_cluster_role(PLUGIN_ROLE, role)
        env = RbacNode(short_dir / "n")
        agent = AgentThread(env.config(thread.write_kubeconfig(tmp_path / "kc", token=SA_PLUGIN)))
        cd = objects.compute_domain("cd1")
        cd_uid = cd["metadata"]["uid"]
        objects.custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, DEPLOY_NS, names.PLURAL_CLIQUES,
            {"apiVersion": names.API_VERSION, "kind": names.KIND_CLIQUE,
             "metadata": {"name": names.clique_object_name(cd_uid, env.clique_id)},
             "daemons": [{"nodeName": NODE, "ipAddress": "127.0.1.1",
                          "cliqueID": env.clique_id, "index": 0,
                          "status": names.STATUS_READY}]})
        claim = objects.claim("wl", "default", NODE, device="channel-0", request="channel",
                              parameters=channel_params(cd_uid))
        claim = reserve(objects, claim, pod(objects, "wl"))
        resp = Kubelet(env).prepare([claim])
        assert resp.claims[claim["metadata"]["uid"]].error == ""
        flush(agent)
        assert events(objects) == []
        denied = [r.getMessage() for r in caplog.records if r.name == "runtime.events"]
        assert any(f"could not record event {names.EVENT_CHANNEL_PREPARED} on pod default/wl"
                   in m and "403" in m for m in denied), denied
    finally:
        if agent is not None:
            agent.close()
        admin.close()
        thread.close()
