"""The kubelet plugin end to end: real gRPC on unix sockets, the API emulator, real files."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pytest
import yaml
from eventually import eventually
from kubernetes import client
from plugin_env import (
    DRIVER_NS,
    NODE,
    AgentThread,
    Kubelet,
    NodeEnv,
    waiting_reason,
    waits_of,
)

from api import names


@pytest.fixture
def node(short_dir) -> NodeEnv:
    return NodeEnv(short_dir / "node")


@pytest.fixture
def agent(apiserver, cluster, node, tmp_path):
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    thread = AgentThread(node.config(kubeconfig))
    try:
        yield thread
    finally:
        thread.close()


@pytest.fixture
def kubelet(agent, node) -> Kubelet:
    return Kubelet(node)


def read_spec(node: NodeEnv, claim_uid: str) -> dict:
    path = node.root / "cdi" / f"k8s.compute-domain.nvidia.com-claim_{claim_uid}.yaml"
    return yaml.safe_load(path.read_text())


def test_registration_handshake(kubelet, node):
    info = kubelet.get_info()
    assert info.type == "DRAPlugin"
    assert info.name == "compute-domain.nvidia.com"
    assert info.endpoint == str(node.dra_socket)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    kubelet.notify(True)
    with pytest.raises(grpc.RpcError) as err:
        kubelet.notify(False, "driver name taken")
    assert "failed registration process: driver name taken" in err.value.details()


def test_resource_slice_is_published_and_repaired(agent, k8s):
    resource = client.ResourceV1Api(k8s)
    slices = resource.list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
    assert len(slices) == 1
    spec = slices[0].spec
    assert spec.driver == names.DRIVER_NAME and spec.pool.name == NODE
    assert [d.name for d in spec.devices] == ["channel-0", "daemon-0"]
    assert spec.devices[0].attributes["type"].string == "channel"
    assert spec.devices[0].attributes["id"].int == 0
    assert slices[0].metadata.owner_references[0].kind == "Node"
    resource.delete_resource_slice(slices[0].metadata.name)
    # Put back by the watch, well before the periodic resync.
    again = eventually(
        lambda: resource.list_resource_slice(field_selector=f"spec.nodeName={NODE}").items,
        "the deleted slice republished", interval=0.05,
    )
    assert len(again) == 1 and again[0].metadata.name != slices[0].metadata.name
    edited = resource.read_resource_slice(again[0].metadata.name)
    edited.spec.devices = edited.spec.devices[:1]
    resource.replace_resource_slice(edited.metadata.name, edited)

    def repaired() -> bool:
        now = resource.list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
        return len(now) == 1 and [d.name for d in now[0].spec.devices] == [
            "channel-0", "daemon-0"]

    eventually(repaired, "the edited slice repaired", interval=0.05)


def test_daemon_claim_gets_identity_mount_and_device(kubelet, cluster, node):
    cd = cluster.compute_domain("cd1")
    uid = cd["metadata"]["uid"]
    claim = cluster.daemon_claim("daemon", uid)
    claim_uid = claim["metadata"]["uid"]
    resp = kubelet.prepare([claim])
    result = resp.claims[claim_uid]
    assert result.error == ""
    assert list(result.devices[0].cdi_device_ids) == [
        "k8s.compute-domain.nvidia.com/device=all",
        f"k8s.compute-domain.nvidia.com/claim={claim_uid}-daemon-0",
    ]
    assert list(result.devices[0].request_names) == ["daemon"]
    spec = read_spec(node, claim_uid)
    edits = spec["devices"][0]["containerEdits"]
    assert edits["env"] == [
        f"CLIQUE_ID={node.clique_id}",
        f"COMPUTE_DOMAIN_UUID={uid}",
        "COMPUTE_DOMAIN_NAME=cd1",
        "COMPUTE_DOMAIN_NAMESPACE=default",
    ]
    assert edits["deviceNodes"][0]["path"] == "/dev/nvidia-caps/nvidia-cap7"
    assert edits["mounts"][0]["containerPath"] == "/imexd"
    template = node.plugin_dir / "domains" / uid / "imexd.cfg.tmpl"
    assert "IMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}" in template.read_text()
    assert (node.root / "cdi" / "k8s.compute-domain.nvidia.com-device_base.yaml").exists()


def prepare_in_background(kubelet, claim):
    out = {}

    def run():
        start = time.monotonic()
        out["resp"] = kubelet.prepare([claim])
        out["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_channel_claim_waits_for_the_local_daemon_and_is_released_by_the_clique(
    agent, kubelet, cluster, node
):
    cd = cluster.compute_domain("cd1")
    uid = cd["metadata"]["uid"]
    claim = cluster.channel_claim("wl", "default", uid, "Single")
    waits = waits_of(agent)
    view = agent.app.cluster

    async def seen() -> tuple[str, tuple[int, ...]]:
        return view.daemon_entry(uid, node.clique_id), view.generation()

    def checked(entry: str) -> bool:
        """The agent saw the clique entry as `entry` and a Prepare that checked that state
        went back to waiting (it did not return)."""
        now, generation = agent.run(seen())
        return entry in now and any(since >= generation for since in waits)

    thread, out = prepare_in_background(kubelet, claim)
    eventually(lambda: cluster.node_labels(NODE).get(names.LABEL_COMPUTE_DOMAIN) == uid,
               "node labeled")
    eventually(lambda: checked("has no entries yet"), "Prepare waiting for an entry")
    assert "resp" not in out, "returned before the daemon was Ready"
    cluster.set_clique_daemon(uid, node.clique_id, NODE, "NotReady")
    eventually(lambda: checked("is NotReady"), "Prepare waiting on the NotReady entry")
    assert "resp" not in out
    released = time.monotonic()
    cluster.set_clique_daemon(uid, node.clique_id, NODE, "Ready")
    thread.join(10)
    assert time.monotonic() - released < 1.0, "Prepare must return on the watch event"
    result = out["resp"].claims[claim["metadata"]["uid"]]
    assert result.error == ""
    assert list(result.devices[0].cdi_device_ids) == [
        f"k8s.compute-domain.nvidia.com/claim={claim['metadata']['uid']}-channel-0"
    ]
    spec = read_spec(node, claim["metadata"]["uid"])
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert [n["path"] for n in nodes] == ["/dev/nvidia-caps-imex-channels/channel0"]
    assert nodes[0]["major"] == 234 and "minor" not in nodes[0]


def test_a_waiting_claim_names_the_daemon_entry_and_where_to_look(
    apiserver, cluster, short_dir, tmp_path
):
    """The reason kubelet puts on the pod says what the node's clique entry is (none yet,
    NotReady) and which `kubectl describe pod` shows the daemon's own Events."""
    node = NodeEnv(short_dir / "node", extra_args=["--prepare-timeout", "1s"])
    thread = AgentThread(node.config(apiserver.write_kubeconfig(tmp_path / "kubeconfig")))
    try:
        kubelet = Kubelet(node)
        uid = cluster.compute_domain("cd1")["metadata"]["uid"]
        claim = cluster.channel_claim("wl", "default", uid, "Single")
        look = (f"see why with: kubectl describe -n {DRIVER_NS} $(kubectl get pod -n {DRIVER_NS} "
                f"-o name -l {names.LABEL_COMPUTE_DOMAIN}={uid} "
                f"--field-selector spec.nodeName={NODE})")
        reason = waiting_reason(kubelet.prepare([claim]), claim["metadata"]["uid"])
        assert f"waiting for the IMEX daemon on {NODE} to report Ready" in reason
        assert f"(clique {node.clique_id} has no entries yet)" in reason
        assert reason.endswith(look), reason
        cluster.set_clique_daemon(uid, node.clique_id, NODE, "NotReady")
        reason = waiting_reason(kubelet.prepare([claim]), claim["metadata"]["uid"])
        assert f"(its entry in clique {node.clique_id} is NotReady)" in reason
        assert reason.endswith(look), reason
    finally:
        thread.close()


