"""Patches as the real server takes them, discovery of built-in and CRD resources, events."""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException


def pod(name: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"a": "1"}},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "busybox"},
            ]
        },
    }


def test_strategic_merge_patch_merges_containers_by_name(k8s):
    apps = client.AppsV1Api(k8s)
    labels = {"app": "d"}
    apps.create_namespaced_daemon_set(
        "default",
        {
            "metadata": {"name": "d"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod("x")["spec"]},
            },
        },
    )
    patched = apps.patch_namespaced_daemon_set(
        "d",
        "default",
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}
                }
            }
        },
    )
    containers = patched.spec.template.spec.containers
    assert [c.name for c in containers] == ["main", "side"]
    # Items new to the list come first, as in the real server's merge code.
    assert [e.name for e in containers[0].env] == ["B", "A"]


def test_pod_spec_is_immutable_but_image_may_change(k8s):
    core = client.CoreV1Api(k8s)
    core.create_namespaced_pod("default", pod("p"))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod(
            "p",
            "default",
            {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}},
        )
    assert err.value.status == 422
    patched = core.patch_namespaced_pod(
        "p", "default", {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}
    )
    assert patched.spec.containers[0].image == "busybox:2"


def raw_patch(apiserver, path: str, body, content_type: str):
    http = urllib3.PoolManager()
    return http.request(
        "PATCH",
        apiserver.url + path,
        body=json.dumps(body).encode(),
        headers={"Content-Type": content_type},
    )


def test_merge_patch_replaces_lists(apiserver, k8s):
    client.CoreV1Api(k8s).create_namespaced_pod("default", pod("m"))
    resp = raw_patch(
        apiserver,
        "/api/v1/namespaces/default/pods/m",
        {"metadata": {"labels": {"a": None, "b": "2"}}},
        "application/merge-patch+json",
    )
    assert resp.status == 200
    assert json.loads(resp.data)["metadata"]["labels"] == {"b": "2"}


def test_json_patch_and_failed_test_op(apiserver, k8s):
    client.CoreV1Api(k8s).create_namespaced_config_map(
        "default", {"metadata": {"name": "j"}, "data": {"k": "v"}}
    )
    path = "/api/v1/namespaces/default/configmaps/j"
    ok = raw_patch(
        apiserver,
        path,
        [{"op": "replace", "path": "/data/k", "value": "w"}],
        "application/json-patch+json",
    )
    assert ok.status == 200 and json.loads(ok.data)["data"] == {"k": "w"}
    failed = raw_patch(
        apiserver,
        path,
        [{"op": "test", "path": "/data/k", "value": "nope"}],
        "application/json-patch+json",
    )
    assert failed.status == 422


def test_strategic_merge_patch_on_custom_resource_is_415(apiserver, k8s, project_crds):
    crs = client.CustomObjectsApi(k8s)
    crs.create_namespaced_custom_object(
        "resource.nvidia.com",
        "v1beta1",
        "default",
        "computedomains",
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": "cd"},
            "spec": {"channel": {"resourceClaimTemplate": {"name": "t"}}},
        },
    )
    resp = raw_patch(
        apiserver,
        "/apis/resource.nvidia.com/v1beta1/namespaces/default/computedomains/cd",
        {"metadata": {"labels": {"x": "y"}}},
        "application/strategic-merge-patch+json",
    )
    assert resp.status == 415
    assert json.loads(resp.data)["reason"] == "UnsupportedMediaType"
    # The client's custom-object patch sends a merge patch, which works.
    patched = crs.patch_namespaced_custom_object(
        "resource.nvidia.com",
        "v1beta1",
        "default",
        "computedomains",
        "cd",
        {"metadata": {"labels": {"x": "y"}}},
    )
    assert patched["metadata"]["labels"] == {"x": "y"}


def test_discovery_lists_builtins_and_follows_crds(k8s, project_crds):
    groups = {g.name for g in client.ApisApi(k8s).get_api_versions().groups}
    assert {
        "apps",
        "batch",
        "resource.k8s.io",
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
        "resource.nvidia.com",
    } <= groups
    core = client.CoreV1Api(k8s).get_api_resources()
    assert {"pods", "pods/status", "nodes", "events", "namespaces"} <= {
        r.name for r in core.resources
    }
    cds = client.CustomObjectsApi(k8s).get_api_resources("resource.nvidia.com", "v1beta1")
    by_name = {r.name: r for r in cds.resources}
    assert by_name["computedomains"].kind == "ComputeDomain"
    assert "computedomains/status" in by_name
    assert "computedomaincliques/status" not in by_name
    ext = client.ApiextensionsV1Api(k8s)
    ext.delete_custom_resource_definition("computedomains.resource.nvidia.com")
    cds = client.CustomObjectsApi(k8s).get_api_resources("resource.nvidia.com", "v1beta1")
    assert {r.name for r in cds.resources} == {"computedomaincliques"}


def test_crd_becomes_established(k8s, project_crds):
    ext = client.ApiextensionsV1Api(k8s)
    crd = ext.read_custom_resource_definition("computedomains.resource.nvidia.com")
    conditions = {c.type: c.status for c in crd.status.conditions}
    assert conditions["Established"] == "True"


def test_deleting_a_crd_deletes_its_objects(k8s, project_crds):
    crs = client.CustomObjectsApi(k8s)
    args = ("resource.nvidia.com", "v1beta1", "drv", "computedomaincliques")
    client.CoreV1Api(k8s).create_namespace({"metadata": {"name": "drv"}})
    crs.create_namespaced_custom_object(
        *args,
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {"name": "u.c"},
            "daemons": [],
        },
    )
    client.ApiextensionsV1Api(k8s).delete_custom_resource_definition(
        "computedomaincliques.resource.nvidia.com"
    )
    with pytest.raises(ApiException) as err:
        crs.list_namespaced_custom_object(*args)
    assert err.value.status == 404


def test_events_are_stored_and_listable(k8s):
    core = client.CoreV1Api(k8s)
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"generateName": "cd-"},
            "involvedObject": {
                "kind": "ComputeDomain",
                "name": "cd",
                "namespace": "default",
                "uid": "u1",
            },
            "reason": "TemplateNameTaken",
            "message": "already exists",
            "type": "Warning",
            "source": {"component": "compute-domain-controller"},
        },
    )
    events = core.list_namespaced_event("default", field_selector="involvedObject.uid=u1")
    assert [e.reason for e in events.items] == ["TemplateNameTaken"]


def test_version_endpoint(k8s):
    info = client.VersionApi(k8s).get_code()
    assert info.major == "1" and info.git_version.startswith("v1.34")
