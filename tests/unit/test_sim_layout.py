"""The simulated cluster's shape: node names, cliques, addresses, and bad specs refused."""

import random
from pathlib import Path

import pytest

from sim.cluster.cluster import ClusterSpec
from sim.cluster.node import node_ip, random_network


def test_nodes_split_evenly_and_contiguously_over_cliques_then_non_fabric() -> None:
    spec = ClusterSpec(root=Path("/x"), nodes=5, cliques=2, non_fabric=2)
    assert spec.layout() == [
        ("node-01", 1), ("node-02", 1), ("node-03", 1), ("node-04", 2), ("node-05", 2),
        ("node-06", None), ("node-07", None),
    ]  # fmt: skip


def test_default_is_eighteen_nodes_per_clique_like_an_nvl72_rack() -> None:
    spec = ClusterSpec(root=Path("/x"), nodes=40)
    assert spec.clique_count == 3
    cliques = [c for _, c in spec.layout()]
    assert [cliques.count(k) for k in (1, 2, 3)] == [14, 13, 13]
    assert spec.layout()[-1][0] == "node-40"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "hostmanaged"}, "mode 'hostmanaged' is not one of"),
        ({"nodes": 0}, "nodes must be at least 1"),
        ({"nodes": 4060, "non_fabric": 5}, "at most 4064 nodes"),
        ({"nodes": 2, "cliques": 3}, "cliques must be between 1 and the node count 2"),
        ({"agent_program": Path("/nonexistent/agent")}, "program /nonexistent/agent not found"),
    ],
)
def test_bad_specs_are_refused_with_the_reason(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterSpec(root=Path("/x"), **kwargs).validate()


def test_addresses_are_per_cluster_loopback_networks() -> None:
    assert node_ip(7, "127.9.3") == "127.9.3.7"
    assert node_ip(254, "127.9.16") == "127.9.16.254"
    assert node_ip(255, "127.9.16") == "127.9.17.1"  # a rack of racks spills into the next /24
    assert node_ip(1000, "127.9.16") == "127.9.19.238"
    with pytest.raises(ValueError, match="out of range"):
        node_ip(0)
    with pytest.raises(ValueError, match="out of range"):
        node_ip(255, "127.9.255")  # no /24 after 127.9.255
    nets = {random_network(random.Random(seed)) for seed in range(50)}
    assert len(nets) > 40
    for net in nets:
        first, a, b = net.split(".")
        assert first == "127" and 2 <= int(a) <= 254 and int(b) % 16 == 0
        node_ip(16 * 254, net)  # every cluster's block holds its largest shape