def test_a_node_labelled_for_another_domain_leaves_no_spec_behind(
    apiserver, cluster, short_dir, tmp_path
):
    """The label write is in flight while the claim's CDI spec is written: when it is
    refused (the node still serves another domain), the claim waits with the reference's
    words and the spec written beside it is gone, so no file names a claim not prepared."""
    node = NodeEnv(short_dir / "node", extra_args=["--prepare-timeout", "1s"])
    thread = AgentThread(node.config(apiserver.write_kubeconfig(tmp_path / "kubeconfig")))
    try:
        kubelet = Kubelet(node)
        other = cluster.compute_domain("cd-other")["metadata"]["uid"]
        cluster.core.patch_node(NODE, {"metadata": {"labels": {
            names.LABEL_COMPUTE_DOMAIN: other}}})
        _, claim = ready_channel_claim(cluster, node)
        uid = claim["metadata"]["uid"]
        reason = waiting_reason(kubelet.prepare([claim]), uid)
        assert "label already exists for a different ComputeDomain" in reason, reason
        assert not [f for f in node.cdi_files() if uid in f], node.cdi_files()
        assert cluster.node_labels(NODE)[names.LABEL_COMPUTE_DOMAIN] == other
        # Once the other domain's label is gone, the same claim prepares and has its spec.
        cluster.core.patch_node(NODE, {"metadata": {"labels": {
            names.LABEL_COMPUTE_DOMAIN: None}}})
        eventually(lambda: kubelet.prepare([claim]).claims[uid].error == "",
                   "Prepare once the node is free")
        assert read_spec(node, uid)["devices"][0]["containerEdits"]["deviceNodes"]
    finally:
        thread.close()


