"""Finalizers, deletionTimestamp, garbage collection and graceful pod deletion."""

from __future__ import annotations

import pytest
from eventually import eventually
from kubernetes import client
from kubernetes.client.rest import ApiException


def wait_for(predicate, timeout=5.0):
    return eventually(predicate, timeout=timeout, interval=0.01)


def gone(read) -> bool:
    try:
        read()
    except ApiException as err:
        return err.status == 404
    return False


def test_finalizer_holds_deletion_until_removed(k8s):
    core = client.CoreV1Api(k8s)
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}
    )
    core.delete_namespaced_config_map("f", "default")
    held = core.read_namespaced_config_map("f", "default")
    assert held.metadata.deletion_timestamp is not None
    held.metadata.finalizers.append("example.com/another")
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("f", "default", held)
    assert err.value.status == 422 and "no new finalizers" in err.value.body
    held = core.read_namespaced_config_map("f", "default")
    held.metadata.finalizers = []
    core.replace_namespaced_config_map("f", "default", held)
    assert gone(lambda: core.read_namespaced_config_map("f", "default"))


def owned_by(owner, name: str, block: bool = False) -> dict:
    return {
        "metadata": {
            "name": name,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": owner.metadata.name,
                    "uid": owner.metadata.uid,
                    "blockOwnerDeletion": block,
                }
            ],
        }
    }


def test_background_deletion_collects_dependents(k8s):
    core = client.CoreV1Api(k8s)
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map("default", owned_by(owner, "dep1"))
    core.create_namespaced_config_map("default", owned_by(owner, "dep2"))
    core.delete_namespaced_config_map("owner", "default")
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map("dep1", "default")))
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map("dep2", "default")))


def test_dependent_with_a_surviving_owner_is_kept(k8s):
    core = client.CoreV1Api(k8s)
    a = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    b = core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    dep = owned_by(a, "shared")
    dep["metadata"]["ownerReferences"].append(owned_by(b, "x")["metadata"]["ownerReferences"][0])
    core.create_namespaced_config_map("default", dep)
    core.delete_namespaced_config_map("a", "default")
    wait_for(
        lambda: (
            len(core.read_namespaced_config_map("shared", "default").metadata.owner_references) == 1
        )
    )
    core.delete_namespaced_config_map("b", "default")
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map("shared", "default")))


def test_orphan_deletion_keeps_dependents_without_the_reference(k8s):
    core = client.CoreV1Api(k8s)
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "o"}})
    core.create_namespaced_config_map("default", owned_by(owner, "kept"))
    core.delete_namespaced_config_map("o", "default", propagation_policy="Orphan")
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map("o", "default")))
    kept = core.read_namespaced_config_map("kept", "default")
    assert not kept.metadata.owner_references


def test_foreground_deletion_waits_for_blocking_dependents(k8s):
    core = client.CoreV1Api(k8s)
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "fg"}})
    core.create_namespaced_config_map(
        "default",
        {
            **owned_by(owner, "blocker", block=True),
        },
    )
    dep = core.read_namespaced_config_map("blocker", "default")
    dep.metadata.finalizers = ["example.com/slow"]
    core.replace_namespaced_config_map("blocker", "default", dep)
    core.delete_namespaced_config_map("fg", "default", propagation_policy="Foreground")
    wait_for(
        lambda: (
            core.read_namespaced_config_map("blocker", "default").metadata.deletion_timestamp
            is not None
        )
    )
    held = core.read_namespaced_config_map("fg", "default")
    assert "foregroundDeletion" in held.metadata.finalizers
    dep = core.read_namespaced_config_map("blocker", "default")
    dep.metadata.finalizers = []
    core.replace_namespaced_config_map("blocker", "default", dep)
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map("fg", "default")))


def pod(name: str, node: str | None = None) -> dict:
    spec = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def test_pod_on_a_node_is_deleted_gracefully(k8s):
    core = client.CoreV1Api(k8s)
    core.create_namespaced_pod("default", pod("bound", node="n1"))
    core.create_namespaced_pod("default", pod("unbound"))
    core.delete_namespaced_pod("unbound", "default")
    assert gone(lambda: core.read_namespaced_pod("unbound", "default"))
    core.delete_namespaced_pod("bound", "default")
    terminating = core.read_namespaced_pod("bound", "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30
    # The kubelet confirms termination with a zero grace period.
    core.delete_namespaced_pod("bound", "default", grace_period_seconds=0)
    assert gone(lambda: core.read_namespaced_pod("bound", "default"))


def test_pod_status_starts_pending(k8s):
    core = client.CoreV1Api(k8s)
    created = core.create_namespaced_pod("default", pod("p"))
    assert created.status.phase == "Pending"


def test_namespace_deletion_removes_its_objects(k8s):
    core = client.CoreV1Api(k8s)
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_config_map("team", {"metadata": {"name": "c"}})
    core.delete_namespace("team")
    wait_for(lambda: gone(lambda: core.read_namespace("team")))
    assert gone(lambda: core.read_namespaced_config_map("c", "team"))


def test_preconditions_on_delete(k8s):
    core = client.CoreV1Api(k8s)
    core.create_namespaced_config_map("default", {"metadata": {"name": "p"}})
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_config_map(
            "p",
            "default",
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid")),
        )
    assert err.value.status == 409 and "Precondition failed" in err.value.body


def test_binding_sets_the_node_once(k8s):
    core = client.CoreV1Api(k8s)
    core.create_namespaced_pod("default", pod("b"))
    core.create_namespaced_pod_binding(
        "b",
        "default",
        {"metadata": {"name": "b"}, "target": {"kind": "Node", "name": "n1"}},
        _preload_content=False,
    )
    assert core.read_namespaced_pod("b", "default").spec.node_name == "n1"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding(
            "b",
            "default",
            {"metadata": {"name": "b"}, "target": {"kind": "Node", "name": "n2"}},
            _preload_content=False,
        )
    assert err.value.status == 409 and "already assigned" in err.value.body
    resources = {r.name for r in core.get_api_resources().resources}
    assert "pods/binding" in resources
