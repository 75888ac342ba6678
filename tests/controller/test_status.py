"""controller.status: global status, status.nodes from cliques/pods, pruning.

The rules are the reference's cdstatus.go and `calculateGlobalStatus` in computedomain.go
(https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/tree/main/cmd/compute-domain-controller).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.clique import ComputeDomainClique
from api.computedomain import ComputeDomainNode
from api.pod import Pod
from controller.status import (
    global_status,
    group_by_cd,
    is_non_fabric_pod,
    nodes_equal,
    nodes_from_cliques,
    nodes_legacy,
    pod_node_names,
    prune_clique_daemons,
    split_pods,
    status_body,
)

U = "6b1f0c7e-2d4a-4e8b-9c3f-5a7d1e2b4c6f"
CD_LABEL = "resource.nvidia.com/computeDomain"
CLIQUE_LABEL = "resource.nvidia.com/computeDomain.cliqueID"
READY, NOT_READY = "Ready", "NotReady"


def node(name: str, status: str | None = READY, **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "ipAddress": fields.get("ip", "10.0.0.9"),
        "cliqueID": fields.get("clique", "c1"),
        "index": fields.get("index", 0),
    }
    if status is not None:
        entry["status"] = status
    return entry


def pod(
    name: str,
    node_name: str | None,
    ip: str | None,
    *,
    clique: str | None = None,
    ready: bool = True,
    cd_uid: str = U,
    deleting: bool = False,
) -> Pod:
    labels = {CD_LABEL: cd_uid}
    if clique is not None:
        labels[CLIQUE_LABEL] = clique
    metadata: dict[str, Any] = {"name": name, "namespace": "drv", "labels": labels}
    if deleting:
        metadata["deletionTimestamp"] = "2026-08-01T00:00:00Z"
    status: dict[str, Any] = {
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True" if ready else "False"},
        ]
    }
    if ip is not None:
        status["podIP"] = ip
    spec = {"nodeName": node_name} if node_name is not None else {}
    return Pod.from_dict({"metadata": metadata, "spec": spec, "status": status})


def clique(clique_id: str, *daemons: dict[str, Any], cd_uid: str = U) -> ComputeDomainClique:
    return ComputeDomainClique.from_dict({
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainClique",
        "metadata": {
            "name": f"{cd_uid}.{clique_id}",
            "namespace": "drv",
            "labels": {CD_LABEL: cd_uid, CLIQUE_LABEL: clique_id},
        },
        "daemons": list(daemons),
    })


def read(*entries: dict[str, Any]) -> list[ComputeDomainNode]:
    """`status.nodes` entries as the controller reads them from a ComputeDomain."""
    return [ComputeDomainNode.from_dict(e) for e in entries]


def daemon(node_name: str, ip: str, clique_id: str, index: int, status: str | None = READY):
    entry: dict[str, Any] = {
        "nodeName": node_name,
        "ipAddress": ip,
        "cliqueID": clique_id,
        "index": index,
    }
    if status is not None:
        entry["status"] = status
    return entry


# --- global status ---------------------------------------------------------------------------
# With the reference's cases: https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-controller/computedomain_test.go


def test_host_managed_with_num_nodes_8_and_no_nodes_is_ready() -> None:
    assert global_status([], 8, host_managed=True) == READY


def test_driver_managed_with_num_nodes_8_and_no_nodes_is_not_ready() -> None:
    assert global_status([], 8, host_managed=False) == NOT_READY


@pytest.mark.parametrize(
    ("nodes", "num_nodes", "expected"),
    [
        ([node("A"), node("B")], 2, READY),
        ([node("A")], 2, NOT_READY),
        ([node("A"), node("B", NOT_READY)], 2, NOT_READY),
        ([node("A"), node("B", None)], 2, READY),  # an empty status is not NotReady
        ([node("A"), node("B", "")], 2, READY),
        ([], 0, READY),  # a new CD with numNodes 0 becomes Ready on its first reconcile
        ([], None, READY),  # numNodes omitted (Go omitempty) means 0
        ([node("A", NOT_READY)], 0, NOT_READY),
        ([node("A"), node("B"), node("C")], 2, READY),  # more than numNodes is fine
        ([node("A", "Weird")], 1, READY),  # only exactly "NotReady" counts
    ],
)
def test_global_status_driver_managed(
    nodes: list[dict[str, Any]], num_nodes: int | None, expected: str
) -> None:
    assert global_status(nodes, num_nodes, host_managed=False) == expected


def test_host_managed_is_ready_whatever_the_nodes_say() -> None:
    assert global_status([node("A", NOT_READY)], 5, host_managed=True) == READY


node_dicts = st.lists(
    st.dictionaries(
        st.sampled_from(["name", "ipAddress", "cliqueID", "index", "status", "other"]),
        st.one_of(
            st.none(),
            st.integers(),
            st.text(max_size=8),
            st.sampled_from([READY, NOT_READY, ""]),
            st.lists(st.integers(), max_size=2),
        ),
    ),
    max_size=8,
)


@given(nodes=node_dicts, num_nodes=st.one_of(st.none(), st.integers(-3, 12)), host=st.booleans())
def test_global_status_never_raises(
    nodes: list[dict[str, Any]], num_nodes: int | None, host: bool
) -> None:
    assert global_status(nodes, num_nodes, host_managed=host) in (READY, NOT_READY)


def test_status_body_omits_empty_nodes() -> None:
    assert status_body([], 0, host_managed=False) == {"status": READY}
    assert status_body([node("A", NOT_READY)], 0, host_managed=False) == {
        "status": NOT_READY,
        "nodes": [node("A", NOT_READY)],
    }


# --- pods -------------------------------------------------------------------------------------


def test_split_pods_by_the_clique_label() -> None:
    starting = pod("p0", "n0", "10.0.0.10")  # no label yet: fabric
    fabric = pod("p1", "n1", "10.0.0.1", clique="c1")
    non_fabric = pod("p2", "n2", "10.0.0.2", clique="")
    assert split_pods([starting, fabric, non_fabric]) == ([starting, fabric], [non_fabric])
    assert [is_non_fabric_pod(p) for p in (starting, fabric, non_fabric)] == [False, False, True]
    assert split_pods([]) == ([], [])
    empty = Pod.from_dict({})
    assert split_pods([empty]) == ([empty], [])


def test_pod_ready_and_node_names() -> None:
    assert pod("p", "n", "ip").ready
    assert not pod("p", "n", "ip", ready=False).ready
    assert not Pod.from_dict({}).ready
    assert pod_node_names([pod("a", "n1", None), pod("b", None, None), pod("c", "n1", "x")]) == {
        "n1"
    }


def test_group_by_cd_skips_unlabeled_and_empty() -> None:
    a, b = pod("a", "n1", "x"), pod("b", "n2", "y", cd_uid="V")
    empty = pod("c", "n3", "z", cd_uid="")
    unlabeled = Pod.from_dict({"metadata": {"name": "d"}})
    assert group_by_cd([a, b, empty, unlabeled]) == {U: [a], "V": [b]}


# --- status.nodes with the cliques gate on ---------------------------------------------------


def test_clique_plus_non_fabric_pod_example() -> None:
    """Clique drv/U.c1 with n1, plus a ready non-fabric daemon pod on n2 (index -1)."""
    cliques = [clique("c1", daemon("n1", "10.0.0.1", "c1", 0))]
    pods = [
        pod("d1", "n1", "10.0.0.1", clique="c1"),
        pod("d2", "n2", "10.0.0.2", clique=""),
    ]
    assert nodes_from_cliques(cliques, pods) == [
        {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c1", "index": 0, "status": READY},
        {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "", "index": -1, "status": READY},
    ]


def test_non_fabric_pod_without_ip_or_node_is_skipped() -> None:
    pods = [
        pod("no-ip", "n2", None, clique=""),
        pod("no-node", None, "10.0.0.3", clique=""),
        pod("empty-ip", "n4", "", clique=""),
    ]
    assert nodes_from_cliques([], pods) == []


def test_non_fabric_pod_not_ready() -> None:
    assert nodes_from_cliques([], [pod("d", "n2", "10.0.0.2", clique="", ready=False)]) == [
        {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "", "index": -1, "status": NOT_READY}
    ]


def test_clique_status_is_copied_and_omitted_when_empty() -> None:
    cliques = [
        clique(
            "c1",
            daemon("n1", "10.0.0.1", "c1", 0, NOT_READY),
            daemon("n2", "10.0.0.2", "c1", 1, None),
        )
    ]
    assert nodes_from_cliques(cliques, []) == [
        {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c1", "index": 0, "status": NOT_READY},
        {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "c1", "index": 1},
    ]


def test_order_is_deterministic() -> None:
    cliques = [
        clique("c2", daemon("z", "10.0.2.1", "c2", 0)),
        clique("c1", daemon("b", "10.0.1.2", "c1", 1), daemon("a", "10.0.1.1", "c1", 0)),
    ]
    pods = [pod("p9", "n9", "10.0.9.1", clique=""), pod("p8", "n8", "10.0.8.1", clique="")]
    got = nodes_from_cliques(cliques, pods)
    assert [(n["cliqueID"], n["index"], n["name"]) for n in got] == [
        ("c1", 0, "a"),
        ("c1", 1, "b"),
        ("c2", 0, "z"),
        ("", -1, "n8"),
        ("", -1, "n9"),
    ]
    assert nodes_from_cliques(list(reversed(cliques)), list(reversed(pods))) == got


def test_no_cliques_and_no_pods_clears_the_list() -> None:
    assert nodes_from_cliques([], []) == []
    assert nodes_from_cliques([clique("c1")], []) == []
    assert nodes_from_cliques([ComputeDomainClique.from_dict({"metadata": {}})], []) == []


def test_duplicate_node_names_are_collapsed() -> None:
    """`status.nodes` is a list map keyed by name: a duplicate would make the API refuse the
    whole update. A replaced pod still terminating must not produce a second entry."""
    pods = [
        pod("old", "n2", "10.0.0.2", clique="", ready=False, deleting=True),
        pod("new", "n2", "10.0.0.3", clique=""),
    ]
    assert nodes_from_cliques([], pods) == [
        {"name": "n2", "ipAddress": "10.0.0.3", "cliqueID": "", "index": -1, "status": READY}
    ]
    cliques = [clique("c1", daemon("n2", "10.0.0.5", "c1", 0))]
    got = nodes_from_cliques(cliques, pods)
    assert [n["name"] for n in got] == ["n2"]
    assert got[0]["cliqueID"] == "c1"  # the clique entry wins


# --- status.nodes with the cliques gate off (legacy) -----------------------------------------


def test_legacy_keeps_entries_whose_ip_matches_a_fabric_pod() -> None:
    existing = [
        node("n1", ip="10.0.0.1", clique="c1", index=0),
        node("n3", ip="10.0.0.3", clique="c1", index=1),  # its pod is gone
        node("n2", ip="10.0.0.2", clique="", index=-1),  # non-fabric: always rebuilt
    ]
    pods = [
        pod("d1", "n1", "10.0.0.1", clique="c1"),
        pod("d2", "n2", "10.0.0.2", clique="", ready=False),
    ]
    assert nodes_legacy(read(*existing), pods) == [
        node("n1", ip="10.0.0.1", clique="c1", index=0),
        {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "", "index": -1, "status": NOT_READY},
    ]


def test_legacy_ip_of_a_non_fabric_pod_does_not_keep_a_fabric_entry() -> None:
    existing = [node("n1", ip="10.0.0.1", clique="c1")]
    assert nodes_legacy(read(*existing), [pod("d", "n9", "10.0.0.1", clique="")]) == [
        {"name": "n9", "ipAddress": "10.0.0.1", "cliqueID": "", "index": -1, "status": READY}
    ]


def test_legacy_unlabeled_pod_counts_as_fabric() -> None:
    existing = [node("n1", ip="10.0.0.1", clique="c1")]
    assert nodes_legacy(read(*existing), [pod("d", "n1", "10.0.0.1")]) == existing


def test_legacy_does_not_change_its_input() -> None:
    existing = read(node("n1", ip="10.0.0.1", clique="c1"))
    got = nodes_legacy(existing, [pod("d", "n1", "10.0.0.1")])
    got[0]["status"] = NOT_READY
    assert existing[0].status == READY


def test_legacy_with_no_pods_clears_everything() -> None:
    assert nodes_legacy(read(node("n1"), node("n2", clique="")), []) == []


# --- equality: status is written only when the node list changed -----------------------------


def test_nodes_equal_ignores_order() -> None:
    a = [node("n1", ip="1"), node("n2", ip="2", clique="", index=-1)]
    assert nodes_equal(a, list(reversed(a)))
    assert nodes_equal([], [])


@pytest.mark.parametrize(
    ("field", "value"),
    [("ipAddress", "9.9.9.9"), ("cliqueID", "c9"), ("index", 7), ("status", NOT_READY)],
)
def test_nodes_equal_compares_all_five_fields(field: str, value: Any) -> None:
    a = [node("n1"), node("n2")]
    b = [node("n1"), node("n2") | {field: value}]
    assert not nodes_equal(a, b)


def test_nodes_equal_name_set_and_go_zero_values() -> None:
    assert not nodes_equal([node("n1")], [node("n2")])
    assert not nodes_equal([node("n1")], [node("n1"), node("n2")])
    assert nodes_equal([node("n1", None)], [node("n1", "")])  # omitted status == ""
    no_index = {k: v for k, v in node("n1", index=0).items() if k != "index"}
    assert nodes_equal([no_index], [node("n1", index=0)])
    # Duplicate names collapse, the last one wins (as the reference's map does).
    assert nodes_equal([node("n1", NOT_READY), node("n1", READY)], [node("n1", READY)])


entries = st.builds(
    lambda name, ip, clique_id, index, status: {
        "name": name,
        "ipAddress": ip,
        "cliqueID": clique_id,
        "index": index,
        "status": status,
    },
    st.text(min_size=1, max_size=6),
    st.ip_addresses(v=4).map(str),
    st.sampled_from(["", "c1", "c2"]),
    st.integers(-1, 17),
    st.sampled_from([READY, NOT_READY]),
)


@given(nodes=st.lists(entries, max_size=10, unique_by=lambda e: e["name"]), seed=st.integers())
def test_nodes_equal_to_any_shuffle(nodes: list[dict[str, Any]], seed: int) -> None:
    shuffled = list(nodes)
    random.Random(seed).shuffle(shuffled)
    assert nodes_equal(nodes, shuffled)
    assert nodes_equal(shuffled, nodes)


# --- clique pruning ----------------------------------------------------------------------------


def test_prune_drops_nodes_without_a_daemon_pod() -> None:
    c = clique(
        "c1",
        daemon("n1", "10.0.0.1", "c1", 0),
        daemon("n3", "10.0.0.3", "c1", 1),
    )
    pods = [pod("d1", "n1", "10.0.0.1", clique="c1")]
    assert prune_clique_daemons(c, pod_node_names(pods)) == [daemon("n1", "10.0.0.1", "c1", 0)]
    assert len(c.daemons or []) == 2  # the input is left alone


def test_prune_returns_none_when_nothing_changes() -> None:
    c = clique("c1", daemon("n1", "10.0.0.1", "c1", 0))
    assert prune_clique_daemons(c, {"n1", "n2"}) is None
    assert prune_clique_daemons(clique("c1"), set()) is None
    assert prune_clique_daemons(ComputeDomainClique.from_dict({"metadata": {}}), set()) is None


def test_prune_to_empty() -> None:
    c = clique("c1", daemon("n1", "10.0.0.1", "c1", 0))
    assert prune_clique_daemons(c, set()) == []


def test_prune_is_per_cd() -> None:
    """Stricter than the reference: another CD's daemon on n1 does not keep U's entry."""
    c = clique("c1", daemon("n1", "10.0.0.1", "c1", 0))
    pods = [pod("other", "n1", "10.0.0.7", clique="c1", cd_uid="V")]
    ours = group_by_cd(pods).get(U, [])
    assert prune_clique_daemons(c, pod_node_names(ours)) == []


# --- what we compute is what the CRD accepts --------------------------------------------------


def test_status_body_is_accepted_by_the_crd(k8s: Any, project_crds: Any) -> None:
    """The example status (including index -1 and cliqueID "") through the API emulator."""
    from kubernetes import client

    client.CoreV1Api(k8s).create_namespace({"metadata": {"name": "ns1"}})
    custom = client.CustomObjectsApi(k8s)
    args = ("resource.nvidia.com", "v1beta1", "ns1", "computedomains")
    cd = custom.create_namespaced_custom_object(
        *args,
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": "cd"},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "rct"}}},
        },
    )
    nodes = nodes_from_cliques(
        [clique("c1", daemon("n1", "10.0.0.1", "c1", 0))],
        [pod("d2", "n2", "10.0.0.2", clique="")],
    )
    cd["status"] = status_body(nodes, cd["spec"]["numNodes"], host_managed=False)
    written = custom.replace_namespaced_custom_object_status(*args, "cd", cd)
    assert written["status"] == {"status": READY, "nodes": nodes}
    cd = written
    cd["status"] = status_body([], 2, host_managed=False)
    written = custom.replace_namespaced_custom_object_status(*args, "cd", cd)
    assert written["status"] == {"status": NOT_READY}