def ready_channel_claim(
    cluster, node, name="wl", mode="Single", device="channel-0", namespace="default", cd_name="cd1"
):
    cd = cluster.compute_domain(cd_name, namespace=namespace)
    uid = cd["metadata"]["uid"]
    cluster.set_clique_daemon(uid, node.clique_id, NODE, "Ready")
    return cd, cluster.channel_claim(name, namespace, uid, mode, device=device)


def test_allocation_mode_all_injects_every_channel(kubelet, cluster, node):
    _, claim = ready_channel_claim(cluster, node, mode="All")
    resp = kubelet.prepare([claim])
    assert resp.claims[claim["metadata"]["uid"]].error == ""
    nodes = read_spec(node, claim["metadata"]["uid"])["devices"][0]["containerEdits"]["deviceNodes"]
    assert len(nodes) == 2048
    assert [n["path"].rsplit("/", 1)[1] for n in nodes[:4]] == [
        "channel0",
        "channel1",
        "channel10",
        "channel100",
    ]


def test_v1beta1_is_served_the_same(kubelet, cluster, node):
    _, claim = ready_channel_claim(cluster, node)
    resp = kubelet.prepare([claim], beta=True)
    assert resp.claims[claim["metadata"]["uid"]].devices[0].device_name == "channel-0"
    un = kubelet.unprepare([claim], beta=True)
    assert un.claims[claim["metadata"]["uid"]].error == ""


def test_prepare_is_idempotent_and_unprepare_cleans_up(kubelet, cluster, node):
    cd, claim = ready_channel_claim(cluster, node)
    uid = claim["metadata"]["uid"]
    first = kubelet.prepare([claim])
    second = kubelet.prepare([claim])
    assert first.claims[uid] == second.claims[uid]
    assert cluster.node_labels(NODE)[names.LABEL_COMPUTE_DOMAIN] == cd["metadata"]["uid"]
    un = kubelet.unprepare([claim])
    assert un.claims[uid].error == ""
    assert names.LABEL_COMPUTE_DOMAIN not in cluster.node_labels(NODE)
    assert node.cdi_files() == ["k8s.compute-domain.nvidia.com-device_base.yaml"]
    assert kubelet.unprepare([claim]).claims[uid].error == ""


def test_namespace_mismatch_is_a_permanent_error(kubelet, cluster, node):
    cluster.namespace("other")
    cd = cluster.compute_domain("cd1")
    claim = cluster.channel_claim("wl", "other", cd["metadata"]["uid"])
    resp = kubelet.prepare([claim])
    assert (
        "namespace is different than the ComputeDomain's namespace"
        in resp.claims[claim["metadata"]["uid"]].error
    )


@pytest.mark.parametrize(
    "params, message",
    [
        (
            {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND_CHANNEL_CONFIG,
                "domainID": "x",
                "unknown": "field",
            },
            'error decoding config parameters: strict decoding error: unknown field "unknown"',
        ),
        (
            {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND_CHANNEL_CONFIG,
                "domainID": "../x",
            },
            "must not contain '/'",
        ),
        (
            {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND_CHANNEL_CONFIG,
                "domainID": "u",
                "allocationMode": "Many",
            },
            "invalid allocationMode 'Many'",
        ),
        (None, "no ComputeDomainChannelConfig for device channel-0"),
    ],
)
def test_bad_configs_are_refused_with_nothing_written(kubelet, cluster, node, params, message):
    claim = cluster.claim(
        "bad", "default", NODE, device="channel-0", request="channel", parameters=params
    )
    resp = kubelet.prepare([claim])
    assert message in resp.claims[claim["metadata"]["uid"]].error
    assert names.LABEL_COMPUTE_DOMAIN not in cluster.node_labels(NODE)
    assert node.cdi_files() == ["k8s.compute-domain.nvidia.com-device_base.yaml"]
    assert claim["metadata"]["uid"] not in (node.plugin_dir / "checkpoint.json").read_text()


