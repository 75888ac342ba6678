"""resource.k8s.io v1 <-> v1beta1/v1beta2 conversion (api/draconvert.py) and the version
choice (runtime/draclient.py), against objects shaped as the upstream API types define them
(https://github.com/kubernetes/api/blob/master/resource/v1beta1/types.go)."""

from __future__ import annotations

import argparse
import asyncio
import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api import draconvert
from runtime.cli import parse_resource_api_version
from runtime.draclient import ResourceApiError, discover, pick_version

V1BETA1_SLICE = {
    "apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice",
    "metadata": {"name": "n1-slice"},
    "spec": {"driver": "compute-domain.nvidia.com", "nodeName": "n1",
             "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
             "devices": [{"name": "channel-0", "basic": {
                 "attributes": {"type": {"string": "channel"}, "id": {"int": 0}},
                 "capacity": {"memory": {"value": "1Gi"}}}}]},
}
V1_SLICE = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
    "metadata": {"name": "n1-slice"},
    "spec": {"driver": "compute-domain.nvidia.com", "nodeName": "n1",
             "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
             "devices": [{"name": "channel-0",
                          "attributes": {"type": {"string": "channel"}, "id": {"int": 0}},
                          "capacity": {"memory": {"value": "1Gi"}}}]},
}
V1BETA1_REQUESTS = [
    {"name": "channel", "deviceClassName": "compute-domain-default-channel.nvidia.com",
     "allocationMode": "ExactCount", "count": 1},
    {"name": "either", "firstAvailable": [
        {"name": "a", "deviceClassName": "x.example.com"}]},
]
V1_REQUESTS = [
    {"name": "channel", "exactly": {
        "deviceClassName": "compute-domain-default-channel.nvidia.com",
        "allocationMode": "ExactCount", "count": 1}},
    {"name": "either", "firstAvailable": [
        {"name": "a", "deviceClassName": "x.example.com"}]},
]
STATUS = {"allocation": {"devices": {"results": [
    {"request": "channel", "driver": "compute-domain.nvidia.com", "pool": "n1",
     "device": "channel-0"}]}},
    "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}


def claim(version: str, requests: list[dict]) -> dict:
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"devices": {"requests": copy.deepcopy(requests)}},
            "status": copy.deepcopy(STATUS)}


def template(version: str, requests: list[dict]) -> dict:
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "default"},
            "spec": {"metadata": {"labels": {"a": "b"}},
                     "spec": {"devices": {"requests": copy.deepcopy(requests)}}}}


def test_a_v1beta1_slice_device_keeps_its_fields_under_basic() -> None:
    assert draconvert.to_v1(V1BETA1_SLICE, "ResourceSlice", "v1beta1") == V1_SLICE
    assert draconvert.from_v1(V1_SLICE, "ResourceSlice", "v1beta1") == V1BETA1_SLICE


@pytest.mark.parametrize("shape", [claim, template])
def test_a_v1beta1_request_holds_the_exact_fields_itself(shape) -> None:
    assert draconvert.to_v1(shape("v1beta1", V1BETA1_REQUESTS), shape(
        "v1", []).get("kind"), "v1beta1") == shape("v1", V1_REQUESTS)
    assert draconvert.from_v1(shape("v1", V1_REQUESTS), shape("v1", []).get("kind"),
                              "v1beta1") == shape("v1beta1", V1BETA1_REQUESTS)


def test_v1beta2_differs_from_v1_only_in_its_api_version() -> None:
    beta2 = draconvert.from_v1(claim("v1", V1_REQUESTS), "ResourceClaim", "v1beta2")
    assert beta2 == claim("v1beta2", V1_REQUESTS)
    assert draconvert.from_v1(V1_SLICE, "ResourceSlice", "v1beta2")["spec"] == V1_SLICE["spec"]


def test_conversion_copies_and_leaves_its_input_alone() -> None:
    before = copy.deepcopy(V1_SLICE)
    out = draconvert.from_v1(V1_SLICE, "ResourceSlice", "v1beta1")
    out["spec"]["devices"].clear()
    assert before == V1_SLICE


