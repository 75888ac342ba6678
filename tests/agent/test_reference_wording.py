"""The kubelet plugin says what the reference's says, where its tests and runbooks grep:
each line is provoked through the real gRPC API and matched against the pattern the
inventory (tests/data/reference-wording.yaml) took from the reference's source, at the
inventory's verbosity."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from plugin_env import NODE, AgentThread, Kubelet, NodeEnv, waiting_reason

from api import names
from runtime.logsetup import v_level

INVENTORY = Path(__file__).parents[1] / "data" / "reference-wording.yaml"


def entries() -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in yaml.safe_load(INVENTORY.read_text())["entries"]}


ENTRIES = entries()


def said(caplog: pytest.LogCaptureFixture, entry_id: str) -> list[re.Match[str]]:
    """The agent's records matching the inventory entry, each checked to be logged at the
    entry's verbosity (errors at ERROR: the reference's klog.Errorf)."""
    entry = ENTRIES[entry_id]
    pattern = re.compile(entry["pattern"])
    found = []
    for record in caplog.records:
        match = pattern.search(record.getMessage())
        if match is None:
            continue
        if entry_id.endswith(("permanent-error-log", "permanent-error")):
            assert record.levelno == logging.ERROR, record
        else:
            assert record.levelno == v_level(entry["verbosity"]), (entry_id, record.levelno)
        found.append(match)
    return found


@pytest.fixture
def node(short_dir) -> NodeEnv:
    return NodeEnv(short_dir / "node", extra_args=["--prepare-timeout", "1s"])


@pytest.fixture
def agent(apiserver, cluster, node, tmp_path, caplog):
    caplog.set_level(v_level(6))
    thread = AgentThread(node.config(apiserver.write_kubeconfig(tmp_path / "kc")))
    try:
        yield thread
    finally:
        thread.close()


@pytest.fixture
def kubelet(agent, node) -> Kubelet:
    return Kubelet(node)


def test_a_permanent_prepare_error_says_permanent_error(kubelet, cluster, caplog):
    params = {"apiVersion": names.API_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
              "domainID": "x", "unexpectedField": "x"}
    claim = cluster.claim("bad", "default", NODE, device="channel-0", request="channel",
                          parameters=params)
    uid = claim["metadata"]["uid"]
    error = kubelet.prepare([claim]).claims[uid].error
    # What kubelet puts into the pod's FailedPrepareDynamicResources Event.
    [event] = [re.search(ENTRIES["kp-prepare-error-event"]["pattern"], error)]
    assert event is not None, error
    assert (event["ns"], event["name"], event["uid"]) == ("default", "bad", uid)
    [logged] = said(caplog, "kp-prepare-permanent-error-log")
    assert logged["uid"] == uid
    # The bats test's second grep.
    assert 'strict decoding error: unknown field "unexpectedField"' in logged["error"]


def test_prepare_unprepare_and_the_noop_lines(kubelet, cluster, node, caplog):
    uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    cluster.set_clique_daemon(uid, node.clique_id, NODE, "Ready")
    claim = cluster.channel_claim("wl", "default", uid)
    ref = f"default/wl:{claim['metadata']['uid']}"
    assert kubelet.prepare([claim]).claims[claim["metadata"]["uid"]].error == ""
    [prepared] = said(caplog, "kp-prepared-devices")
    assert f"{prepared['ns']}/{prepared['name']}:{prepared['uid']}" == ref
    assert "channel-0" in prepared["devices"]
    assert kubelet.unprepare([claim]).claims[claim["metadata"]["uid"]].error == ""
    [unprepared] = said(caplog, "kp-unprepared-devices")
    assert unprepared["uid"] == claim["metadata"]["uid"]
    assert said(caplog, "kp-deleted-claim-from-checkpoint")
    assert kubelet.unprepare([claim]).claims[claim["metadata"]["uid"]].error == ""
    [noop] = said(caplog, "kp-unprepare-noop-not-found")
    assert noop["uid"] == claim["metadata"]["uid"]


def test_the_stale_claim_cleanup_lines(agent, kubelet, cluster, caplog):
    """The reference's stale-RC test (test_cd_misc.bats), on our PrepareStarted entry: a
    claim whose Prepare still waits is kept while it exists, unprepared (and marked
    PrepareAborted) once it is gone; its next Unprepare is a noop."""
    uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    claim = cluster.channel_claim("wl", "default", uid)
    claim_uid = claim["metadata"]["uid"]
    waiting_reason(kubelet.prepare([claim], timeout=30), claim_uid)
    agent.run(agent.app.maintenance.run_once())
    [kept] = said(caplog, "kp-cleanup-not-stale")
    assert kept["uid"] == claim_uid
    cluster.resource.delete_namespaced_resource_claim("wl", "default")
    agent.run(agent.app.maintenance.run_once())
    [stale] = said(caplog, "kp-cleanup-stale-not-found")
    [marked] = said(caplog, "kp-marked-prepare-aborted")
    [unprepared] = said(caplog, "kp-cleanup-unprepared-stale")
    assert stale["uid"] == marked["uid"] == unprepared["uid"] == claim_uid
    assert kubelet.unprepare([claim]).claims[claim_uid].error == ""
    [noop] = said(caplog, "kp-unprepare-noop-aborted")
    assert noop["uid"] == claim_uid
