"""The typed reads of API objects: ComputeDomains as the server may hold them, pods and
claims as far as the driver reads them, and the parse cache over an informer's items."""

from __future__ import annotations

import copy

import pytest

from api.computedomain import ComputeDomain, StoredComputeDomain
from api.objects import K8sObject, ParsedCache
from api.pod import Pod
from api.resourceclaim import ResourceClaim
from api.validation_error import ValidationError

CD = {
    "kind": "ComputeDomain",
    "apiVersion": "resource.nvidia.com/v1beta1",
    "metadata": {"name": "cd", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
    "spec": {"channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "All"}},
    "status": {
        "status": "Ready",
        "nodes": [{"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c", "later": 1}],
        "conditions": [{"type": "Reconciled", "status": "False", "reason": "R"}],
    },
    "futureTopLevel": [1, None],
}


def test_a_stored_domain_may_lack_a_spec_a_valid_one_may_not():
    bare = {"metadata": {"name": "bare", "uid": "u"}}
    cd = StoredComputeDomain.from_dict(bare)
    assert (cd.workload_template_name, cd.num_nodes, cd.allocation_mode) == ("", 0, None)
    assert cd.status_nodes == []
    with pytest.raises(ValidationError, match="spec: required field is missing"):
        ComputeDomain.from_dict(bare)


def test_as_read_gives_back_what_was_read_and_nothing_more():
    cd = StoredComputeDomain.from_dict(copy.deepcopy(CD))
    assert cd.as_read() == CD
    # An entry without index reads as 0 but is written back without one.
    assert cd.status_nodes[0].index == 0
    assert cd.status_nodes[0].as_read() == CD["status"]["nodes"][0]
    assert cd.as_read(without=frozenset({"status"})) == {
        k: v for k, v in CD.items() if k != "status"}


def test_reads_do_not_change_the_object():
    raw = copy.deepcopy(CD)
    cd = StoredComputeDomain.from_dict(raw)
    cd.finalizers.append("x")
    cd.status_nodes.clear()
    assert raw == CD and cd.as_read() == CD


def test_pod_accessors():
    pod = Pod.from_dict({
        "metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z",
                     "ownerReferences": [
                         {"apiVersion": "v1", "kind": "Node", "name": "a", "uid": "1"},
                         {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d",
                          "uid": "2", "controller": True}]},
        "spec": {"nodeName": "n", "containers": [{"name": "c"}]},
        "status": {"podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
    })
    assert (pod.node_name, pod.ip, pod.ready, pod.deleting) == ("n", "10.0.0.1", True, True)
    assert pod.controller is not None and pod.controller.name == "d"
    empty = Pod.from_dict({})
    assert (empty.node_name, empty.ip, empty.ready, empty.controller) == ("", "", False, None)


def test_a_claim_keeps_its_status_json_verbatim():
    status = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "1"}],
              "allocation": {"devices": {"results": [
                  {"request": "r", "driver": "d", "pool": "n", "device": "channel-0"}]},
                  "nodeSelector": {"x": 1}}}
    raw = {"metadata": {"name": "c", "uid": "u"}, "status": status}
    claim = ResourceClaim.from_dict(raw)
    assert claim.status_json is status  # key order and all, for the checkpoint's checksum
    assert claim.allocated and claim.allocation is not None
    assert [r.device for r in claim.allocation.results] == ["channel-0"]
    assert [r.name for r in claim.reserved_for] == ["p"]
    assert not ResourceClaim.from_dict({"status": {"allocation": {}}}).allocated
    assert ResourceClaim.from_dict({}).status_json == {}


def test_parsed_cache_parses_each_version_once():
    cache: ParsedCache[K8sObject] = ParsedCache(K8sObject)
    items = {"a": {"metadata": {"name": "a"}}}
    first = cache.get(items, "a")
    assert first is not None and cache.get(items, "a") is first
    items["a"] = {"metadata": {"name": "a", "labels": {"k": "v"}}}  # a watch event
    second = cache.get(items, "a")
    assert second is not first and second is not None and second.label("k") == "v"
    assert cache.get(items, "missing") is None


def test_parsed_cache_remembers_and_repeats_a_validation_error():
    cache: ParsedCache[K8sObject] = ParsedCache(K8sObject)
    items = {"bad": {"metadata": {"labels": {"k": 1}}}}
    for _ in range(2):
        with pytest.raises(ValidationError, match=r"metadata\.labels\.k"):
            cache.get(items, "bad")
    cache.forget_missing({})
    assert cache.get({}, "bad") is None
