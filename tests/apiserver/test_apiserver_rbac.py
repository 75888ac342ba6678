"""Bearer tokens and RBAC: a service account gets exactly what its roles grant."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from sim.apiserver.authn import TokenAuthenticator
from sim.apiserver.runner import ServerThread

DRIVER_NS = "nvidia-dra-driver"
RBAC = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "cd-controller"},
        "rules": [
            {
                "apiGroups": ["resource.nvidia.com"],
                "resources": ["computedomains"],
                "verbs": ["get", "list", "watch", "update"],
            },
            {
                "apiGroups": ["resource.nvidia.com"],
                "resources": ["computedomains/status"],
                "verbs": ["update"],
            },
            {
                "apiGroups": [""],
                "resources": ["nodes"],
                "verbs": ["get", "list", "watch", "update"],
            },
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "cd-controller"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cd-controller",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": DRIVER_NS}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "cd-controller", "namespace": DRIVER_NS},
        "rules": [
            {
                "apiGroups": ["apps"],
                "resources": ["daemonsets"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            }
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "cd-controller", "namespace": DRIVER_NS},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "cd-controller",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": DRIVER_NS}],
    },
]


@pytest.fixture
def secured():
    auth = TokenAuthenticator()
    auth.add_admin("admin-token")
    auth.add_service_account("controller-token", DRIVER_NS, "controller")
    thread = ServerThread(authenticator=auth).start()
    admin = thread.api_client("admin-token")
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": DRIVER_NS}})
    rbac = client.RbacAuthorizationV1Api(admin)
    for obj in RBAC:
        kind = obj["kind"]
        if kind == "ClusterRole":
            rbac.create_cluster_role(obj)
        elif kind == "ClusterRoleBinding":
            rbac.create_cluster_role_binding(obj)
        elif kind == "Role":
            rbac.create_namespaced_role(DRIVER_NS, obj)
        else:
            rbac.create_namespaced_role_binding(DRIVER_NS, obj)
    try:
        yield thread, admin, thread.api_client("controller-token")
    finally:
        thread.close()


def forbidden_message(call) -> str:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403
    body = json.loads(err.value.body)
    assert body["reason"] == "Forbidden"
    return body["message"]


def test_service_account_gets_what_its_roles_grant(secured):
    _, admin, sa = secured
    core = client.CoreV1Api(sa)
    client.CoreV1Api(admin).create_node({"metadata": {"name": "n1"}})
    assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    message = forbidden_message(lambda: core.delete_node("n1"))
    assert message == (
        'nodes "n1" is forbidden: User "system:serviceaccount:nvidia-dra-driver:'
        'controller" cannot delete resource "nodes" in API group "" at the '
        "cluster scope"
    )
    apps = client.AppsV1Api(sa)
    assert apps.list_namespaced_daemon_set(DRIVER_NS).items == []
    message = forbidden_message(lambda: apps.list_namespaced_daemon_set("default"))
    assert message.startswith("daemonsets.apps is forbidden: User ")
    assert message.endswith(
        'cannot list resource "daemonsets" in API group "apps" in the namespace "default"'
    )


def test_unknown_token_is_401(secured):
    thread, _, _ = secured
    stranger = thread.api_client("who-is-this")
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(stranger).list_node()
    assert err.value.status == 401


def test_authenticated_users_may_discover(secured):
    _, _, sa = secured
    groups = {g.name for g in client.ApisApi(sa).get_api_versions().groups}
    assert "apps" in groups
