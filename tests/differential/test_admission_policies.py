"""The driver's ValidatingAdmissionPolicies (packaging/deploy), on kube-apiserver and on the
emulator alike: node-scoped permissions of the kubelet plugin, domain-scoped ones of the
IMEX daemons, and the daemon DeviceClass kept to the driver namespace. Every attack of a
hostile tenant or a compromised node is refused, with the same answer from both servers,
and every write the driver makes is still allowed.

The identities are real ServiceAccount tokens: the plugin's bound to its Node (as a
systemd agent's is; a DaemonSet pod's carries the node too), a daemon's bound to its pod.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from eventually import eventually
from harness import Answer, Pair, Server

from api import names
from sim.cluster import manifests

Obj = dict[str, Any]
NS = "dra-driver-nvidia-gpu"
PLUGIN_SA = "dra-driver-nvidia-gpu-service-account-kubeletplugin"
DAEMON_SA = names.DAEMON_SERVICE_ACCOUNT
DOMAIN_A = "aaaaaaaa-0000-4000-8000-000000000001"
DOMAIN_B = "bbbbbbbb-0000-4000-8000-000000000002"
SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


def _token(server: Server, account: str, bound: Obj | None) -> str:
    spec: Obj = {"expirationSeconds": 3600}
    if bound is not None:
        md = bound["metadata"]
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": bound["kind"],
                                  "name": md["name"], "uid": md["uid"]}
    answer = server.send("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/{account}/token",
                         {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                          "spec": spec})
    assert answer.code == 201, answer.body
    return str(answer.body["status"]["token"])


class Identities:
    """Per server: tokens of a plugin on node-a, an unbound plugin, a daemon of domain A
    on node-a; and the objects they act on."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.tokens: dict[str, str] = {}
        server.policy_tokens = self.tokens  # type: ignore[attr-defined]  # later tests add some
        plain = server._make_user  # the other tests' users stay
        server._make_user = lambda name: (
            server.admin.with_token(self.tokens[name]) if name in self.tokens else plain(name))

    def setup(self) -> None:
        s = self.server
        objects = [o for o in manifests.load("driverManaged")
                   if o["kind"] not in ("Deployment", "DaemonSet", "CustomResourceDefinition")]
        manifests.apply(s.admin.api_client(), objects)
        for node in ("policy-node-a", "policy-node-b"):
            s.send("POST", "/api/v1/nodes", {"metadata": {"name": node, "labels": {"a": "1"}}})
        node_a = s.send("GET", "/api/v1/nodes/policy-node-a").body
        self.tokens["plugin-a"] = _token(s, PLUGIN_SA, node_a | {"kind": "Node"})
        self.tokens["plugin"] = _token(s, PLUGIN_SA, None)
        for domain in (DOMAIN_A, DOMAIN_B):
            s.send("POST", f"/apis/apps/v1/namespaces/{NS}/daemonsets", {
                "metadata": {"name": names.daemon_object_name(domain),
                             "labels": {names.LABEL_COMPUTE_DOMAIN: domain}},
                "spec": {"selector": {"matchLabels": {names.LABEL_COMPUTE_DOMAIN: domain}},
                         "template": {"metadata": {"labels": {
                             names.LABEL_COMPUTE_DOMAIN: domain}}, "spec": {
                             "containers": [{"name": "imex", "image": "example/imex:1"}]}}}})
            s.send("POST", f"/api/v1/namespaces/{NS}/pods", {
                "metadata": {"name": f"{names.daemon_object_name(domain)}-abcde",
                             "labels": {names.LABEL_COMPUTE_DOMAIN: domain}},
                "spec": {"nodeName": "policy-node-a", "serviceAccountName": DAEMON_SA,
                         "containers": [{"name": "imex", "image": "example/imex:1"}]}})
        pod_a = s.send("GET", f"/api/v1/namespaces/{NS}/pods/"
                              f"{names.daemon_object_name(DOMAIN_A)}-abcde").body
        self.tokens["daemon-a"] = _token(s, DAEMON_SA, pod_a | {"kind": "Pod"})

    def wait_enforced(self) -> None:
        """kube-apiserver loads new policies a few seconds after they are created, each on
        its own: wait until a dry-run attack on every policy is refused."""
        cliques = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{NS}/{names.PLURAL_CLIQUES}"
        event = {"metadata": {"name": "probe"}, "reason": "R", "message": "m",
                 "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "x",
                                    "namespace": NS}}
        probes = {
            "node": ("PATCH", "/api/v1/nodes/policy-node-b",
                     {"metadata": {"labels": {names.LABEL_GPU_CLIQUE: "probe"}}}, "plugin-a"),
            "slices": ("POST", "/apis/resource.k8s.io/v1/resourceslices", {
                "metadata": {"name": "probe"}, "spec": {
                    "driver": names.DRIVER_NAME, "nodeName": "policy-node-b", "devices": [],
                    "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}}},
                "plugin-a"),
            "plugin events": ("POST", f"/api/v1/namespaces/{NS}/events",
                              event | {"reportingInstance": "policy-node-b"}, "plugin-a"),
            "cliques": ("POST", cliques, _clique(DOMAIN_B, []), "daemon-a"),
            "pods": ("PATCH", f"/api/v1/namespaces/{NS}/pods/"
                     f"{names.daemon_object_name(DOMAIN_B)}-abcde",
                     {"metadata": {"labels": {"probe": "1"}}}, "daemon-a"),
            "daemon events": ("POST", f"/api/v1/namespaces/{NS}/events", event, "daemon-a"),
            "device class": ("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
                             {"metadata": {"name": "probe"}, "spec": {"devices": {"requests": [
                                 {"name": "r", "exactly": {
                                     "deviceClassName": names.DEVICE_CLASS_DAEMON}}]}}},
                             "admin"),
        }
        def enforced() -> bool:
            for name, (method, path, body, user) in list(probes.items()):
                answer = self.server.send(
                    method, path, body, user=user, query={"dryRun": "All"},
                    **({"content_type": MERGE} if method == "PATCH" else {}))
                if answer.code == 403:
                    del probes[name]
            return not probes

        with contextlib.suppress(AssertionError):  # the assertion below names what is left
            eventually(enforced, "every policy enforced", timeout=60, interval=0.3)
        assert not probes, f"{self.server.name}: policies not enforced: {sorted(probes)}"


@pytest.fixture(scope="module")
def policies(pair: Pair) -> Pair:
    for server in pair.servers():
        identities = Identities(server)
        identities.setup()
        identities.wait_enforced()
    return pair


def _code(v: Any) -> Any:
    return v["code"] if v["code"] < 300 else v


def _same(pair: Pair, case: str, method: str, path: str, body: Any = None, **kw: Any
          ) -> tuple[Answer, Answer]:
    return pair.same(f"policies: {case}", method, path, body, pick=_code, **kw)


def _assert_clean(pair: Pair) -> None:
    found = [d for d in pair.differences if d.case.startswith("policies:")]
    assert not found, "\n".join(map(str, found))


def test_the_kubelet_plugin_changes_only_its_own_node(policies: Pair) -> None:
    pair = policies
    label = lambda k, v: {"metadata": {"labels": {k: v}}}  # noqa: E731
    ok = _same(pair, "own node's domain label", "PATCH", "/api/v1/nodes/policy-node-a",
               label(names.LABEL_COMPUTE_DOMAIN, DOMAIN_A), user="plugin-a", content_type=SMP)
    assert [a.code for a in ok] == [200, 200]
    denied = [
        _same(pair, "another node's clique label", "PATCH", "/api/v1/nodes/policy-node-b",
              label(names.LABEL_GPU_CLIQUE, "forged"), user="plugin-a", content_type=SMP),
        _same(pair, "a control-plane label on its node", "PATCH",
              "/api/v1/nodes/policy-node-a",
              label("node-role.kubernetes.io/control-plane", ""), user="plugin-a",
              content_type=SMP),
        _same(pair, "a NoExecute taint on its node", "PATCH", "/api/v1/nodes/policy-node-a",
              {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}},
              user="plugin-a", content_type=SMP),
        _same(pair, "a token bound to no node", "PATCH", "/api/v1/nodes/policy-node-a",
              label(names.LABEL_GPU_CLIQUE, "x"), user="plugin", content_type=SMP),
    ]
    assert all(a.code == 403 for answers in denied for a in answers), denied
    _assert_clean(pair)


def test_the_kubelet_plugin_writes_only_its_own_slices_and_events(policies: Pair) -> None:
    pair = policies

    def slice_of(node: str) -> Obj:
        return {"metadata": {"name": f"policy-{node}"},
                "spec": {"driver": names.DRIVER_NAME, "nodeName": node,
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                         "devices": []}}

    own = _same(pair, "own slice", "POST", "/apis/resource.k8s.io/v1/resourceslices",
                slice_of("policy-node-a"), user="plugin-a")
    assert [a.code for a in own] == [201, 201]
    other = _same(pair, "another node's slice", "POST",
                  "/apis/resource.k8s.io/v1/resourceslices", slice_of("policy-node-b"),
                  user="plugin-a")
    assert [a.code for a in other] == [403, 403]
    event = {"metadata": {"name": "w"}, "reason": "ComputeDomainChannelPrepared",
             "message": "m", "type": "Normal", "reportingComponent": "c",
             "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "w",
                                "namespace": "default"}}
    mine = _same(pair, "an Event as its node", "POST", "/api/v1/namespaces/default/events",
                 event | {"reportingInstance": "policy-node-a"}, user="plugin-a")
    assert [a.code for a in mine] == [201, 201]
    spoofed = _same(pair, "an Event as another node", "POST",
                    "/api/v1/namespaces/default/events",
                    event | {"metadata": {"name": "w2"}, "reportingInstance": "policy-node-b"},
                    user="plugin-a")
    assert [a.code for a in spoofed] == [403, 403]
    _assert_clean(pair)


