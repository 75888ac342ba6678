"""Security: what the agent leaves on the node's disk, what a hostile claim reference or
config can make it write, and how it fails under the shipped least-privilege RBAC."""

from __future__ import annotations

import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from eventually import eventually
from kubernetes import client
from plugin_env import (
    DRIVER_NS,
    NODE,
    AgentProcess,
    ClusterObjects,
    Kubelet,
    NodeEnv,
    channel_params,
)

from agent.checkpoint import CheckpointStore
from api import names
from sim.apiserver.authn import TokenAuthenticator
from sim.apiserver.runner import ServerThread
from sim.cluster import manifests

# --- (a) file and socket permissions -----------------------------------------------------


@pytest.fixture
def permissive_umask(set_umask: Callable[[int], int]) -> None:
    """Start agents with umask 000: every mode they leave must be one they set on purpose."""
    set_umask(0)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_sockets_state_and_specs_are_not_world_writable(
    apiserver, cluster, short_dir, tmp_path, permissive_umask
):
    node = NodeEnv(short_dir / "n")
    (node.root / "plugins").chmod(0o755)  # kubelet's, made under this test's umask 000
    for host_dir in (node.root / "cdi", node.root / "registry"):
        host_dir.rmdir()  # let the agent create them
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kc")
    cd = cluster.compute_domain("cd1")
    cd_uid = cd["metadata"]["uid"]
    cluster.set_clique_daemon(cd_uid, node.clique_id, NODE, "Ready")
    claims = [cluster.daemon_claim("daemon", cd_uid),
              cluster.channel_claim("wl", "default", cd_uid, "Single")]
    agent = AgentProcess(node, kubeconfig)
    try:
        resp = Kubelet(node).prepare(claims)
        assert all(c.error == "" for c in resp.claims.values())
        checked = {}
        for top in (node.root / "plugins", node.root / "registry", node.root / "cdi"):
            for path in [top, *top.rglob("*")]:
                checked[path] = _mode(path)
        assert stat.S_ISSOCK(node.dra_socket.lstat().st_mode)
        assert stat.S_ISSOCK(node.registration_socket.lstat().st_mode)
        assert node.dra_socket in checked and node.registration_socket in checked
        assert len([p for p in checked if p.name.endswith(".yaml")]) == 3  # base + 2 claims
        writable = {str(p): oct(m) for p, m in checked.items() if m & 0o002}
        assert writable == {}, "world-writable"
        # Only kubelet (root) talks to the sockets; the checkpoint is the agent's alone.
        for sock in (node.dra_socket, node.registration_socket):
            assert checked[sock] & 0o007 == 0, (sock, oct(checked[sock]))
        checkpoint = node.plugin_dir / names.CHECKPOINT_FILE
        assert checked[checkpoint] == 0o600
        assert checked[node.plugin_dir] & 0o007 == 0, oct(checked[node.plugin_dir])
    finally:
        assert agent.terminate() == 0


def test_a_missing_kubelet_plugins_dir_is_not_created_world_writable(
    apiserver, cluster, short_dir, tmp_path, permissive_umask
):
    node = NodeEnv(short_dir / "n")
    (node.root / "plugins").rmdir()
    agent = AgentProcess(node, apiserver.write_kubeconfig(tmp_path / "kc"))
    try:
        assert _mode(node.root / "plugins") & 0o002 == 0, oct(_mode(node.root / "plugins"))
    finally:
        assert agent.terminate() == 0


# --- (b) hostile claim references and configs ---------------------------------------------


