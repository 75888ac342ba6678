"""The emulator serving resource.k8s.io as Kubernetes 1.32 (v1beta1 only) and 1.33 (v1beta1,
v1beta2) do (sim/apiserver/versions.py): discovery, the served shapes on the wire, a v1 body
sent to a beta endpoint, watches, kubectl, and the driver's client (runtime/draclient.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from runtime.draclient import DraApi, discover
from sim.apiserver.runner import ServerThread

GROUP = "resource.k8s.io"
SLICE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
         "metadata": {"name": "n1-slice"},
         "spec": {"driver": "compute-domain.nvidia.com", "nodeName": "n1",
                  "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                  "devices": [{"name": "channel-0",
                               "attributes": {"type": {"string": "channel"}}}]}}
TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "channel", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "channel", "exactly": {
                "deviceClassName": "compute-domain-default-channel.nvidia.com"}}]}}}}


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    thread = ServerThread(resource_versions=request.param).start()
    try:
        yield thread
    finally:
        thread.close()


def served(server: ServerThread) -> tuple[client.ApiClient, client.CustomObjectsApi]:
    api = server.api_client()
    return api, client.CustomObjectsApi(api)


@pytest.mark.parametrize(("server", "listed"), [
    (("v1beta1",), ["v1beta1"]), (("v1beta1", "v1beta2"), ["v1beta2", "v1beta1"]),
    (("v1",), ["v1"])], indirect=["server"])
def test_discovery_lists_only_the_served_versions(server: ServerThread, listed) -> None:
    api, custom = served(server)
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert sorted(v.version for v in groups[GROUP].versions) == sorted(listed)
    assert asyncio.run(discover(api)).version == listed[0]
    if "v1" not in listed:
        with pytest.raises(ApiException) as err:
            custom.list_cluster_custom_object(GROUP, "v1", "resourceslices")
        assert err.value.status == 404


@pytest.mark.parametrize("server", [("v1beta1",)], indirect=True)
def test_v1beta1_on_the_wire_v1_to_the_driver(server: ServerThread) -> None:
    api, custom = served(server)
    dra = DraApi(api, "v1beta1")
    created = dra.create("resourceslices", SLICE)
    assert created["apiVersion"] == "resource.k8s.io/v1"
    assert created["spec"]["devices"] == SLICE["spec"]["devices"]
    wire = custom.get_cluster_custom_object(GROUP, "v1beta1", "resourceslices", "n1-slice")
    assert wire["apiVersion"] == "resource.k8s.io/v1beta1"
    assert wire["spec"]["devices"] == [
        {"name": "channel-0", "basic": {"attributes": {"type": {"string": "channel"}}}}]
    dra.create("resourceclaimtemplates", TEMPLATE, "default")
    wire = custom.get_namespaced_custom_object(GROUP, "v1beta1", "default",
                                               "resourceclaimtemplates", "channel")
    # Defaulted as upstream defaults a v1beta1 request, at the request itself.
    assert wire["spec"]["spec"]["devices"]["requests"] == [{
        "name": "channel", "deviceClassName": "compute-domain-default-channel.nvidia.com",
        "allocationMode": "ExactCount", "count": 1}]
    listed = dra.list("resourceclaimtemplates", "default")["items"]
    assert listed[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1


@pytest.mark.parametrize("server", [("v1beta1",)], indirect=True)
def test_a_v1_shaped_body_sent_to_v1beta1_is_refused_as_a_real_server_refuses_it(
        server: ServerThread) -> None:  # fmt: skip
    _, custom = served(server)
    body = {**TEMPLATE, "apiVersion": "resource.k8s.io/v1beta1"}
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(GROUP, "v1beta1", "default",
                                               "resourceclaimtemplates", body,
                                               field_validation="Strict")
    assert err.value.status == 400
    assert 'strict decoding error: unknown field "spec.spec.devices.requests[0].exactly"' in (
        json.loads(err.value.body)["message"])
    # Without Strict the unknown field is dropped, and the request lacks its class.
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(GROUP, "v1beta1", "default",
                                               "resourceclaimtemplates", body)
    assert err.value.status == 422
    assert "deviceClassName" in json.loads(err.value.body)["message"]


@pytest.mark.parametrize("server", [("v1beta1",)], indirect=True)
def test_watch_events_and_patches_speak_the_served_version(server: ServerThread) -> None:
    api, custom = served(server)
    events: list[dict] = []
    # Watch from the list's resourceVersion: a watch without one starts "now", so under load
    # the create and patch could land before it and arrive as one synthetic ADDED.
    since = custom.list_cluster_custom_object(GROUP, "v1beta1", "resourceslices")[
        "metadata"]["resourceVersion"]

    def watching() -> None:
        stream = watch.Watch(return_type="object")
        for event in stream.stream(custom.list_cluster_custom_object, GROUP, "v1beta1",
                                   "resourceslices", resource_version=since,
                                   timeout_seconds=30):
            events.append(event)
            if len(events) == 2:
                stream.stop()

    thread = threading.Thread(target=watching)
    thread.start()
    DraApi(api, "v1beta1").create("resourceslices", SLICE)
    patched = custom.patch_cluster_custom_object(
        GROUP, "v1beta1", "resourceslices", "n1-slice",
        {"spec": {"devices": [{"name": "channel-0", "basic": {
            "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}}]}})
    thread.join(30)
    assert patched["spec"]["devices"][0]["basic"]["attributes"]["id"] == {"int": 0}
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED"]
    for event in events:
        assert event["object"]["apiVersion"] == "resource.k8s.io/v1beta1"
        assert "basic" in event["object"]["spec"]["devices"][0]
    stored = DraApi(api, "v1beta1").read("resourceslices", "n1-slice")
    assert stored["spec"]["devices"][0]["attributes"]["id"] == {"int": 0}


@pytest.mark.parametrize("server", [("v1beta1",)], indirect=True)
def test_kubectl_gets_and_creates_v1beta1_objects(server: ServerThread, tmp_path: Path,
                                                  kubectl_bin: Path) -> None:
    config = server.write_kubeconfig(tmp_path / "kubeconfig")

    def kubectl(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run([str(kubectl_bin), "--kubeconfig", str(config), *args],
                              input=stdin, capture_output=True, text=True, timeout=60,
                              env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    beta = {**SLICE, "apiVersion": "resource.k8s.io/v1beta1",
            "spec": {**SLICE["spec"], "devices": [
                {"name": "channel-0", "basic": {"attributes": {"type": {"string": "x"}}}}]}}
    kubectl("create", "-f", "-", stdin=json.dumps(beta))
    table = kubectl("get", "resourceslices")
    assert "n1-slice" in table and "compute-domain.nvidia.com" in table
    got = json.loads(kubectl("get", "resourceslice", "n1-slice", "-o", "json"))
    assert got["apiVersion"] == "resource.k8s.io/v1beta1"
    assert got["spec"]["devices"][0]["basic"]["attributes"] == {"type": {"string": "x"}}