def _clique(domain: str, entries: list[Obj]) -> Obj:
    return {"apiVersion": names.API_VERSION, "kind": "ComputeDomainClique",
            "metadata": {"name": f"{domain}.c.1",
                         "labels": {names.LABEL_COMPUTE_DOMAIN: domain,
                                    names.LABEL_CLIQUE_ID: "c.1"}},
            "daemons": entries}


def _entry(node: str, index: int, status: str = "NotReady") -> Obj:
    return {"nodeName": node, "ipAddress": f"10.0.0.{index + 1}", "cliqueID": "c.1",
            "index": index, "status": status}


def test_a_daemon_writes_only_its_own_entry_of_its_own_domain(policies: Pair) -> None:
    pair = policies
    path = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{NS}/{names.PLURAL_CLIQUES}"
    created = _same(pair, "its domain's clique with its entry", "POST", path,
                    _clique(DOMAIN_A, [_entry("policy-node-a", 0)]), user="daemon-a")
    assert [a.code for a in created] == [201, 201]
    other_domain = _same(pair, "another domain's clique", "POST", path,
                         _clique(DOMAIN_B, [_entry("policy-node-a", 0)]), user="daemon-a")
    assert [a.code for a in other_domain] == [403, 403]
    # The controller prunes and other daemons join: entries of other nodes come from them.
    for server in pair.servers():
        current = server.send("GET", f"{path}/{DOMAIN_A}.c.1").body
        current["daemons"].append(_entry("policy-node-b", 1))
        assert server.send("PUT", f"{path}/{DOMAIN_A}.c.1", current).code == 200
    answers = []
    for server in pair.servers():
        current = server.send("GET", f"{path}/{DOMAIN_A}.c.1").body
        current["daemons"][1]["status"] = "Ready"  # a forged Ready for node-b
        answers.append(server.send("PUT", f"{path}/{DOMAIN_A}.c.1", current, user="daemon-a"))
    pair.compare("policies: another node's entry", tuple(answers), pick=_code)  # type: ignore[arg-type]
    assert [a.code for a in answers] == [403, 403]
    answers = []
    for server in pair.servers():
        current = server.send("GET", f"{path}/{DOMAIN_A}.c.1").body
        current["daemons"][0]["status"] = "Ready"  # its own readiness
        answers.append(server.send("PUT", f"{path}/{DOMAIN_A}.c.1", current, user="daemon-a"))
    pair.compare("policies: its own entry", tuple(answers), pick=_code)  # type: ignore[arg-type]
    assert [a.code for a in answers] == [200, 200]
    _assert_clean(pair)


