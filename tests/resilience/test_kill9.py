"""kill -9 of the agent at 200 random points of a stream of Prepare/Unprepare calls.

A client thread acts as kubelet: it streams Prepare and Unprepare of a daemon claim and of
two channel claims (Single, and All = 2048 channels) of one ComputeDomain over the real
unix sockets, while the agent (a real process, forked from a pre-warmed zygote so that a
restart costs milliseconds) is sent SIGKILL at a random moment drawn from a seeded RNG.
After every kill the node's disk state is checked as the next agent will find it, the
agent is restarted, the interrupted call is retried (as kubelet retries a failed call),
and every claim the checkpoint holds must Prepare again with the CDI IDs it first got.

Invariants after each kill:
* the checkpoint file verifies (both checksums);
* no IMEX channel is owned by two claims: ownership is recorded as the `channel` devices
  of PrepareCompleted entries (a PrepareStarted entry records no devices yet);
* every claim CDI spec file belongs to a claim the checkpoint holds as PrepareStarted or
  PrepareCompleted, and every spec file on disk parses (no torn write);
* temp files of cut-short writes exist only where the next start removes them, and it does;
* the node's ComputeDomain label is set whenever a channel claim is PrepareCompleted once
  the interrupted call has been retried.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from forked_agent import ForkedAgent, Zygote
from plugin_env import NODE, Kubelet, NodeEnv

from agent.checkpoint import Checkpoint, CheckpointStore
from api import names

KILLS = int(os.environ.get("KILL9_POINTS", "200"))
SEED = 20250607
CLAIM_SPEC_PREFIX = f"{names.CDI_VENDOR}-{names.CDI_CLASS_CLAIM}_"
BASE_SPEC = f"{names.CDI_VENDOR}-{names.CDI_CLASS_DEVICE}_base.yaml"
COMPLETED, STARTED = "PrepareCompleted", "PrepareStarted"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # an All spec has 2048 devices


@pytest.fixture
def zygote():
    z = Zygote()
    try:
        yield z
    finally:
        z.close()


class Stream:
    """kubelet's side: a random walk over Prepare/Unprepare that never asks for two channel
    claims of the node at once (the scheduler would not allocate that), interrupted by a
    kill; `pending` is the call that failed, which kubelet would retry."""

    def __init__(self, kubelet: Kubelet, claims: dict[str, dict[str, Any]], rng: random.Random,
                 channel_claims: set[str]) -> None:
        self.kubelet = kubelet
        self.claims = claims
        self.rng = rng
        self.channel_claims = channel_claims
        self.prepared: set[str] = set()
        self.first_ids: dict[str, list[str]] = {}
        self.pending: tuple[str, list[str]] | None = None
        self.in_flight = False
        self.calls = 0

    def next_call(self) -> tuple[str, list[str]]:
        choices: list[tuple[str, list[str]]] = []
        for key in self.claims:
            if key in self.prepared:
                choices.append(("unprepare", [key]))
            elif key not in self.channel_claims or not (self.prepared & self.channel_claims):
                choices.append(("prepare", [key]))
        if len(self.prepared) > 1:
            choices.append(("unprepare", sorted(self.prepared)))
        return self.rng.choice(choices)

    def call(self, op: str, keys: list[str], timeout: float = 10) -> None:
        """One RPC; raises grpc.RpcError when the agent dies under it."""
        claims = [self.claims[k] for k in keys]
        self.in_flight = True
        try:
            if op == "prepare":
                resp = self.kubelet.prepare(claims, timeout=timeout)
            else:
                resp = self.kubelet.unprepare(claims)
        finally:
            self.in_flight = False
        self.calls += 1
        for key, claim in zip(keys, claims, strict=True):
            uid = claim["metadata"]["uid"]
            result = resp.claims[uid]
            assert result.error == "", (op, key, result.error)
            if op == "prepare":
                ids = [i for d in result.devices for i in d.cdi_device_ids]
                assert self.first_ids.setdefault(key, ids) == ids, (key, ids)
                self.prepared.add(key)
            else:
                self.prepared.discard(key)

    def run(self, killed: threading.Event) -> None:
        """Stream calls until the agent is killed under one."""
        while True:
            op, keys = self.pending or self.next_call()
            self.pending = (op, keys)
            try:
                self.call(op, keys)
            except grpc.RpcError:
                if killed.is_set():
                    return
                raise
            self.pending = None


def temp_files(root: Path) -> list[Path]:
    """Leftovers of writes cut short: dot-files and *.tmp anywhere under the node root."""
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and (p.name.startswith(".") or p.name.endswith(".tmp")))


def check_disk(node: NodeEnv, uids: dict[str, str]) -> Checkpoint:
    """The invariants that must hold on disk whenever the agent is dead."""
    cp = CheckpointStore(node.plugin_dir / names.CHECKPOINT_FILE).read()
    assert cp is not None
    owners: dict[tuple[str, int], list[str]] = {}
    for uid, entry in cp.claims.items():
        assert entry.state != STARTED or entry.prepared is None, (uid, entry)
        for device in entry.devices():
            if device.kind == names.DEVICE_TYPE_CHANNEL:
                owners.setdefault((entry.prepared[0].domain_id, device.id), []).append(uid)
    assert all(len(o) == 1 for o in owners.values()), owners
    held = {uid for uid, e in cp.claims.items() if e.state in (COMPLETED, STARTED)}
    for path in (node.root / "cdi").iterdir():
        if path.name.startswith("."):
            continue
        spec = yaml.load(path.read_bytes(), Loader=LOADER)
        assert spec["kind"].startswith(names.CDI_VENDOR), path
        if path.name.startswith(CLAIM_SPEC_PREFIX):
            uid = path.name.removeprefix(CLAIM_SPEC_PREFIX).removesuffix(".yaml")
            assert uid in held, f"orphaned CDI spec {path.name}: checkpoint {cp.claims}"
            assert uid in uids.values()
    for path in temp_files(node.root):
        cleaned_at_start = (path.parent == node.root / "cdi"
                            or (path.parent == node.plugin_dir
                            and path.name.startswith(f".{names.CHECKPOINT_FILE}.")))
        assert cleaned_at_start, f"a temp file the next start does not remove: {path}"
    return cp


@pytest.mark.e2e
def test_kill_9_at_200_random_points(apiserver, cluster, short_dir, tmp_path, zygote):
    started = time.monotonic()
    node = NodeEnv(short_dir / "n", extra_args=["--prepare-timeout", "2s"])
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kc")
    cd = cluster.compute_domain("cd1")
    cd_uid = cd["metadata"]["uid"]
    cluster.set_clique_daemon(cd_uid, node.clique_id, NODE, "Ready")
    claims = {
        "daemon": cluster.daemon_claim("daemon", cd_uid),
        "single": cluster.channel_claim("single", "default", cd_uid, "Single"),
        "all": cluster.channel_claim("all", "default", cd_uid, "All"),
    }
    uids = {k: c["metadata"]["uid"] for k, c in claims.items()}
    kubelet = Kubelet(node)
    rng = random.Random(SEED)
    stream = Stream(kubelet, claims, random.Random(SEED + 1), {"single", "all"})
    stats = {"mid_rpc": 0, "between_rpcs": 0, "left_started": 0, "left_temp": 0}
    agent = zygote.spawn(node, kubeconfig)
    for _ in range(KILLS):
        killed = threading.Event()
        delay = rng.uniform(0.0, 0.25)
        target: ForkedAgent = agent

        def killer(target: ForkedAgent = target, killed: threading.Event = killed,
                   delay: float = delay) -> None:
            time.sleep(delay)
            killed.set()
            os.kill(target.pid, 9)
            stats["mid_rpc" if stream.in_flight else "between_rpcs"] += 1

        thread = threading.Thread(target=killer)
        thread.start()
        stream.run(killed)
        thread.join()
        agent.kill()  # reaps it (the zygote is its parent)

        cp = check_disk(node, uids)
        stats["left_started"] += any(e.state == STARTED for e in cp.claims.values())
        stats["left_temp"] += bool(temp_files(node.root))

        agent = zygote.spawn(node, kubeconfig)
        assert temp_files(node.root) == [], "the start did not remove the temp files"
        if stream.pending is not None:  # kubelet retries the call that failed
            stream.call(*stream.pending)
            stream.pending = None
        cp = CheckpointStore(node.plugin_dir / names.CHECKPOINT_FILE).read()
        assert cp is not None
        by_uid = {u: k for k, u in uids.items()}
        held = {by_uid[u] for u, e in cp.claims.items() if e.state == COMPLETED}
        assert not [u for u, e in cp.claims.items() if e.state == STARTED], cp.claims
        assert held == stream.prepared, (held, stream.prepared)
        for key in sorted(held):  # idempotent Prepare: the same CDI IDs as first seen
            stream.call("prepare", [key])
        label = cluster.node_labels(NODE).get(names.LABEL_COMPUTE_DOMAIN)
        assert label == (cd_uid if held & {"single", "all"} else None), (held, label)

    un = kubelet.unprepare(list(claims.values()))
    assert {u: c.error for u, c in un.claims.items()} == {u: "" for u in uids.values()}
    assert node.cdi_files() == [BASE_SPEC]
    assert names.LABEL_COMPUTE_DOMAIN not in cluster.node_labels(NODE)
    code = agent.terminate()
    assert code == 0, agent.log.read_text()[-3000:]
    assert not node.dra_socket.exists()
    assert temp_files(node.root) == []
    elapsed = time.monotonic() - started
    print(f"\nkill -9 x{KILLS} in {elapsed:.1f}s, {stream.calls} calls: {stats}")
    assert stats["mid_rpc"] >= KILLS // 2, stats