def test_label_of_another_domain_keeps_the_claim_pending(kubelet, cluster, node):
    core = cluster.core
    core.patch_node(NODE, {"metadata": {"labels": {names.LABEL_COMPUTE_DOMAIN: "other-cd"}}})
    _, claim = ready_channel_claim(cluster, node)
    resp = kubelet.prepare([claim])
    assert "label" in waiting_reason(resp, claim["metadata"]["uid"])
    assert cluster.node_labels(NODE)[names.LABEL_COMPUTE_DOMAIN] == "other-cd"


def test_channel_zero_is_owned_by_one_claim_at_a_time(kubelet, cluster, node):
    _, first = ready_channel_claim(cluster, node, name="wl1")
    assert kubelet.prepare([first]).claims[first["metadata"]["uid"]].error == ""
    domain = first["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]
    second = cluster.channel_claim("wl2", "default", domain["domainID"])
    resp = kubelet.prepare([second])
    assert "channel-0 is already allocated" in waiting_reason(resp, second["metadata"]["uid"])
    kubelet.unprepare([first])
    assert kubelet.prepare([second]).claims[second["metadata"]["uid"]].error == ""


def test_whole_rpc_errors(kubelet, cluster, node):
    missing = {"metadata": {"namespace": "default", "name": "ghost", "uid": "u-1"}}
    with pytest.raises(grpc.RpcError) as err:
        kubelet.prepare([missing])
    assert "retrieve claim default/ghost" in err.value.details()
    unallocated = cluster.resource.create_namespaced_resource_claim(
        "default",
        {
            "metadata": {"name": "unallocated"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "r",
                            "exactly": {"deviceClassName": names.DEVICE_CLASS_DEFAULT_CHANNEL},
                        }
                    ]
                }
            },
        },
    )
    ref = {
        "metadata": {"namespace": "default", "name": "unallocated", "uid": unallocated.metadata.uid}
    }
    with pytest.raises(grpc.RpcError) as err:
        kubelet.prepare([ref])
    assert "claim default/unallocated not allocated" in err.value.details()
    _, claim = ready_channel_claim(cluster, node)
    replaced = {"metadata": dict(claim["metadata"], uid="not-the-uid")}
    with pytest.raises(grpc.RpcError) as err:
        kubelet.prepare([replaced])
    assert "got replaced" in err.value.details()


def test_non_fabric_node_gets_no_channel_device(apiserver, cluster, short_dir, tmp_path):
    env = NodeEnv(short_dir / "plain", clique=None)
    agent = AgentThread(env.config(apiserver.write_kubeconfig(tmp_path / "kc")))
    try:
        cd = cluster.compute_domain("cd1")
        cluster.set_cd_node_status(cd, NODE, "Ready")
        claim = cluster.channel_claim("wl", "default", cd["metadata"]["uid"])
        resp = Kubelet(env).prepare([claim])
        result = resp.claims[claim["metadata"]["uid"]]
        assert result.error == "" and list(result.devices[0].cdi_device_ids) == []
        assert env.cdi_files() == ["k8s.compute-domain.nvidia.com-device_base.yaml"]
    finally:
        agent.close()


def test_gpu_clique_label_is_owned_when_enabled(apiserver, cluster, short_dir, tmp_path):
    env = NodeEnv(short_dir / "gl", extra_args=["--gpu-clique-label-enabled", "true"])
    agent = AgentThread(env.config(apiserver.write_kubeconfig(tmp_path / "kc")))
    try:
        assert cluster.node_labels(NODE)[names.LABEL_GPU_CLIQUE] == env.clique_id
    finally:
        agent.close()
    assert names.LABEL_GPU_CLIQUE not in cluster.node_labels(NODE)