def test_a_daemon_changes_only_its_own_pods_labels(policies: Pair) -> None:
    pair = policies
    own = f"/api/v1/namespaces/{NS}/pods/{names.daemon_object_name(DOMAIN_A)}-abcde"
    other = f"/api/v1/namespaces/{NS}/pods/{names.daemon_object_name(DOMAIN_B)}-abcde"
    label = {"metadata": {"labels": {names.LABEL_CLIQUE_ID: "c.1"}}}
    ok = _same(pair, "its own pod's label", "PATCH", own, label, user="daemon-a",
               content_type=MERGE)
    assert [a.code for a in ok] == [200, 200]
    image = {"spec": {"containers": [{"name": "imex", "image": "evil.example/backdoor:1"}]}}
    for case, path, body in (("its own pod's image", own, image),
                             ("another pod's label", other, label),
                             ("another pod's image", other, image)):
        denied = _same(pair, case, "PATCH", path, body, user="daemon-a", content_type=SMP)
        assert [a.code for a in denied] == [403, 403], (case, denied)
    event = {"metadata": {"name": "d"}, "reason": "IMEXDaemonExited", "message": "m",
             "type": "Warning", "involvedObject": {"apiVersion": "v1", "kind": "Pod",
                                                   "namespace": NS, "name": "x"}}
    for case, name, code in (("an Event about its pod", f"{names.daemon_object_name(DOMAIN_A)}"
                              "-abcde", 201), ("an Event about another pod", "other", 403)):
        body = event | {"metadata": {"name": f"d-{code}"},
                        "involvedObject": event["involvedObject"] | {"name": name}}
        answers = _same(pair, case, "POST", f"/api/v1/namespaces/{NS}/events", body,
                        user="daemon-a")
        assert [a.code for a in answers] == [code, code], (case, answers)
    _assert_clean(pair)


