"""A corrupted or truncated checkpoint: the agent refuses to start, says which file and what
to do, leaves the file exactly as it found it, and both documented ways out work."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_env import NODE, AgentProcess, Kubelet, NodeEnv

from agent.checkpoint import CheckpointStore
from api import names

AGENT = Path(sys.executable).parent / "compute-domain-agent"


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _flip_syntax(data: bytes) -> bytes:
    """A flipped bit that breaks the JSON ('{' -> 'z')."""
    return b"z" + data[1:]


def _flip_value(data: bytes) -> bytes:
    """A flipped byte inside a string value: still valid JSON, the checksum no longer fits."""
    i = data.index(b'"name":"') + len(b'"name":"')
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


def _empty(data: bytes) -> bytes:
    return b""


DAMAGE = {"truncated": _truncate, "flipped-syntax": _flip_syntax,
          "flipped-value": _flip_value, "empty": _empty}


@pytest.fixture
def prepared(apiserver, cluster, short_dir, tmp_path):
    """A node whose agent prepared a daemon and a channel claim, then stopped cleanly."""
    node = NodeEnv(short_dir / "n")
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kc")
    cd = cluster.compute_domain("cd1")
    cd_uid = cd["metadata"]["uid"]
    cluster.set_clique_daemon(cd_uid, node.clique_id, NODE, "Ready")
    claims = [cluster.daemon_claim("daemon", cd_uid),
              cluster.channel_claim("wl", "default", cd_uid, "All")]
    agent = AgentProcess(node, kubeconfig)
    try:
        resp = Kubelet(node).prepare(claims)
    finally:
        assert agent.terminate() == 0
    ids = {}
    for claim in claims:
        result = resp.claims[claim["metadata"]["uid"]]
        assert result.error == ""
        ids[claim["metadata"]["uid"]] = [list(d.cdi_device_ids) for d in result.devices]
    return node, kubeconfig, claims, ids


def _prepare_ids(node: NodeEnv, claims: list[dict]) -> dict[str, list[list[str]]]:
    resp = Kubelet(node).prepare(claims)
    out = {}
    for uid, result in resp.claims.items():
        assert result.error == "", result.error
        out[uid] = [list(d.cdi_device_ids) for d in result.devices]
    return out


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_checkpoint_stops_the_agent_with_the_way_out(prepared, damage):
    node, kubeconfig, claims, ids = prepared
    path = node.plugin_dir / names.CHECKPOINT_FILE
    original = path.read_bytes()
    damaged = DAMAGE[damage](original)
    path.write_bytes(damaged)
    specs_before = node.cdi_files()

    out = subprocess.run([AGENT, "plugin", *node.args(kubeconfig)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    # The error line, found as an admin of the reference finds one: klog's E header.
    errors = [ln for ln in out.stderr.splitlines() if re.match(r"E\d{4} ", ln)]
    *diff, line = errors
    if damage == "flipped-value":  # parses, but its checksum disagrees: the diff first
        [head] = diff
        assert "checkpoint failed checksum verification; unified diff" in head, errors
    else:
        assert diff == [], errors
    assert f"checkpoint is corrupted ({path}): " in line
    assert "restore it from backup" in line
    assert "if no workload pods run on this node, move it aside and restart" in line
    # Nothing was reset, rewritten or cleaned up on the strength of a file it cannot read.
    assert path.read_bytes() == damaged
    assert node.cdi_files() == specs_before
    assert not node.dra_socket.exists() and not node.registration_socket.exists()

    # Way out 1: restore the file (from backup); the claims are still prepared, same IDs.
    path.write_bytes(original)
    agent = AgentProcess(node, kubeconfig)
    try:
        assert _prepare_ids(node, claims) == ids
    finally:
        assert agent.terminate() == 0


def test_moving_a_damaged_checkpoint_aside_lets_a_node_without_workloads_start(prepared):
    node, kubeconfig, claims, ids = prepared
    path = node.plugin_dir / names.CHECKPOINT_FILE
    damaged = _truncate(path.read_bytes())
    path.write_bytes(damaged)
    aside = path.with_name("checkpoint.json.corrupt")
    path.rename(aside)

    agent = AgentProcess(node, kubeconfig)
    try:
        # A fresh, empty checkpoint; the claim specs nobody records any more are removed.
        cp = CheckpointStore(path).read()
        assert cp is not None and cp.claims == {}
        assert node.cdi_files() == [f"{names.CDI_VENDOR}-{names.CDI_CLASS_DEVICE}_base.yaml"]
        assert aside.read_bytes() == damaged  # the start-up clean-up leaves it alone
        # A fresh Prepare works (and, the IDs being derived from the claim, gives the same).
        assert _prepare_ids(node, claims) == ids
        un = Kubelet(node).unprepare(claims)
        assert all(c.error == "" for c in un.claims.values())
    finally:
        assert agent.terminate() == 0