def _tree(root: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = path.read_bytes()
        else:
            out[str(path.relative_to(root))] = None
    return out


TRAVERSAL = ["../../../../evil", "../evil", "a/b", "..", ".", "x\x00y", "/abs/evil", ""]


def test_hostile_claim_references_are_refused_per_claim_and_write_nothing(
    apiserver, cluster, short_dir, tmp_path
):
    node = NodeEnv(short_dir / "n")
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kc")
    cd = cluster.compute_domain("cd1")
    cd_uid = cd["metadata"]["uid"]
    good = cluster.daemon_claim("daemon", cd_uid)
    # A claim that exists, whose opaque config's domainID tries to walk out of domains/.
    evil_cfg = cluster.claim(
        "evil-domain", DRIVER_NS, NODE, device="daemon-0", request="daemon",
        parameters={"apiVersion": names.API_VERSION, "kind": names.KIND_DAEMON_CONFIG,
                    "domainID": "../../../../evil"})
    evil_channel = cluster.claim(
        "evil-channel", "default", NODE, device="channel-0", request="channel",
        parameters=channel_params("../../evil"))
    agent = AgentProcess(node, kubeconfig)
    try:
        kubelet = Kubelet(node)
        before = _tree(short_dir)
        refs: list[dict[str, Any]] = []
        for bad in TRAVERSAL:
            md = good["metadata"]
            refs.append({"metadata": {"namespace": md["namespace"], "name": md["name"],
                                      "uid": bad}})
            refs.append({"metadata": {"namespace": bad, "name": md["name"],
                                      "uid": f"ns-{len(refs)}"}})
            refs.append({"metadata": {"namespace": md["namespace"], "name": bad,
                                      "uid": f"name-{len(refs)}"}})
        refs = [r for r in refs if r["metadata"]["uid"]] + [evil_cfg, evil_channel]
        t0 = time.monotonic()
        resp = kubelet.prepare([*refs, good])
        assert time.monotonic() - t0 < 4, "a hostile claim must fail at once, not time out"
        errors = {uid: c.error for uid, c in resp.claims.items()}
        assert errors.pop(good["metadata"]["uid"]) == ""  # the honest claim in the batch
        assert set(errors) == {r["metadata"]["uid"] for r in refs}
        for ref in refs:
            uid = ref["metadata"]["uid"]
            assert errors[uid], uid
        for ref in refs[:-2]:
            assert "refusing" in errors[ref["metadata"]["uid"]]
        assert "invalid domainID '../../../../evil'" in errors[evil_cfg["metadata"]["uid"]]
        assert "invalid domainID '../../evil'" in errors[evil_channel["metadata"]["uid"]]
        un = kubelet.unprepare([*refs, good])
        un_errors = {uid: c.error for uid, c in un.claims.items()}
        assert un_errors.pop(good["metadata"]["uid"]) == ""
        for ref in refs[:-2]:
            assert "refusing" in un_errors[ref["metadata"]["uid"]]
        after = _tree(short_dir)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        # Only the honest claim's own state moved: the checkpoint (rewritten) and the
        # domain directory of its ComputeDomain (created by its Prepare).
        allowed = {"n/plugins/compute-domain.nvidia.com/checkpoint.json",
                   "n/agent.log", f"n/plugins/compute-domain.nvidia.com/domains/{cd_uid}",
                   f"n/plugins/compute-domain.nvidia.com/domains/{cd_uid}/"
                   f"{names.IMEXD_CONFIG_TEMPLATE}",
                   "n/plugins/compute-domain.nvidia.com/domains"}
        assert set(changed) <= allowed, changed
        assert not (short_dir / "evil").exists() and not Path("/evil").exists()
        cp = CheckpointStore(node.plugin_dir / names.CHECKPOINT_FILE).read()
        assert cp is not None and set(cp.claims) == set()
    finally:
        assert agent.terminate() == 0


# --- (c) the shipped least-privilege RBAC ---------------------------------------------------

DEPLOY_NS = "dra-driver-nvidia-gpu"
SA_PLUGIN = "dra-driver-nvidia-gpu-service-account-kubeletplugin"
PLUGIN_ROLE = "dra-driver-nvidia-gpu-clusterrole-kubeletplugin"
USER_NS = "team-a"


@pytest.fixture
def secured() -> Iterator[tuple[ServerThread, client.ApiClient]]:
    """The emulator with RBAC enforced and the driver-managed overlay applied."""
    auth = TokenAuthenticator()
    auth.add_admin("admin")
    # As a token bound to its pod or Node authenticates: the policies key on the node.
    auth.add_service_account(SA_PLUGIN, DEPLOY_NS, SA_PLUGIN,
                             extra={"authentication.kubernetes.io/node-name": (NODE,)})
    thread = ServerThread(authenticator=auth).start()
    admin = thread.api_client("admin")
    try:
        manifests.apply(admin, manifests.load("driverManaged"))
        core = client.CoreV1Api(admin)
        core.create_namespace({"metadata": {"name": USER_NS}})
        core.create_node({"metadata": {"name": NODE}})
        yield thread, admin
    finally:
        admin.close()
        thread.close()


def _user_channel_claim(admin: client.ApiClient, node: NodeEnv, name: str) -> dict[str, Any]:
    objects = ClusterObjects(admin)
    cd = objects.custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, USER_NS, names.PLURAL_COMPUTE_DOMAINS,
        {"apiVersion": names.API_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
         "metadata": {"name": name},
         "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": name}}}})
    cd_uid = cd["metadata"]["uid"]
    objects.custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, DEPLOY_NS, names.PLURAL_CLIQUES,
        {"apiVersion": names.API_VERSION, "kind": names.KIND_CLIQUE,
         "metadata": {"name": names.clique_object_name(cd_uid, node.clique_id)},
         "daemons": [{"nodeName": NODE, "ipAddress": "127.0.1.1", "cliqueID": node.clique_id,
                      "index": 0, "status": names.STATUS_READY}]})
    return objects.claim(name, USER_NS, NODE, device="channel-0", request="channel",
                         parameters=channel_params(cd_uid))