def test_cleanup_of_stale_claims_orphans_and_domains(agent, kubelet, cluster, node):
    cd = cluster.compute_domain("cd1")
    uid = cd["metadata"]["uid"]
    claim = cluster.channel_claim("wl", "default", uid)
    # The claim's Prepare is still waiting for the daemon when the claim is deleted.
    resp = kubelet.prepare([claim], timeout=30)
    waiting_reason(resp, claim["metadata"]["uid"])
    cluster.resource.delete_namespaced_resource_claim("wl", "default")
    orphan = node.root / "cdi" / "k8s.compute-domain.nvidia.com-claim_gone.yaml"
    orphan.write_text("---\n")
    stale_domain = node.plugin_dir / "domains" / "deleted-cd-uid"
    stale_domain.mkdir(parents=True)
    counts = agent.run(agent.app.maintenance.run_once())
    assert counts == {"stale": 1, "tombstones": 0, "orphans": 1, "domains": 1}
    assert not orphan.exists() and not stale_domain.exists()
    assert names.LABEL_COMPUTE_DOMAIN not in cluster.node_labels(NODE)
    entry = agent.app.driver.checkpoint.claims[claim["metadata"]["uid"]]
    assert entry.state == "PrepareAborted"


def test_stop_removes_both_sockets(apiserver, cluster, short_dir, tmp_path):
    env = NodeEnv(short_dir / "n")
    agent = AgentThread(env.config(apiserver.write_kubeconfig(tmp_path / "kc")))
    assert env.dra_socket.exists() and env.registration_socket.exists()
    agent.close()
    assert not env.dra_socket.exists() and not env.registration_socket.exists()


def fake_imex_ctl(driver_root: Path, output: str, code: int = 0) -> None:
    ctl = driver_root / "usr" / "bin" / "nvidia-imex-ctl"
    ctl.parent.mkdir(parents=True, exist_ok=True)
    ctl.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\nexit {code}\n")
    ctl.chmod(0o755)


@pytest.fixture
def host_managed(apiserver, cluster, short_dir, tmp_path):
    env = NodeEnv(
        short_dir / "hm",
        extra_args=[
            "--imex-mode",
            "hostManaged",
            "--feature-gates",
            "HostManagedIMEXDaemon=true",
            "--imex-ctl-chroot",
            "false",
        ],
    )
    agent = AgentThread(env.config(apiserver.write_kubeconfig(tmp_path / "kc")))
    try:
        yield env
    finally:
        agent.close()


def test_host_managed_publishes_only_channel_0_and_refuses_daemon_claims(
    host_managed, cluster, k8s
):
    slices = (
        client.ResourceV1Api(k8s).list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
    )
    assert [d.name for d in slices[0].spec.devices] == ["channel-0"]
    cd = cluster.compute_domain("cd1")
    claim = cluster.daemon_claim("daemon", cd["metadata"]["uid"])
    resp = Kubelet(host_managed).prepare([claim])
    assert "not supported when imex.mode=hostManaged" in resp.claims[claim["metadata"]["uid"]].error


@pytest.mark.parametrize(
    "output, code, ready",
    [("READY", 0, True), ("NOT_READY", 0, False), ("connection refused", 1, False)],
)
def test_host_managed_requires_an_exact_ready_line(host_managed, cluster, output, code, ready):
    fake_imex_ctl(host_managed.root / "driver-root", output, code)
    cd = cluster.compute_domain("cd1")
    claim = cluster.channel_claim("wl", "default", cd["metadata"]["uid"], "All")
    resp = Kubelet(host_managed).prepare([claim], timeout=30)
    uid = claim["metadata"]["uid"]
    if not ready:
        assert "host nvidia-imex" in waiting_reason(resp, uid)
        return
    assert resp.claims[uid].error == ""
    nodes = read_spec(host_managed, uid)["devices"][0]["containerEdits"]["deviceNodes"]
    assert len(nodes) == 1, "All is reduced to Single in host-managed mode"
    assert names.LABEL_COMPUTE_DOMAIN not in cluster.node_labels(NODE)


def test_host_managed_without_imex_ctl_keeps_the_claim_pending(host_managed, cluster):
    cd = cluster.compute_domain("cd1")
    claim = cluster.channel_claim("wl", "default", cd["metadata"]["uid"])
    resp = Kubelet(host_managed).prepare([claim], timeout=30)
    assert "nvidia-imex-ctl" in waiting_reason(resp, claim["metadata"]["uid"])
