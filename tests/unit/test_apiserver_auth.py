"""Token authentication and RBAC as kube-apiserver does them, on tables an admin would know.

The emulator enforces these so that a too-narrow shipped ClusterRole fails a test the way it
would fail on a cluster, with the same 403 text, rather than only in production.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.apiserver.authn import ADMIN, ANONYMOUS, TokenAuthenticator, UserInfo
from sim.apiserver.errors import ApiError
from sim.apiserver.rbac import (
    Decision,
    RequestAttributes,
    aggregated_cluster_role_rules,
    authorize,
    default_cluster_roles_and_bindings,
    forbidden,
    rule_allows,
    verb_for,
)

RBAC = "rbac.authorization.k8s.io"
CD_GROUP = "resource.nvidia.com"
DRV_NS = "drv"
CONTROLLER = "system:serviceaccount:drv:compute-domain-controller"
AUTHED = "system:authenticated"


def rule(groups: list[str], resources: list[str], verbs: list[str], **extra: Any) -> dict:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs, **extra}


def cluster_role(name: str, rules: list[dict], **extra: Any) -> dict:
    meta = {"name": name, **extra.pop("metadata", {})}
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": meta, "rules": rules}


def role(namespace: str, name: str, rules: list[dict]) -> dict:
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": meta, "rules": rules}


def binding(
    name: str, ref_kind: str, ref_name: str, subjects: list[dict], namespace: str = ""
) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": ref_kind, "name": ref_name},
        "subjects": subjects,
    }


def sa(name: str, namespace: str | None = DRV_NS) -> dict:
    return {
        "kind": "ServiceAccount",
        "name": name,
        **({"namespace": namespace} if namespace else {}),
    }


def sa_user(namespace: str, name: str) -> UserInfo:
    return UserInfo(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHED),
    )


class Policy:
    """The four RBAC collections as a server stores them."""

    def __init__(self, *objects: dict) -> None:
        self.objects = list(objects)

    def of(self, kind: str) -> list[dict]:
        return [o for o in self.objects if o["kind"] == kind]

    def decide(self, attrs: RequestAttributes) -> Decision:
        return authorize(
            attrs,
            roles=self.of("Role"),
            cluster_roles=self.of("ClusterRole"),
            role_bindings=self.of("RoleBinding"),
            cluster_role_bindings=self.of("ClusterRoleBinding"),
        )

    def allows(self, user: UserInfo, verb: str, group: str, resource: str, **kw: Any) -> bool:
        return self.decide(RequestAttributes(user, verb, group, resource, **kw)).allowed


# The reference driver's controller: ClusterRole + ClusterRoleBinding, and a Role in its own
# namespace for the daemons it runs there.
CONTROLLER_POLICY = Policy(
    cluster_role(
        "compute-domain-controller",
        [
            rule([CD_GROUP], ["computedomains"], ["get", "list", "watch", "update"]),
            rule([CD_GROUP], ["computedomains/status"], ["update"]),
            rule(
                ["resource.k8s.io"],
                ["resourceclaimtemplates"],
                ["get", "list", "watch", "create", "update", "delete"],
            ),
            rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update"]),
            rule([""], ["nodes"], ["get", "list", "watch", "update"]),
            rule([""], ["pods"], ["get", "list", "watch"]),
        ],
    ),
    binding(
        "compute-domain-controller",
        "ClusterRole",
        "compute-domain-controller",
        [sa("compute-domain-controller")],
    ),
    role(
        DRV_NS,
        "compute-domain-controller",
        [
            rule(
                ["apps"],
                ["daemonsets"],
                ["get", "list", "watch", "create", "update", "patch", "delete"],
            ),
            rule([CD_GROUP], ["computedomaincliques"], ["get", "list", "watch", "update"]),
        ],
    ),
    binding(
        "compute-domain-controller",
        "Role",
        "compute-domain-controller",
        [sa("compute-domain-controller")],
        namespace=DRV_NS,
    ),
)

# verb, api group, resource, subresource, namespace, name, allowed
CONTROLLER_TABLE = [
    ("get", CD_GROUP, "computedomains", "", "ns1", "cd1", True),
    ("list", CD_GROUP, "computedomains", "", "", "", True),
    ("watch", CD_GROUP, "computedomains", "", "", "", True),
    ("update", CD_GROUP, "computedomains", "", "ns1", "cd1", True),
    ("patch", CD_GROUP, "computedomains", "", "ns1", "cd1", False),
    ("delete", CD_GROUP, "computedomains", "", "ns1", "cd1", False),
    ("update", CD_GROUP, "computedomains", "status", "ns1", "cd1", True),
    ("patch", CD_GROUP, "computedomains", "status", "ns1", "cd1", False),
    ("update", CD_GROUP, "computedomains", "finalizers", "ns1", "cd1", False),
    ("get", "", "computedomains", "", "ns1", "cd1", False),  # wrong group
    ("create", "resource.k8s.io", "resourceclaimtemplates", "", "ns1", "", True),
    ("delete", "resource.k8s.io", "resourceclaimtemplates", "", "ns1", "t1", True),
    ("deletecollection", "resource.k8s.io", "resourceclaimtemplates", "", "ns1", "", False),
    ("patch", "resource.k8s.io", "resourceclaimtemplates", "", "ns1", "t1", False),
    ("create", "resource.k8s.io", "resourceclaims", "", "ns1", "", False),
    ("get", "coordination.k8s.io", "leases", "", DRV_NS, "leader", True),
    ("create", "coordination.k8s.io", "leases", "", DRV_NS, "", True),
    ("update", "coordination.k8s.io", "leases", "", DRV_NS, "leader", True),
    ("delete", "coordination.k8s.io", "leases", "", DRV_NS, "leader", False),
    ("list", "coordination.k8s.io", "leases", "", DRV_NS, "", False),
    ("get", "", "nodes", "", "", "n1", True),
    ("list", "", "nodes", "", "", "", True),
    ("update", "", "nodes", "", "", "n1", True),
    ("delete", "", "nodes", "", "", "n1", False),
    ("patch", "", "nodes", "status", "", "n1", False),
    ("list", "", "pods", "", "", "", True),
    ("get", "", "pods", "", "ns1", "p1", True),
    ("update", "", "pods", "status", "ns1", "p1", False),  # `pods` does not grant pods/status
    ("delete", "", "pods", "", "ns1", "p1", False),
    ("create", "apps", "daemonsets", "", DRV_NS, "", True),
    ("patch", "apps", "daemonsets", "", DRV_NS, "d1", True),
    ("delete", "apps", "daemonsets", "", DRV_NS, "d1", True),
    ("list", "apps", "daemonsets", "", DRV_NS, "", True),
    ("create", "apps", "daemonsets", "", "ns1", "", False),  # only in its own namespace
    ("list", "apps", "daemonsets", "", "", "", False),  # not across all namespaces
    ("update", "apps", "daemonsets", "status", DRV_NS, "d1", False),
    ("update", CD_GROUP, "computedomaincliques", "", DRV_NS, "c1", True),
    ("list", CD_GROUP, "computedomaincliques", "", DRV_NS, "", True),
    ("create", CD_GROUP, "computedomaincliques", "", DRV_NS, "", False),
    ("get", CD_GROUP, "computedomaincliques", "", "ns1", "c1", False),
]


@pytest.mark.parametrize(
    ("verb", "group", "resource", "sub", "ns", "name", "allowed"), CONTROLLER_TABLE
)
def test_controller_permissions(
    verb: str, group: str, resource: str, sub: str, ns: str, name: str, allowed: bool
) -> None:
    user = sa_user(DRV_NS, "compute-domain-controller")
    attrs = RequestAttributes(user, verb, group, resource, sub, ns, name)
    assert CONTROLLER_POLICY.decide(attrs).allowed is allowed


def test_other_service_accounts_get_nothing() -> None:
    for user in (sa_user("other", "compute-domain-controller"), sa_user(DRV_NS, "agent")):
        assert not CONTROLLER_POLICY.allows(user, "list", CD_GROUP, "computedomains")
        assert not CONTROLLER_POLICY.allows(user, "create", "apps", "daemonsets", namespace=DRV_NS)


def test_allow_reasons_name_the_binding_like_the_real_authorizer() -> None:
    user = sa_user(DRV_NS, "compute-domain-controller")
    by_crb = CONTROLLER_POLICY.decide(RequestAttributes(user, "list", "", "nodes"))
    assert by_crb == Decision(
        True,
        'RBAC: allowed by ClusterRoleBinding "compute-domain-controller" of ClusterRole '
        '"compute-domain-controller" to ServiceAccount "compute-domain-controller/drv"',
    )
    by_rb = CONTROLLER_POLICY.decide(
        RequestAttributes(user, "create", "apps", "daemonsets", namespace=DRV_NS)
    )
    assert by_rb == Decision(
        True,
        'RBAC: allowed by RoleBinding "compute-domain-controller/drv" of Role '
        '"compute-domain-controller" to ServiceAccount "compute-domain-controller/drv"',
    )
    denied = CONTROLLER_POLICY.decide(RequestAttributes(user, "delete", "", "nodes", name="n"))
    assert denied == Decision(False, "")


def test_resource_names_restrict_by_name_and_never_grant_unnamed_verbs() -> None:
    policy = Policy(
        role(
            DRV_NS,
            "cfg",
            [
                rule(
                    [""],
                    ["configmaps"],
                    ["get", "list", "watch", "create", "update", "delete"],
                    resourceNames=["cd-config"],
                )
            ],
        ),
        binding("cfg", "Role", "cfg", [sa("agent")], namespace=DRV_NS),
    )
    user = sa_user(DRV_NS, "agent")

    def allows(verb: str, name: str) -> bool:
        return policy.allows(user, verb, "", "configmaps", namespace=DRV_NS, name=name)

    assert allows("get", "cd-config")
    assert allows("update", "cd-config")
    assert allows("delete", "cd-config")
    assert not allows("get", "other")
    for verb in ("list", "watch", "create"):
        assert not allows(verb, "")
    # A list/watch the server narrowed to one name (fieldSelector metadata.name=) is allowed.
    assert allows("watch", "cd-config")


def test_group_subjects_match_membership() -> None:
    policy = Policy(
        cluster_role("cd-reader", [rule([CD_GROUP], ["computedomains"], ["get", "list"])]),
        binding(
            "cd-readers",
            "ClusterRole",
            "cd-reader",
            [{"kind": "Group", "apiGroup": RBAC, "name": "system:serviceaccounts:drv"}],
        ),
        binding(
            "alice",
            "ClusterRole",
            "cd-reader",
            [{"kind": "User", "apiGroup": RBAC, "name": "alice"}],
        ),
    )
    assert policy.allows(sa_user(DRV_NS, "anything"), "list", CD_GROUP, "computedomains")
    assert not policy.allows(sa_user("other", "anything"), "list", CD_GROUP, "computedomains")
    assert policy.allows(UserInfo("alice", (AUTHED,)), "list", CD_GROUP, "computedomains")
    assert not policy.allows(UserInfo("bob", (AUTHED,)), "list", CD_GROUP, "computedomains")
    # A group named like the user does not match a User subject, nor vice versa.
    assert not policy.allows(UserInfo("x", ("alice",)), "list", CD_GROUP, "computedomains")


def test_service_account_subject_namespace_defaults_only_in_role_bindings() -> None:
    reader = cluster_role("pod-reader", [rule([""], ["pods"], ["get"])])
    in_rb = Policy(
        reader,
        binding("rb", "ClusterRole", "pod-reader", [sa("agent", None)], namespace=DRV_NS),
    )
    user = sa_user(DRV_NS, "agent")
    assert in_rb.allows(user, "get", "", "pods", namespace=DRV_NS, name="p")
    # ...and a RoleBinding to a ClusterRole grants only in the binding's namespace.
    assert not in_rb.allows(user, "get", "", "pods", namespace="ns1", name="p")
    in_crb = Policy(reader, binding("crb", "ClusterRole", "pod-reader", [sa("agent", None)]))
    assert not in_crb.allows(user, "get", "", "pods", namespace=DRV_NS, name="p")


def test_role_bindings_never_grant_cluster_scoped_or_cross_namespace_requests() -> None:
    policy = Policy(
        cluster_role(
            "all", [rule(["*"], ["*"], ["*"]), {"nonResourceURLs": ["*"], "verbs": ["*"]}]
        ),
        binding("all", "ClusterRole", "all", [sa("agent")], namespace=DRV_NS),
    )
    user = sa_user(DRV_NS, "agent")
    assert policy.allows(user, "delete", "apps", "daemonsets", namespace=DRV_NS, name="d")
    assert not policy.allows(user, "get", "", "nodes", name="n1")
    assert not policy.allows(user, "list", "apps", "daemonsets")
    assert not policy.decide(RequestAttributes.for_path(user, "/apis")).allowed


def test_aggregated_cluster_roles_collect_matching_roles_rules() -> None:
    label = "rbac.example.com/aggregate-to-cd-view"
    cd_rule = rule([CD_GROUP], ["computedomains"], ["get", "list", "watch"])
    clique_rule = rule([CD_GROUP], ["computedomaincliques"], ["get"])
    policy = Policy(
        {
            **cluster_role("cd-view", [rule([""], ["secrets"], ["get"])]),  # replaced
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
        },
        cluster_role("cd-part", [cd_rule], metadata={"labels": {label: "true"}}),
        cluster_role("clique-part", [clique_rule, cd_rule], metadata={"labels": {label: "true"}}),
        cluster_role("unrelated", [rule([""], ["nodes"], ["get"])]),
        cluster_role("off", [rule([""], ["pods"], ["get"])], metadata={"labels": {label: "no"}}),
        binding("viewers", "ClusterRole", "cd-view", [{"kind": "User", "name": "alice"}]),
    )
    alice = UserInfo("alice", (AUTHED,))
    assert policy.allows(alice, "watch", CD_GROUP, "computedomains")
    assert policy.allows(alice, "get", CD_GROUP, "computedomaincliques", namespace="n", name="c")
    assert not policy.allows(alice, "get", "", "nodes", name="n1")
    assert not policy.allows(alice, "get", "", "pods", namespace="n", name="p")
    assert not policy.allows(alice, "get", "", "secrets", namespace="n", name="s")
    assert aggregated_cluster_role_rules("cd-view", policy.of("ClusterRole")) == [
        cd_rule,
        clique_rule,
    ]


def test_aggregation_follows_nested_roles_and_match_expressions() -> None:
    top = {
        **cluster_role("top", []),
        "aggregationRule": {
            "clusterRoleSelectors": [
                {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["mid"]}]}
            ]
        },
    }
    mid = {
        **cluster_role("mid", [], metadata={"labels": {"tier": "mid"}}),
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"tier": "leaf"}}]},
    }
    leaf_rule = rule([""], ["pods"], ["get"])
    leaf = cluster_role("leaf", [leaf_rule], metadata={"labels": {"tier": "leaf"}})
    assert aggregated_cluster_role_rules("top", [top, mid, leaf]) == [leaf_rule]


def test_wildcards() -> None:
    assert rule_allows(
        RequestAttributes(ANONYMOUS, "patch", "x.io", "things", "status"), rule(["*"], ["*"], ["*"])
    )
    status_everywhere = rule(["*"], ["*/status"], ["update"])
    attrs = RequestAttributes(ANONYMOUS, "update", CD_GROUP, "computedomains", "status")
    assert rule_allows(attrs, status_everywhere)
    assert not rule_allows(
        RequestAttributes(ANONYMOUS, "update", CD_GROUP, "computedomains"), status_everywhere
    )
    assert not rule_allows(
        RequestAttributes(ANONYMOUS, "update", CD_GROUP, "computedomains", "scale"),
        status_everywhere,
    )
    assert rule_allows(attrs, rule([CD_GROUP], ["computedomains/status"], ["*"]))
    assert not rule_allows(attrs, rule([CD_GROUP], ["computedomains"], ["*"]))
    healthz = {"nonResourceURLs": ["/healthz*"], "verbs": ["get"]}
    for path, ok in [("/healthz", True), ("/healthz/etcd", True), ("/livez", False)]:
        assert rule_allows(RequestAttributes.for_path(ANONYMOUS, path), healthz) is ok
    # Resource rules never grant paths, and URL rules never grant resources.
    assert not rule_allows(RequestAttributes.for_path(ANONYMOUS, "/api"), rule(["*"], ["*"], ["*"]))
    assert not rule_allows(RequestAttributes(ANONYMOUS, "get", "", "pods"), healthz)


@given(
    verb=st.sampled_from(["get", "list", "watch", "create", "update", "patch", "delete"]),
    group=st.sampled_from(["", "apps", CD_GROUP]),
    resource=st.from_regex(r"[a-z]{1,12}", fullmatch=True),
    sub=st.sampled_from(["status", "scale", "finalizers"]),
)
def test_plain_resource_rule_never_grants_a_subresource(
    verb: str, group: str, resource: str, sub: str
) -> None:
    plain = rule([group], [resource], ["*"])
    assert rule_allows(RequestAttributes(ANONYMOUS, verb, group, resource, "", "ns", "n"), plain)
    assert not rule_allows(
        RequestAttributes(ANONYMOUS, verb, group, resource, sub, "ns", "n"), plain
    )


def test_system_masters_is_allowed_without_any_binding() -> None:
    empty = Policy()
    assert empty.allows(ADMIN, "deletecollection", "", "nodes")
    assert empty.decide(RequestAttributes.for_path(ADMIN, "/metrics")).allowed
    assert not empty.allows(UserInfo("kubernetes-admin", (AUTHED,)), "get", "", "nodes", name="n")


def test_missing_roles_are_skipped_and_reported() -> None:
    policy = Policy(
        binding("dangling", "ClusterRole", "gone", [{"kind": "User", "name": "alice"}]),
        binding("dangling", "Role", "gone", [{"kind": "User", "name": "alice"}], namespace="n"),
        cluster_role("ok", [rule([""], ["pods"], ["list"])]),
        binding("ok", "ClusterRole", "ok", [{"kind": "User", "name": "alice"}]),
    )
    alice = UserInfo("alice", (AUTHED,))
    assert policy.allows(alice, "list", "", "pods", namespace="n")
    denied = policy.decide(RequestAttributes(alice, "get", "", "pods", namespace="n", name="p"))
    assert denied == Decision(
        False,
        f'RBAC: [clusterrole.{RBAC} "gone" not found, role.{RBAC} "gone" not found]',
    )
    one = policy.decide(RequestAttributes(alice, "get", "", "nodes", name="x"))
    assert one.reason == f'RBAC: clusterrole.{RBAC} "gone" not found'
    err = forbidden(RequestAttributes(alice, "get", "", "nodes", name="x"), one.reason)
    assert err.message == (
        'nodes "x" is forbidden: User "alice" cannot get resource "nodes" in API group "" '
        f'at the cluster scope: RBAC: clusterrole.{RBAC} "gone" not found'
    )


# ---------------------------------------------------------------------------------------
# Discovery defaults


DEFAULTS = Policy(*default_cluster_roles_and_bindings())


@pytest.mark.parametrize(
    ("path", "anonymous", "authenticated"),
    [
        ("/apis", False, True),
        ("/api", False, True),
        ("/api/v1", False, True),
        ("/apis/resource.nvidia.com/v1beta1", False, True),
        ("/openapi/v2", False, True),
        ("/openapi/v3/apis/apps/v1", False, True),
        ("/version", True, True),
        ("/healthz", True, True),
        ("/livez", True, True),
        ("/readyz", True, True),
        ("/metrics", False, False),
        ("/logs", False, False),
    ],
)
def test_discovery_for_anonymous_and_authenticated(
    path: str, anonymous: bool, authenticated: bool
) -> None:
    assert DEFAULTS.decide(RequestAttributes.for_path(ANONYMOUS, path)).allowed is anonymous
    user = sa_user(DRV_NS, "agent")
    assert DEFAULTS.decide(RequestAttributes.for_path(user, path)).allowed is authenticated
    assert not DEFAULTS.decide(RequestAttributes.for_path(user, path, "post")).allowed


def test_every_authenticated_user_may_review_its_own_access_only() -> None:
    user = sa_user(DRV_NS, "agent")
    for resource in ("selfsubjectaccessreviews", "selfsubjectrulesreviews"):
        assert DEFAULTS.allows(user, "create", "authorization.k8s.io", resource)
        assert not DEFAULTS.allows(ANONYMOUS, "create", "authorization.k8s.io", resource)
    assert not DEFAULTS.allows(user, "create", "authorization.k8s.io", "subjectaccessreviews")
    assert not DEFAULTS.allows(user, "list", "", "pods")
    assert DEFAULTS.allows(UserInfo("root", ("system:masters",)), "list", "", "pods")


def test_defaults_are_fresh_objects_each_call() -> None:
    first = default_cluster_roles_and_bindings()
    first[0]["rules"].clear()
    second = default_cluster_roles_and_bindings()
    assert second[0]["metadata"]["name"] == "cluster-admin" and second[0]["rules"]
    names = {(o["kind"], o["metadata"]["name"]) for o in second}
    assert ("ClusterRole", "system:discovery") in names
    assert ("ClusterRoleBinding", "system:public-info-viewer") in names


# ---------------------------------------------------------------------------------------
# Authentication


def test_token_authentication() -> None:
    auth = TokenAuthenticator()
    alice = auth.add_user("t-alice", "alice", ["devs"])
    agent = auth.add_service_account("t-agent", DRV_NS, "agent")
    admin = auth.add_admin("t-admin")
    assert alice == UserInfo("alice", ("devs", AUTHED))
    assert agent == UserInfo(
        "system:serviceaccount:drv:agent",
        ("system:serviceaccounts", "system:serviceaccounts:drv", AUTHED),
    )
    assert admin == ADMIN
    assert auth.authenticate("Bearer t-alice") == alice
    assert auth.authenticate("bearer t-agent") == agent
    assert auth.authenticate("  Bearer t-admin  ") == admin


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic YWxpY2U6cHc="])
def test_no_bearer_token_is_anonymous(header: str | None) -> None:
    user = TokenAuthenticator().authenticate(header)
    assert user == UserInfo("system:anonymous", ("system:unauthenticated",))


def test_unknown_token_is_401_not_anonymous() -> None:
    auth = TokenAuthenticator()
    auth.add_user("good", "alice")
    with pytest.raises(ApiError) as info:
        auth.authenticate("Bearer bad")
    assert info.value.status_object() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


def test_invalid_registrations_are_rejected() -> None:
    auth = TokenAuthenticator()
    for token, name in [("", "alice"), ("a b", "alice"), ("tok", "")]:
        with pytest.raises(ValueError):
            auth.add_user(token, name)
    with pytest.raises(ValueError):
        auth.add_service_account("tok", "", "agent")


# ---------------------------------------------------------------------------------------
# The 403 and the verb mapping


AGENT = sa_user(DRV_NS, "agent")


@pytest.mark.parametrize(
    ("attrs", "message", "details"),
    [
        (
            RequestAttributes(AGENT, "patch", "", "pods", namespace="default", name="p1"),
            'pods "p1" is forbidden: User "system:serviceaccount:drv:agent" cannot patch '
            'resource "pods" in API group "" in the namespace "default"',
            {"name": "p1", "kind": "pods"},
        ),
        (
            RequestAttributes(AGENT, "update", CD_GROUP, "computedomains", "status", "ns1", "cd1"),
            'computedomains.resource.nvidia.com "cd1" is forbidden: User '
            '"system:serviceaccount:drv:agent" cannot update resource "computedomains/status" '
            'in API group "resource.nvidia.com" in the namespace "ns1"',
            {"name": "cd1", "group": CD_GROUP, "kind": "computedomains"},
        ),
        (
            RequestAttributes(AGENT, "list", "", "nodes"),
            'nodes is forbidden: User "system:serviceaccount:drv:agent" cannot list resource '
            '"nodes" in API group "" at the cluster scope',
            {"kind": "nodes"},
        ),
        (
            RequestAttributes(AGENT, "list", CD_GROUP, "computedomains", namespace="ns1"),
            "computedomains.resource.nvidia.com is forbidden: User "
            '"system:serviceaccount:drv:agent" cannot list resource "computedomains" in API '
            'group "resource.nvidia.com" in the namespace "ns1"',
            {"group": CD_GROUP, "kind": "computedomains"},
        ),
        (
            RequestAttributes(AGENT, "watch", CD_GROUP, "computedomains"),
            "computedomains.resource.nvidia.com is forbidden: User "
            '"system:serviceaccount:drv:agent" cannot watch resource "computedomains" in API '
            'group "resource.nvidia.com" at the cluster scope',
            {"group": CD_GROUP, "kind": "computedomains"},
        ),
        (
            RequestAttributes.for_path(ANONYMOUS, "/apis"),
            'forbidden: User "system:anonymous" cannot get path "/apis"',
            None,
        ),
    ],
)
def test_forbidden_messages(
    attrs: RequestAttributes, message: str, details: dict[str, str] | None
) -> None:
    err = forbidden(attrs)
    body = err.status_object()
    assert (err.code, err.reason, err.message) == (403, "Forbidden", message)
    assert body["code"] == 403 and body["reason"] == "Forbidden"
    assert body.get("details") == details


def test_forbidden_message_is_html_sanitized_like_the_real_server() -> None:
    odd = UserInfo("<script>&", ())
    err = forbidden(RequestAttributes.for_path(odd, "/x"))
    assert err.message == 'forbidden: User "&lt;script&gt;&amp;" cannot get path "/x"'


@pytest.mark.parametrize(
    ("method", "has_name", "watch", "verb"),
    [
        ("GET", True, False, "get"),
        ("HEAD", True, False, "get"),
        ("GET", False, False, "list"),
        ("GET", False, True, "watch"),
        ("GET", True, True, "watch"),
        ("POST", False, False, "create"),
        ("POST", True, False, "create"),  # e.g. pods/eviction
        ("PUT", True, False, "update"),
        ("PATCH", True, False, "patch"),
        ("patch", True, False, "patch"),
        ("DELETE", True, False, "delete"),
        ("DELETE", False, False, "deletecollection"),
    ],
)
def test_verb_for(method: str, has_name: bool, watch: bool, verb: str) -> None:
    assert verb_for(method, has_name=has_name, watch=watch) == verb


def test_verb_for_rejects_unknown_methods() -> None:
    with pytest.raises(ValueError):
        verb_for("OPTIONS", has_name=False, watch=False)