def _drop_verb(admin: client.ApiClient, resource: str, verb: str) -> None:
    rbac = client.RbacAuthorizationV1Api(admin)
    role = rbac.read_cluster_role(PLUGIN_ROLE)
    for rule in role.rules:
        if resource in rule.resources:
            rule.verbs = [v for v in rule.verbs if v != verb]
    rbac.replace_cluster_role(PLUGIN_ROLE, role)


class RbacNode(NodeEnv):
    def args(self, kubeconfig: Path) -> list[str]:
        return [*self.host.agent_args(kubeconfig, DEPLOY_NS), "--prepare-timeout", "3s"]


def test_the_shipped_rbac_is_enough_and_a_missing_verb_is_named(secured, short_dir, tmp_path):
    thread, admin = secured
    node = RbacNode(short_dir / "n")
    kubeconfig = thread.write_kubeconfig(tmp_path / "kc", token=SA_PLUGIN)
    ok = _user_channel_claim(admin, node, "ok")
    agent = AgentProcess(node, kubeconfig)
    try:
        kubelet = Kubelet(node)
        resp = kubelet.prepare([ok])
        assert resp.claims[ok["metadata"]["uid"]].error == ""
        labels = client.CoreV1Api(admin).read_node(NODE).metadata.labels or {}
        assert names.LABEL_COMPUTE_DOMAIN in labels
        assert kubelet.unprepare([ok]).claims[ok["metadata"]["uid"]].error == ""

        # An operator trims the ClusterRole: the node label can no longer be written.
        _drop_verb(admin, "nodes", "patch")
        denied = _user_channel_claim(admin, node, "denied")
        t0 = time.monotonic()
        error = kubelet.prepare([denied]).claims[denied["metadata"]["uid"]].error
        assert time.monotonic() - t0 < 3, "a 403 is not retried until the deadline"
        assert "forbidden" in error.lower(), error
        assert 'cannot patch resource "nodes"' in error, error
        assert f"ClusterRole {PLUGIN_ROLE}" in error, error
        assert "Traceback" not in agent.log.read_text()
    finally:
        assert agent.terminate() == 0


def test_a_missing_resourceslice_create_is_named_in_the_log(secured, short_dir, tmp_path):
    thread, admin = secured
    node = RbacNode(short_dir / "n")
    kubeconfig = thread.write_kubeconfig(tmp_path / "kc", token=SA_PLUGIN)
    _drop_verb(admin, "resourceslices", "create")
    agent = AgentProcess(node, kubeconfig)
    try:
        def failures() -> list[str]:
            return [ln for ln in agent.log.read_text().splitlines()
                    if "ResourceSlice" in ln and "failed" in ln]

        # Publishing runs after the agent says it is ready.
        line = eventually(failures, "the failed publish in the log", timeout=20, interval=0.1)[0]
        log = agent.log.read_text()
        assert "403" in line and 'cannot create resource "resourceslices"' in line, line
        assert "HTTP response headers" not in log and "Traceback" not in log, log[-3000:]
    finally:
        assert agent.terminate() == 0


# --- (d) links planted in a pod-writable directory ------------------------------------------


