"""ComputeDomain and ComputeDomainClique round-trip through the API's JSON without loss."""

from __future__ import annotations

import contextlib
import copy

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.clique import ComputeDomainClique, ComputeDomainDaemonInfo
from api.computedomain import ComputeDomain, ComputeDomainNode, ComputeDomainStatus
from api.validation_error import ValidationError

CD = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {
        "name": "imex-channel-injection",
        "namespace": "default",
        "uid": "8b5cd1b6-5f1e-4a5b-9a53-0c1d2e3f4a5b",
        "resourceVersion": "42",
        "generation": 1,
        "creationTimestamp": "2026-11-29T08:00:00Z",
        "labels": {"team": "ml"},
        "finalizers": ["resource.nvidia.com/computeDomain"],
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}, "time": None}],
    },
    "spec": {
        "numNodes": 2,
        "channel": {
            "resourceClaimTemplate": {"name": "imex-channel-0"},
            "allocationMode": "Single",
            "futureChannelField": {"nested": [1, 2.5, None]},
        },
        "futureSpecField": "x",
    },
    "status": {
        "status": "Ready",
        "nodes": [
            {
                "name": "n1",
                "ipAddress": "10.0.0.1",
                "cliqueID": "c1",
                "index": 0,
                "status": "Ready",
            },
            {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "", "index": -1, "extra": True},
        ],
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}

CLIQUE = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomainClique",
    "metadata": {
        "name": "8b5cd1b6-5f1e-4a5b-9a53-0c1d2e3f4a5b.0f2a.3",
        "namespace": "nvidia-dra-driver",
        "labels": {
            "resource.nvidia.com/computeDomain": "8b5cd1b6-5f1e-4a5b-9a53-0c1d2e3f4a5b",
            "resource.nvidia.com/computeDomain.cliqueID": "0f2a.3",
        },
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "d-1", "uid": "p1", "extraRef": 1}
        ],
    },
    "daemons": [
        {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "0f2a.3", "index": 0},
        {
            "nodeName": "n2",
            "ipAddress": "10.0.0.2",
            "cliqueID": "0f2a.3",
            "index": 1,
            "status": "NotReady",
            "newField": {"a": 1},
        },
    ],
    "unknownTopLevel": [1, "two"],
}


@pytest.mark.parametrize("model, data", [(ComputeDomain, CD), (ComputeDomainClique, CLIQUE)])
def test_round_trip_keeps_every_field(model, data):
    obj = model.from_dict(copy.deepcopy(data))
    assert obj.to_dict() == data
    # And through JSON bytes, as the client sends it.
    assert orjson.loads(orjson.dumps(obj.to_dict())) == data


def test_update_of_one_field_keeps_unknown_fields():
    cd = ComputeDomain.from_dict(copy.deepcopy(CD))
    cd.status.status = "NotReady"
    cd.status.nodes.append(ComputeDomainNode(name="n3", ip_address="10.0.0.3", clique_id="c1"))
    out = cd.to_dict()
    assert out["status"]["status"] == "NotReady"
    assert out["status"]["conditions"] == CD["status"]["conditions"]
    assert out["spec"]["channel"]["futureChannelField"] == {"nested": [1, 2.5, None]}
    assert out["metadata"]["managedFields"] == CD["metadata"]["managedFields"]
    assert out["status"]["nodes"][1]["extra"] is True
    # Index is always serialized (the reference has no omitempty on it); status is omitted.
    assert out["status"]["nodes"][2] == {
        "name": "n3",
        "ipAddress": "10.0.0.3",
        "cliqueID": "c1",
        "index": 0,
    }


def test_accessors():
    cd = ComputeDomain.from_dict(copy.deepcopy(CD))
    assert (cd.name, cd.namespace, cd.uid) == (
        "imex-channel-injection",
        "default",
        "8b5cd1b6-5f1e-4a5b-9a53-0c1d2e3f4a5b",
    )
    assert cd.workload_template_name == "imex-channel-0"
    assert cd.num_nodes == 2
    assert not cd.deleting
    assert cd.status.node("n2").index == -1
    assert cd.status.node("absent") is None
    clique = ComputeDomainClique.from_dict(copy.deepcopy(CLIQUE))
    assert clique.daemon("n2").status == "NotReady"
    assert clique.metadata.owner_references[0].kind == "Pod"


def test_optional_fields_absent_stay_absent():
    minimal = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "a", "namespace": "default"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "t"}}},
    }
    cd = ComputeDomain.from_dict(copy.deepcopy(minimal))
    assert cd.to_dict() == minimal
    assert cd.num_nodes == 0
    assert cd.spec.channel.effective_allocation_mode == "Single"
    assert cd.status is None


@pytest.mark.parametrize(
    "mode, effective", [(None, "Single"), ("", "Single"), ("Single", "Single"), ("All", "All")]
)
def test_effective_allocation_mode(mode, effective):
    channel = {"resourceClaimTemplate": {"name": "t"}}
    if mode is not None:
        channel["allocationMode"] = mode
    cd = ComputeDomain.from_dict({"metadata": {}, "spec": {"channel": channel}})
    assert cd.spec.channel.effective_allocation_mode == effective


def test_built_in_code_serializes_like_the_api():
    status = ComputeDomainStatus(
        status="Ready",
        nodes=[
            ComputeDomainNode(
                name="n2", ip_address="10.0.0.2", clique_id="", index=-1, status="Ready"
            )
        ],
    )
    assert status.to_dict() == {
        "status": "Ready",
        "nodes": [
            {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "", "index": -1, "status": "Ready"}
        ],
    }
    info = ComputeDomainDaemonInfo(node_name="n1", ip_address="10.0.0.1", clique_id="c")
    assert info.to_dict() == {
        "nodeName": "n1",
        "ipAddress": "10.0.0.1",
        "cliqueID": "c",
        "index": 0,
    }


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d["spec"].pop("channel"), "spec.channel: required field is missing"),
        (lambda d: d["spec"].__setitem__("numNodes", "2"), "spec.numNodes"),
        (lambda d: d.__setitem__("kind", "Pod"), "kind"),
        (lambda d: d.__setitem__("apiVersion", "resource.nvidia.com/v1"), "apiVersion"),
        (lambda d: d["status"]["nodes"][0].pop("ipAddress"), "status.nodes.0.ipAddress"),
        (lambda d: d["status"]["nodes"][0].__setitem__("index", "0"), "status.nodes.0.index"),
        (lambda d: d["metadata"].__setitem__("labels", {"a": 1}), "metadata.labels.a"),
    ],
)
def test_malformed_objects_name_the_field(mutate, needle):
    data = copy.deepcopy(CD)
    mutate(data)
    with pytest.raises(ValidationError, match="invalid ComputeDomain") as err:
        ComputeDomain.from_dict(data)
    assert needle in str(err.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_any_json_parses_or_raises_validation_error(value):
    for model in (ComputeDomain, ComputeDomainClique):
        for candidate in (value, {"spec": value, "metadata": value, "daemons": value}):
            with contextlib.suppress(ValidationError):
                model.from_dict(candidate)