def test_the_daemon_device_class_stays_in_the_driver_namespace(policies: Pair) -> None:
    pair = policies
    pair.same("policies: namespace", "POST", "/api/v1/namespaces",
              {"metadata": {"name": "policy-team-b"}}, pick=lambda v: v["code"])

    def claim(klass: str) -> Obj:
        return {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [
            {"name": "r", "exactly": {"deviceClassName": klass}}]}}}

    stolen = _same(pair, "a tenant's daemon claim", "POST",
                   "/apis/resource.k8s.io/v1/namespaces/policy-team-b/resourceclaims",
                   claim(names.DEVICE_CLASS_DAEMON))
    assert [a.code for a in stolen] == [403, 403]
    template = {"metadata": {"name": "t"},
                "spec": {"spec": claim(names.DEVICE_CLASS_DAEMON)["spec"]}}
    stolen = _same(pair, "a tenant's daemon claim template", "POST",
                   "/apis/resource.k8s.io/v1/namespaces/policy-team-b/resourceclaimtemplates",
                   template)
    assert [a.code for a in stolen] == [403, 403]
    channel = _same(pair, "a tenant's channel claim", "POST",
                    "/apis/resource.k8s.io/v1/namespaces/policy-team-b/resourceclaims",
                    claim(names.DEVICE_CLASS_DEFAULT_CHANNEL) | {"metadata": {"name": "ok"}})
    assert [a.code for a in channel] == [201, 201]
    own = _same(pair, "the driver's daemon claim", "POST",
                f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims",
                claim(names.DEVICE_CLASS_DAEMON))
    assert [a.code for a in own] == [201, 201]
    _assert_clean(pair)