def test_links_planted_in_a_domain_directory_are_replaced_not_followed(
    apiserver, cluster, short_dir, tmp_path
):
    """The domain directory is every daemon pod's read-write `/imexd`. A pod that plants
    `.imexd.cfg.tmpl.tmp -> <victim>` or `imexd.cfg.tmpl -> <checkpoint>` there can make the
    agent (root on the host) neither write or chmod the victim nor hand the checkpoint to
    the IMEX daemon: the next daemon Prepare replaces the links with the plain template."""
    node = NodeEnv(short_dir / "n")
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kc")
    cd_uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    agent = AgentProcess(node, kubeconfig)
    try:
        kubelet = Kubelet(node)
        first = cluster.daemon_claim("daemon", cd_uid)
        assert kubelet.prepare([first]).claims[first["metadata"]["uid"]].error == ""
        domain = node.plugin_dir / names.DOMAINS_DIR / cd_uid
        template = domain / names.IMEXD_CONFIG_TEMPLATE
        shipped = template.read_bytes()
        victim = short_dir / "victim"
        victim.write_bytes(b"secret\n")
        victim.chmod(0o600)
        checkpoint = node.plugin_dir / names.CHECKPOINT_FILE
        saved = checkpoint.read_bytes()
        (domain / f".{names.IMEXD_CONFIG_TEMPLATE}.tmp").symlink_to(victim)
        template.unlink()
        template.symlink_to(Path("..") / ".." / names.CHECKPOINT_FILE)
        # The daemon pod is replaced: its claim goes, the new pod's claim is prepared.
        assert kubelet.unprepare([first]).claims[first["metadata"]["uid"]].error == ""
        again = cluster.daemon_claim("daemon-2", cd_uid)
        assert kubelet.prepare([again]).claims[again["metadata"]["uid"]].error == ""
        assert victim.read_bytes() == b"secret\n" and _mode(victim) == 0o600
        assert not template.is_symlink() and template.read_bytes() == shipped
        assert _mode(template) == 0o644
        # The checkpoint holds the two claims now, and nothing was written through a link.
        assert checkpoint.read_bytes() != saved and not checkpoint.is_symlink()
        left = sorted(p.name for p in domain.iterdir())
        assert left == [f".{names.IMEXD_CONFIG_TEMPLATE}.tmp", names.IMEXD_CONFIG_TEMPLATE]
    finally:
        agent.kill()


# --- (e) daemon claims bound to their domain's daemon pod ------------------------------------


def test_daemon_claims_of_another_namespace_domain_pod_or_node_are_refused(
    apiserver, cluster, short_dir, tmp_path
):
    """A daemon claim grants `/imexd` read-write, the fabric management device and the
    domain's identity: only the domain's own DaemonSet pod on this node gets it. A team-b
    claim naming team-a's domain, a claim held by another domain's daemon pod, one held by
    a pod on another node or by a pod nobody controls are refused, each saying why, with
    nothing written; the legitimate claim still gets the node's daemon-0 afterwards."""
    node = NodeEnv(short_dir / "n")
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kc")
    team_a = cluster.compute_domain("team-a")["metadata"]["uid"]
    other = cluster.compute_domain("other")["metadata"]["uid"]
    cluster.namespace("team-b")
    foreign = cluster.claim("stolen", "team-b", NODE, device="daemon-0", request="daemon",
                            parameters={"apiVersion": names.API_VERSION,
                                        "kind": names.KIND_DAEMON_CONFIG, "domainID": team_a})
    wrong_domain = cluster.reserve(cluster.daemon_claim("wrong-domain", team_a, reserved=False),
                                   cluster.daemon_pod("other-daemon", other))
    elsewhere = cluster.reserve(cluster.daemon_claim("elsewhere", team_a, reserved=False),
                                cluster.daemon_pod("far-daemon", team_a, node="node-9"))
    orphan = cluster.reserve(cluster.daemon_claim("orphan", team_a, reserved=False),
                             cluster.daemon_pod("orphan-daemon", team_a, owner={
                                 "apiVersion": "v1", "kind": "ReplicationController",
                                 "name": "x", "uid": "00000000-0000-0000-0000-000000000001",
                                 "controller": True}))
    agent = AgentProcess(node, kubeconfig)
    try:
        kubelet = Kubelet(node)
        state = [node.plugin_dir, node.root / "cdi"]
        before = [_tree(d) for d in state]
        bad = [foreign, wrong_domain, elsewhere, orphan]
        errors = {uid: c.error for uid, c in kubelet.prepare(bad).claims.items()}
        why = {c["metadata"]["name"]: errors[c["metadata"]["uid"]] for c in bad}
        assert "only in the driver namespace" in why["stolen"], why
        assert "controlled by DaemonSet" in why["wrong-domain"] or \
            "labeled for ComputeDomain" in why["wrong-domain"], why
        assert "runs on node 'node-9'" in why["elsewhere"], why
        assert "controlled by ReplicationController x" in why["orphan"], why
        assert all(w.startswith("permanent") or "refusing" in w for w in why.values()), why
        assert [_tree(d) for d in state] == before  # no domain dir, CDI spec or checkpoint entry
        good = cluster.daemon_claim("daemon", team_a)
        assert kubelet.prepare([good]).claims[good["metadata"]["uid"]].error == ""
    finally:
        agent.kill()