def test_list_items_without_kind_or_api_version_convert_too() -> None:
    item = {k: v for k, v in V1BETA1_SLICE.items() if k not in ("apiVersion", "kind")}
    out = draconvert.to_v1(item, "ResourceSlice", "v1beta1")
    assert "apiVersion" not in out and out["spec"] == V1_SLICE["spec"]


def test_device_classes_are_the_same_json_in_every_version() -> None:
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "d"},
           "spec": {"selectors": [{"cel": {"expression": "device.driver == 'x'"}}]}}
    out = draconvert.from_v1(cls, "DeviceClass", "v1beta1")
    assert out == {**cls, "apiVersion": "resource.k8s.io/v1beta1"}


_names = st.text("abcdefgh", min_size=1, max_size=5)
_attrs = st.dictionaries(_names, st.fixed_dictionaries({"string": _names}), max_size=3)
_devices = st.lists(st.fixed_dictionaries({"name": _names}, optional={"attributes": _attrs}),
                    max_size=3)
_exact = st.fixed_dictionaries({"deviceClassName": _names},
                               optional={"count": st.integers(1, 9),
                                         "allocationMode": st.sampled_from(["All",
                                                                            "ExactCount"])})
_requests = st.lists(st.builds(lambda n, e: {"name": n, "exactly": e}, _names, _exact),
                     max_size=3)


@given(_devices, _requests)
def test_every_v1_object_survives_a_round_trip_through_each_version(devices, requests) -> None:
    slice_ = {**copy.deepcopy(V1_SLICE), "spec": {**V1_SLICE["spec"], "devices": devices}}
    for version in draconvert.VERSIONS:
        assert draconvert.to_v1(draconvert.from_v1(slice_, "ResourceSlice", version),
                                "ResourceSlice", version) == slice_
        for shape, kind in ((claim, "ResourceClaim"), (template, "ResourceClaimTemplate")):
            obj = shape("v1", requests)
            assert draconvert.to_v1(draconvert.from_v1(obj, kind, version), kind,
                                    version) == obj


@pytest.mark.parametrize(("served", "wanted", "picked"), [
    (["v1", "v1beta2", "v1beta1"], "", "v1"),
    (["v1beta1", "v1beta2"], "", "v1beta2"),
    (["v1beta1"], "", "v1beta1"),
    (["v1", "v1beta1"], "resource.k8s.io/v1beta1", "v1beta1"),
    (["v1", "v1alpha3"], "", "v1"),
])
def test_the_newest_served_version_is_picked_unless_one_is_pinned(served, wanted,
                                                                   picked) -> None:
    assert pick_version(served, wanted) == picked


def test_a_pinned_version_the_server_lacks_is_refused_naming_what_it_serves() -> None:
    with pytest.raises(ResourceApiError) as err:
        pick_version(["v1beta1"], "v1")
    assert "resource.k8s.io/v1 was asked for" in str(err.value)
    assert "serves resource.k8s.io/v1beta1" in str(err.value)


def test_a_cluster_without_dra_is_told_what_it_needs() -> None:
    with pytest.raises(ResourceApiError) as err:
        pick_version(["v1alpha3"])
    assert "Kubernetes 1.32 or later" in str(err.value)


@pytest.mark.parametrize("text", ["v2", "resource.k8s.io/v1alpha3", "apps/v1"])
def test_a_bad_resource_api_version_flag_names_the_valid_ones(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parse_resource_api_version(text)
    assert ("is not one of resource.k8s.io/v1, resource.k8s.io/v1beta2, "
            "resource.k8s.io/v1beta1") in str(err.value)
    assert parse_resource_api_version(" ") == ""


def test_discovery_is_asked_again_while_a_restarted_server_lists_no_dra_yet() -> None:
    answers = iter([[], [], ["v1beta1"]])
    dra = asyncio.run(discover(None, within=30, served=lambda _api: next(answers)))  # type: ignore[arg-type]
    assert dra.version == "v1beta1"
    with pytest.raises(ResourceApiError, match="serves no resource"):
        asyncio.run(discover(None, within=0.2, served=lambda _api: []))  # type: ignore[arg-type]