def test_a_legacy_daemon_writes_only_its_own_entry_of_its_own_domains_status(
    policies: Pair,
) -> None:
    """ComputeDomainCliques=false: the daemons keep their entries in status.nodes."""
    pair = policies
    path = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/default/{names.PLURAL_COMPUTE_DOMAINS}"
    for server in pair.servers():
        for name in ("legacy-own", "legacy-other"):
            answer = server.send("POST", path, {
                "apiVersion": names.API_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
                "metadata": {"name": name}, "spec": {
                    "numNodes": 2, "channel": {"resourceClaimTemplate": {"name": name}}}})
            assert answer.code == 201, answer.body
        own = server.send("GET", f"{path}/legacy-own").body
        pod = f"{names.daemon_object_name(own['metadata']['uid'])}-abcde"
        server.send("POST", f"/api/v1/namespaces/{NS}/pods", {
            "metadata": {"name": pod}, "spec": {
                "nodeName": "policy-node-a", "serviceAccountName": DAEMON_SA,
                "containers": [{"name": "imex", "image": "example/imex:1"}]}})
        bound = server.send("GET", f"/api/v1/namespaces/{NS}/pods/{pod}").body
        tokens = server.policy_tokens  # type: ignore[attr-defined]
        tokens["legacy-daemon"] = _token(server, DAEMON_SA, bound | {"kind": "Pod"})
        # Another node's daemon already wrote its entry.
        own["status"] = {"status": "NotReady", "nodes": [
            {"name": "policy-node-b", "ipAddress": "10.0.0.2", "cliqueID": "c.1", "index": 1,
             "status": "NotReady"}]}
        assert server.send("PUT", f"{path}/legacy-own/status", own).code == 200

    def write(case: str, name: str, change: Any) -> tuple[Answer, Answer]:
        answers = []
        for server in pair.servers():
            current = server.send("GET", f"{path}/{name}").body
            change(current.setdefault("status", {}).setdefault("nodes", []))
            answers.append(server.send("PUT", f"{path}/{name}/status", current,
                                       user="legacy-daemon"))
        pair.compare(f"policies: legacy {case}", tuple(answers), pick=_code)  # type: ignore[arg-type]
        return answers[0], answers[1]

    mine = write("its own entry", "legacy-own", lambda nodes: nodes.append(
        {"name": "policy-node-a", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0,
         "status": "NotReady"}))
    assert [a.code for a in mine] == [200, 200]
    forged = write("another node's entry", "legacy-own",
                   lambda nodes: nodes[0].update(status="Ready"))
    assert [a.code for a in forged] == [403, 403]
    other = write("another domain's status", "legacy-other", lambda nodes: nodes.append(
        {"name": "policy-node-a", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0}))
    assert [a.code for a in other] == [403, 403]
    _assert_clean(pair)


# --- agent placement: the kubelet plugin runs nvidia-imex and writes its node's entries --

DOMAIN_C = "cccccccc-0000-4000-8000-000000000003"
CD_PATH = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/default/{names.PLURAL_COMPUTE_DOMAINS}"
CLIQUES = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{NS}/{names.PLURAL_CLIQUES}"
_PLURALS = {"Role": "roles", "ClusterRole": "clusterroles",
            "ValidatingAdmissionPolicy": "validatingadmissionpolicies"}


def _path(obj: Obj) -> str:
    group, _, version = obj["apiVersion"].rpartition("/")
    md = obj["metadata"]
    where = f"/namespaces/{md['namespace']}" if md.get("namespace") else ""
    return f"/apis/{group}/{version}{where}/{_PLURALS[obj['kind']]}/{md['name']}"


def _node_event(node: str, name: str) -> Obj:
    return {"metadata": {"name": name}, "reason": "IMEXDaemonExited", "message": "m",
            "type": "Warning", "reportingComponent": "c", "reportingInstance": "policy-node-a",
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node}}


