"""Create/read/update/delete semantics through the real `kubernetes` client."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

CD = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "cd1", "namespace": "default"},
    "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}}},
}


def status_of(err: ApiException) -> dict:
    return json.loads(err.body)


def test_create_get_list_assign_server_fields(k8s):
    core = client.CoreV1Api(k8s)
    created = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v"}}
    )
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert int(created.metadata.resource_version) > 0
    got = core.read_namespaced_config_map("a", "default")
    assert got.data == {"k": "v"} and got.metadata.uid == created.metadata.uid
    listed = core.list_namespaced_config_map("default")
    # kube-root-ca.crt: every namespace has it, as on a cluster (the root CA publisher).
    assert [c.metadata.name for c in listed.items] == ["a", "kube-root-ca.crt"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)


def test_generate_name(k8s):
    core = client.CoreV1Api(k8s)
    a = core.create_namespaced_config_map("default", {"metadata": {"generateName": "cm-"}})
    b = core.create_namespaced_config_map("default", {"metadata": {"generateName": "cm-"}})
    assert a.metadata.name.startswith("cm-") and len(a.metadata.name) == 8
    assert a.metadata.name != b.metadata.name


def test_errors_are_status_objects(k8s):
    core = client.CoreV1Api(k8s)
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("missing", "default")
    assert err.value.status == 404
    body = status_of(err.value)
    assert body["kind"] == "Status" and body["reason"] == "NotFound"
    assert body["message"] == 'configmaps "missing" not found'
    core.create_namespaced_config_map("default", {"metadata": {"name": "dup"}})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("default", {"metadata": {"name": "dup"}})
    assert err.value.status == 409 and status_of(err.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("nope", {"metadata": {"name": "x"}})
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'namespaces "nope" not found'


def test_stale_resource_version_is_a_409_conflict(k8s):
    core = client.CoreV1Api(k8s)
    first = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    fresh = core.read_namespaced_config_map("c", "default")
    fresh.data = {"a": "1"}
    core.replace_namespaced_config_map("c", "default", fresh)
    first.data = {"a": "2"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("c", "default", first)
    assert err.value.status == 409
    body = status_of(err.value)
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    assert core.read_namespaced_config_map("c", "default").data == {"a": "1"}


def test_noop_update_does_not_bump_resource_version(k8s):
    core = client.CoreV1Api(k8s)
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "n"}, "data": {}})
    again = core.replace_namespaced_config_map("n", "default", cm)
    assert again.metadata.resource_version == cm.metadata.resource_version


def test_generation_bumps_on_spec_changes_only(k8s):
    apps = client.AppsV1Api(k8s)
    ds = apps.create_namespaced_daemon_set("default", daemonset("g"))
    assert ds.metadata.generation == 1
    ds.metadata.labels = {"new": "label"}
    ds = apps.replace_namespaced_daemon_set("g", "default", ds)
    assert ds.metadata.generation == 1
    ds.spec.template.spec.containers[0].image = "busybox:2"
    ds = apps.replace_namespaced_daemon_set("g", "default", ds)
    assert ds.metadata.generation == 2


def daemonset(name: str) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


def test_status_subresource_split(k8s, project_crds):
    crs = client.CustomObjectsApi(k8s)
    args = ("resource.nvidia.com", "v1beta1", "default", "computedomains")
    created = crs.create_namespaced_custom_object(*args, dict(CD, status={"status": "Ready"}))
    assert "status" not in created, "status cannot be set on create"
    assert created["spec"]["channel"]["allocationMode"] == "Single", "CRD default applied"
    created["status"] = {"status": "Ready"}
    after_main = crs.replace_namespaced_custom_object(*args, "cd1", created)
    assert "status" not in after_main, "the main resource ignores status"
    after_main["status"] = {
        "status": "Ready",
        "nodes": [{"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c", "index": 0}],
    }
    after_main["spec"]["numNodes"] = 5
    after_status = crs.replace_namespaced_custom_object_status(*args, "cd1", after_main)
    assert after_status["status"]["status"] == "Ready"
    assert after_status["status"]["nodes"][0]["status"] == "NotReady", "item default"
    assert after_status["spec"]["numNodes"] == 0, "/status ignores spec"
    assert after_status["metadata"]["generation"] == 1


def test_custom_resource_schema_errors_are_422_with_causes(k8s, project_crds):
    crs = client.CustomObjectsApi(k8s)
    args = ("resource.nvidia.com", "v1beta1", "default", "computedomains")
    bad = json.loads(json.dumps(CD))
    bad["spec"]["numNodes"] = -1
    bad["spec"]["channel"]["allocationMode"] = "Many"
    with pytest.raises(ApiException) as err:
        crs.create_namespaced_custom_object(*args, bad)
    assert err.value.status == 422
    body = status_of(err.value)
    assert body["reason"] == "Invalid"
    fields = {c["field"] for c in body["details"]["causes"]}
    assert {"spec.numNodes", "spec.channel.allocationMode"} <= fields


def test_spec_is_immutable(k8s, project_crds):
    crs = client.CustomObjectsApi(k8s)
    args = ("resource.nvidia.com", "v1beta1", "default", "computedomains")
    cd = crs.create_namespaced_custom_object(*args, CD)
    cd["spec"]["numNodes"] = 3
    with pytest.raises(ApiException) as err:
        crs.replace_namespaced_custom_object(*args, "cd1", cd)
    assert err.value.status == 422
    assert "A computeDomain.spec is immutable" in err.value.body
    cd["spec"]["numNodes"] = 0
    cd["metadata"]["labels"] = {"ok": "yes"}
    assert crs.replace_namespaced_custom_object(*args, "cd1", cd)["metadata"]["labels"]


def test_unknown_custom_resource_fields_are_pruned(k8s, project_crds):
    crs = client.CustomObjectsApi(k8s)
    args = ("resource.nvidia.com", "v1beta1", "default", "computedomains")
    cd = json.loads(json.dumps(CD))
    cd["spec"]["bogus"] = 1
    created = crs.create_namespaced_custom_object(*args, cd)
    assert "bogus" not in created["spec"]


def test_builtin_objects_are_validated_like_a_real_server(k8s):
    apps = client.AppsV1Api(k8s)
    bad = daemonset("bad")
    del bad["spec"]["template"]["spec"]["containers"][0]["image"]
    bad["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_daemon_set("default", bad)
    assert err.value.status == 422
    fields = {c["field"] for c in status_of(err.value)["details"]["causes"]}
    assert "spec.template.spec.containers[0].image" in fields
    assert "spec.template.metadata.labels" in fields
    rct = {
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": {"requests": [{"name": "channel"}]}}},
    }
    with pytest.raises(ApiException) as err:
        client.ResourceV1Api(k8s).create_namespaced_resource_claim_template("default", rct)
    assert err.value.status == 422


def test_field_validation_strict_refuses_unknown_fields(apiserver, k8s, project_crds):
    import urllib3

    http = urllib3.PoolManager()
    body = json.dumps(dict(CD, spec=dict(CD["spec"], bogus=1))).encode()
    url = apiserver.url + "/apis/resource.nvidia.com/v1beta1/namespaces/default/computedomains"
    strict = http.request(
        "POST",
        url + "?fieldValidation=Strict",
        body=body,
        headers={"Content-Type": "application/json"},
    )
    assert strict.status == 400 and 'unknown field \\"spec.bogus\\"' in strict.data.decode()
    warned = http.request("POST", url, body=body, headers={"Content-Type": "application/json"})
    assert warned.status == 201
    assert 'unknown field \\"spec.bogus\\"' in warned.headers["Warning"]


def test_non_json_bodies_are_415(apiserver, k8s):
    import urllib3

    resp = urllib3.PoolManager().request(
        "POST", apiserver.url + "/api/v1/namespaces/default/configmaps", body=b"\x0a\x00",
        headers={"Content-Type": "application/cbor"})
    assert resp.status == 415
    assert "accepts JSON and Kubernetes protobuf bodies" in json.loads(resp.data)["message"]