@pytest.fixture(scope="module")
def agent_policies(policies: Pair) -> Pair:
    """Both servers switched to the agent-placement manifests: the plugin's wider Roles,
    its Events policy that admits Events on its own Node, its clique and status policies
    (the daemon pieces stay; no daemon token is used below)."""
    def key(o: Obj) -> tuple[str, str, str]:
        return o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]

    pod = {key(o): o for o in manifests.load("driverManaged")}
    agent = [o for o in manifests.load("driverManaged", placement="agent")
             if o["kind"] not in ("Deployment", "DaemonSet", "CustomResourceDefinition")
             and pod.get(key(o)) != o]
    for server in policies.servers():
        manifests.apply(server.admin.api_client(), [o for o in agent if key(o) not in pod])
        for obj in (o for o in agent if key(o) in pod):
            live = server.send("GET", _path(obj)).body
            md = obj["metadata"] | {"resourceVersion": live["metadata"]["resourceVersion"]}
            answer = server.send("PUT", _path(obj), obj | {"metadata": md})
            assert answer.code == 200, answer.body
        # A legacy-layout domain whose status already holds node-b's entry.
        answer = server.send("POST", CD_PATH, {
            "apiVersion": names.API_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": "agent-legacy"}, "spec": {
                "numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "agent-legacy"}}}})
        assert answer.code == 201, answer.body
        cd = answer.body | {"status": {"status": "NotReady", "nodes": [
            {"name": "policy-node-b", "ipAddress": "10.0.0.2", "cliqueID": "c.1", "index": 1,
             "status": "NotReady"}]}}
        assert server.send("PUT", f"{CD_PATH}/agent-legacy/status", cd).code == 200
        _wait_agent_enforced(server)
    return policies


def _wait_agent_enforced(server: Server) -> None:
    """Until the replaced Roles and policies and the new policies answer as shipped (each
    is loaded on its own a few seconds after it changed): dry-runs allowed by the new RBAC
    and Events policy, refused by the new clique and status policies."""
    def forged_status() -> Obj:
        cd = server.send("GET", f"{CD_PATH}/agent-legacy").body
        cd["status"]["nodes"][0]["status"] = "Ready"
        return cd

    probes: dict[str, tuple[str, str, Any, str | int]] = {
        "clique RBAC": ("POST", CLIQUES, _clique(DOMAIN_C, [_entry("policy-node-a", 0)]), 201),
        "clique policy": ("POST", CLIQUES, _clique(DOMAIN_C, [_entry("policy-node-b", 0)]),
                          "compute-domain-kubelet-plugin-cliques"),
        "node events": ("POST", "/api/v1/namespaces/default/events",
                        _node_event("policy-node-a", "probe"), 201),
        "status policy": ("PUT", f"{CD_PATH}/agent-legacy/status", None,
                          "compute-domain-kubelet-plugin-status"),
    }

    def enforced() -> bool:
        for name, (method, path, body, want) in list(probes.items()):
            answer = server.send(method, path, body if body is not None else forged_status(),
                                 user="plugin-a", query={"dryRun": "All"})
            if answer.code == want or (answer.code == 403 and isinstance(want, str)
                                       and want in str(answer.body)):
                del probes[name]
        return not probes

    with contextlib.suppress(AssertionError):  # the assertion below names what is left
        eventually(enforced, "every agent-placement policy enforced", timeout=60, interval=0.3)
    assert not probes, f"{server.name}: not as shipped yet: {sorted(probes)}"


def test_agent_placement_plugin_writes_only_its_own_nodes_clique_entry(
    agent_policies: Pair,
) -> None:
    pair = agent_policies
    created = _same(pair, "agent: its node's entry in a new clique", "POST", CLIQUES,
                    _clique(DOMAIN_C, [_entry("policy-node-a", 0)]), user="plugin-a")
    assert [a.code for a in created] == [201, 201]
    misnamed = _clique(DOMAIN_C, [_entry("policy-node-a", 0)])
    misnamed["metadata"]["name"] = f"{DOMAIN_B}.c.1"
    foreign = _same(pair, "agent: a clique named for another domain", "POST", CLIQUES,
                    misnamed, user="plugin-a")
    assert [a.code for a in foreign] == [403, 403]
    # Another node's agent joins (written here as the admin).
    for server in pair.servers():
        current = server.send("GET", f"{CLIQUES}/{DOMAIN_C}.c.1").body
        current["daemons"].append(_entry("policy-node-b", 1))
        assert server.send("PUT", f"{CLIQUES}/{DOMAIN_C}.c.1", current).code == 200

    def write(case: str, change: Any, user: str = "plugin-a") -> list[Answer]:
        answers = []
        for server in pair.servers():
            current = server.send("GET", f"{CLIQUES}/{DOMAIN_C}.c.1").body
            change(current)
            answers.append(server.send("PUT", f"{CLIQUES}/{DOMAIN_C}.c.1", current, user=user))
        pair.compare(f"policies: agent: {case}", tuple(answers), pick=_code)  # type: ignore[arg-type]
        return answers

    forged = write("another node's entry",
                   lambda c: c["daemons"][1].update(status="Ready"))
    assert [a.code for a in forged] == [403, 403]
    dropped = write("dropping another node's entry", lambda c: c["daemons"].pop(1))
    assert [a.code for a in dropped] == [403, 403]
    relabelled = write("a relabel", lambda c: c["metadata"]["labels"].update(x="1"))
    assert [a.code for a in relabelled] == [403, 403]
    unbound = write("a token bound to no node",
                    lambda c: c["daemons"][0].update(status="Ready"), user="plugin")
    assert [a.code for a in unbound] == [403, 403]
    mine = write("its own entry", lambda c: c["daemons"][0].update(status="Ready"))
    assert [a.code for a in mine] == [200, 200]
    _assert_clean(pair)


def test_agent_placement_plugin_writes_events_only_about_its_own_node(
    agent_policies: Pair,
) -> None:
    pair = agent_policies
    events = "/api/v1/namespaces/default/events"
    own = _same(pair, "agent: an Event on its Node", "POST", events,
                _node_event("policy-node-a", "agent-own"), user="plugin-a")
    assert [a.code for a in own] == [201, 201]
    other = _same(pair, "agent: an Event on another Node", "POST", events,
                  _node_event("policy-node-b", "agent-other"), user="plugin-a")
    assert [a.code for a in other] == [403, 403]
    # kube-apiserver's own Event validation already keeps a Node's Events in default.
    elsewhere = _same(pair, "agent: a Node Event outside namespace default", "POST",
                      f"/api/v1/namespaces/{NS}/events",
                      _node_event("policy-node-a", "agent-ns"), user="plugin-a")
    assert [a.code for a in elsewhere] == [422, 422]
    _assert_clean(pair)


def test_agent_placement_legacy_plugin_writes_only_its_own_status_entry(
    agent_policies: Pair,
) -> None:
    """ComputeDomainCliques=false: the agents keep their entries in status.nodes."""
    pair = agent_policies

    def write(case: str, change: Any) -> list[Answer]:
        answers = []
        for server in pair.servers():
            current = server.send("GET", f"{CD_PATH}/agent-legacy").body
            change(current["status"]["nodes"])
            answers.append(server.send("PUT", f"{CD_PATH}/agent-legacy/status", current,
                                       user="plugin-a"))
        pair.compare(f"policies: agent: legacy {case}", tuple(answers), pick=_code)  # type: ignore[arg-type]
        return answers

    mine = write("its own entry", lambda nodes: nodes.append(
        {"name": "policy-node-a", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0,
         "status": "NotReady"}))
    assert [a.code for a in mine] == [200, 200]
    forged = write("another node's entry", lambda nodes: nodes[0].update(status="Ready"))
    assert [a.code for a in forged] == [403, 403]
    _assert_clean(pair)
