"""Clique membership against the API emulator with the real kubernetes client."""

from __future__ import annotations

import asyncio
import logging
import random
import time

import pytest
from kubernetes import client

from agent.daemon.clique_membership import CliqueMembership
from agent.daemon.legacy_clique_membership import LegacyMembership
from agent.daemon.membership_base import CliqueFullError, MembershipError
from api import names

NS = "default"
CD_UID = "0f3c2a9e-1b2c-4d5e-8f90-123456789abc"
CLIQUE = "7b1f0d3c-aaaa-bbbb-cccc-000000000001.3"
NAME = names.clique_object_name(CD_UID, CLIQUE)


def make_pod(k8s, name: str) -> str:
    pod = client.CoreV1Api(k8s).create_namespaced_pod(
        NS,
        {
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "imex"}]},
        },
    )
    return pod.metadata.uid


def member(k8s, node: str, pod: str = "", **kw) -> CliqueMembership:
    pod = pod or f"daemon-{node}"
    return CliqueMembership(
        k8s,
        namespace=NS,
        cd_uid=CD_UID,
        clique_id=CLIQUE,
        node_name=node,
        pod_name=pod,
        pod_uid=make_pod(k8s, pod),
        rng=random.Random(node),
        **kw,
    )


def get_clique(k8s) -> dict:
    return client.CustomObjectsApi(k8s).get_namespaced_custom_object(
        names.GROUP, names.VERSION, NS, names.PLURAL_CLIQUES, NAME
    )


def by_node(clique: dict) -> dict[str, dict]:
    return {d["nodeName"]: d for d in clique.get("daemons") or []}


def test_join_creates_then_indices_rejoin_gap_and_leave(k8s, project_crds):
    a, b, c = member(k8s, "node-a"), member(k8s, "node-b"), member(k8s, "node-c")

    async def scenario() -> None:
        assert await a.join("10.0.0.1") == 0
        obj = get_clique(k8s)
        assert obj["metadata"]["labels"] == {
            names.LABEL_COMPUTE_DOMAIN: CD_UID,
            names.LABEL_CLIQUE_ID: CLIQUE,
        }
        assert obj["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Pod", "name": "daemon-node-a", "uid": a.pod_uid}
        ]
        assert obj["daemons"] == [
            {
                "nodeName": "node-a",
                "ipAddress": "10.0.0.1",
                "cliqueID": CLIQUE,
                "index": 0,
                "status": "NotReady",
            }
        ]

        assert await b.join("10.0.0.2") == 1
        assert await c.join("10.0.0.3") == 2
        refs = get_clique(k8s)["metadata"]["ownerReferences"]
        assert [r["uid"] for r in refs] == [a.pod_uid, b.pod_uid, c.pod_uid]

        # Rejoin with the same IP: no write, status kept.
        await b.set_status(True)
        writes = b.writes
        assert await b.join("10.0.0.2") == 1
        assert b.writes == writes
        assert by_node(get_clique(k8s))["node-b"]["status"] == "Ready"
        # Rejoin (replacement pod) with a new IP: same index, new IP, back to NotReady.
        b2 = member(k8s, "node-b", pod="daemon-node-b-2")
        assert await b2.join("10.0.1.2") == 1
        entry = by_node(get_clique(k8s))["node-b"]
        assert (entry["ipAddress"], entry["index"], entry["status"]) == ("10.0.1.2", 1, "NotReady")
        # The old pod's leave no longer matches (the entry carries the new IP).
        await b.leave()
        assert "node-b" in by_node(get_clique(k8s))

        # Node b leaves: its index is the gap the next joiner fills.
        await b2.leave()
        assert set(by_node(get_clique(k8s))) == {"node-a", "node-c"}
        assert await member(k8s, "node-d").join("10.0.0.4") == 1
        await c.leave()
        await c.leave()  # a missing entry is fine
        assert {d["nodeName"]: d["index"] for d in get_clique(k8s)["daemons"]} == {
            "node-a": 0,
            "node-d": 1,
        }
        assert sorted(p["nodeName"] for p in await a.peers()) == ["node-a", "node-d"]

    asyncio.run(scenario())


def test_a_deleted_clique_comes_back_with_every_index_kept(k8s, project_crds):
    """Whoever deletes the clique object (an admin, a cleanup script): the daemons rejoin,
    in any order, at the indices they held, so no peer's DNS name moves and no IMEX
    restarts; a newcomer takes a free index, never a survivor's."""
    daemons = [member(k8s, f"node-{i}") for i in range(4)]

    async def scenario() -> None:
        for i, daemon in enumerate(daemons):
            assert await daemon.join(f"10.0.0.{i + 1}") == i
        await daemons[1].leave()  # a gap: index 1 is free
        client.CustomObjectsApi(k8s).delete_namespaced_custom_object(
            names.GROUP, names.VERSION, NS, names.PLURAL_CLIQUES, NAME)
        for i in (3, 2, 0):  # the last one first: it creates the clique, keeping index 3
            assert await daemons[i].join(f"10.0.0.{i + 1}") == i
        assert await member(k8s, "node-new").join("10.0.0.9") == 1
        assert {d["nodeName"]: d["index"] for d in get_clique(k8s)["daemons"]} == {
            "node-3": 3, "node-2": 2, "node-0": 0, "node-new": 1}
        # Its old index taken meanwhile, a rejoining daemon gets the smallest free one.
        assert await daemons[1].join("10.0.0.2") == 4

    asyncio.run(scenario())


def test_leave_without_clique_is_fine_and_foreign_clique_is_refused(k8s, project_crds):
    a = member(k8s, "node-a")

    async def scenario() -> None:
        await a.leave()
        assert await a.peers() == []
        with pytest.raises(MembershipError, match="not yet listed"):
            await a.set_status(True)
        client.CustomObjectsApi(k8s).create_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            NS,
            names.PLURAL_CLIQUES,
            {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND_CLIQUE,
                "metadata": {"name": NAME, "labels": {names.LABEL_COMPUTE_DOMAIN: "other"}},
                "daemons": [],
            },
        )
        with pytest.raises(MembershipError, match="not this domain"):
            await a.join("10.0.0.1")

    asyncio.run(scenario())


def test_set_status_writes_once_per_transition(k8s, project_crds):
    a = member(k8s, "node-a")

    async def scenario() -> None:
        await a.join("10.0.0.1")
        base = a.writes
        for ready in (True, True, True, False, False, True):
            await a.set_status(ready)
        assert a.writes == base + 3
        assert by_node(get_clique(k8s))["node-a"]["status"] == "Ready"

    asyncio.run(scenario())


def test_eighteen_concurrent_joiners_then_the_nineteenth_is_refused(apiserver, k8s, project_crds):
    members = [member(k8s, f"node-{i:02d}") for i in range(18)]
    extra = member(k8s, "node-18")
    stats = apiserver.server.stats
    requests_before, conflicts_before = dict(stats.requests), stats.conflicts

    async def scenario() -> tuple[list[int], list[int]]:
        indices = list(await asyncio.gather(
            *(m.join(f"10.1.0.{i}") for i, m in enumerate(members))))
        appends = [m.writes for m in members]
        # Each daemon's readiness flip (supervisor.py) also writes the index it holds.
        await asyncio.gather(*(m.set_status(True) for m in members))
        return indices, appends

    start = time.monotonic()
    indices, appends = asyncio.run(scenario())
    elapsed = time.monotonic() - start
    # Every joiner knew its index from its own append: unique, the lowest ones.
    assert sorted(indices) == list(range(18))
    assert appends == [1] * 18
    daemons = get_clique(k8s)["daemons"]
    assert sorted(d["index"] for d in daemons) == list(range(18))
    assert {d["nodeName"]: d["index"] for d in daemons} == {
        m.node_name: i for m, i in zip(members, indices, strict=True)
    }
    assert {d["status"] for d in daemons} == {"Ready"}

    writes = sum(m.writes for m in members)
    conflicts = sum(m.conflicts for m in members)
    requests = {v: n - requests_before.get(v, 0) for v, n in stats.requests.items()}
    print(
        f"\n18 joiners: writes={writes} conflicts={conflicts} "
        f"server 409s={stats.conflicts - conflicts_before} requests={requests} "
        f"in {elapsed:.2f}s"
    )
    # No update races at all: each joiner appends or edits its own entry by a JSON patch,
    # never a whole-object replace (no resourceVersion precondition, no 409 on update).
    assert stats.conflicts - conflicts_before == 0
    assert requests.get("update", 0) == 0
    # The only 409s are the lost creates: the one creator wins, the others append.
    assert conflicts == requests.get("create", 0) - 1 <= 17
    # Two writes each, however many appended at once: the append and the readiness flip
    # (which carries the index a contested append holds).
    assert writes == 2 * 18
    with pytest.raises(CliqueFullError) as err:
        asyncio.run(extra.join("10.1.0.18"))
    message = str(err.value)
    assert "18" in message and "max-nodes-per-imex-domain" in message
    assert names.ENV_MAX_NODES_PER_IMEX_DOMAIN in message
    assert len(get_clique(k8s)["daemons"]) == 18


def test_small_max_nodes(k8s, project_crds):
    async def scenario() -> None:
        await member(k8s, "a", max_nodes=2).join("10.0.0.1")
        await member(k8s, "b", max_nodes=2).join("10.0.0.2")
        with pytest.raises(CliqueFullError, match="maximum of 2"):
            await member(k8s, "c", max_nodes=2).join("10.0.0.3")

    asyncio.run(scenario())


def test_peer_watch_fires_when_another_node_joins(k8s, project_crds):
    a, b = member(k8s, "node-a"), member(k8s, "node-b")

    async def scenario() -> None:
        seen: list[list[dict]] = []
        changed = asyncio.Event()

        async def on_update(daemons: list[dict]) -> None:
            seen.append(daemons)
            changed.set()

        async def wait_for(n: int) -> None:
            while not seen or len(seen[-1]) != n:
                changed.clear()
                await asyncio.wait_for(changed.wait(), 5)

        task = asyncio.create_task(a.watch(on_update))
        await a.join("10.0.0.1")
        await wait_for(1)
        await b.join("10.0.0.2")
        await wait_for(2)
        assert sorted(d["ipAddress"] for d in seen[-1]) == ["10.0.0.1", "10.0.0.2"]
        count = len(seen)
        await b.leave()
        await wait_for(1)
        assert len(seen) == count + 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


# --- legacy path: ComputeDomain.status.nodes ------------------------------------------


def make_cd(k8s, num_nodes: int = 3) -> dict:
    return client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        names.GROUP,
        names.VERSION,
        NS,
        names.PLURAL_COMPUTE_DOMAINS,
        {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": "cd"},
            "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": "t"}}},
        },
    )


def legacy(k8s, cd: dict, node: str, clique: str = CLIQUE, **kw) -> LegacyMembership:
    return LegacyMembership(
        k8s,
        cd_namespace=NS,
        cd_name="cd",
        cd_uid=cd["metadata"]["uid"],
        clique_id=clique,
        node_name=node,
        **kw,
    )


def cd_nodes(k8s) -> dict[str, dict]:
    cd = client.CustomObjectsApi(k8s).get_namespaced_custom_object(
        names.GROUP, names.VERSION, NS, names.PLURAL_COMPUTE_DOMAINS, "cd"
    )
    return {n["name"]: n for n in cd["status"]["nodes"]}


def test_legacy_join_index_status_leave(k8s, project_crds):
    cd = make_cd(k8s)
    a, b = legacy(k8s, cd, "node-a", max_nodes=2), legacy(k8s, cd, "node-b", max_nodes=2)
    other = legacy(k8s, cd, "node-x", clique="other.1", max_nodes=2)

    async def scenario() -> None:
        assert await a.join("10.0.0.1") == 0
        assert await other.join("10.0.9.1") == 0  # indices are per clique
        assert await b.join("10.0.0.2") == 1
        with pytest.raises(CliqueFullError):
            await legacy(k8s, cd, "node-c", max_nodes=2).join("10.0.0.3")
        nodes = cd_nodes(k8s)
        assert nodes["node-a"] == {
            "name": "node-a",
            "ipAddress": "10.0.0.1",
            "cliqueID": CLIQUE,
            "index": 0,
            "status": "NotReady",
        }
        assert nodes["node-x"]["index"] == 0

        base = a.writes
        await a.set_status(True)
        await a.set_status(True)
        assert a.writes == base + 1
        assert cd_nodes(k8s)["node-a"]["status"] == "Ready"

        assert await a.join("10.0.0.1") == 0  # same IP: no write
        assert a.writes == base + 1
        assert sorted(p["name"] for p in await a.peers()) == ["node-a", "node-b"]

        await b.leave()
        assert set(cd_nodes(k8s)) == {"node-a", "node-x"}
        assert await legacy(k8s, cd, "node-c").join("10.0.0.3") == 1  # the gap

    asyncio.run(scenario())


def test_legacy_concurrent_joiners_and_wait_for_num_nodes(k8s, project_crds):
    cd = make_cd(k8s, num_nodes=6)
    members = [legacy(k8s, cd, f"node-{i}", rng=random.Random(i)) for i in range(6)]

    async def scenario() -> None:
        waiter = asyncio.create_task(members[0].wait_for_num_nodes(timeout=10))
        indices = await asyncio.gather(*(m.join(f"10.2.0.{i}") for i, m in enumerate(members)))
        assert sorted(indices) == list(range(6))
        assert len(await waiter) == 6
        assert sum(m.writes for m in members) == 6
        with pytest.raises(TimeoutError):
            await members[0].wait_for_num_nodes(7, timeout=0.3)

    asyncio.run(scenario())


def test_legacy_refuses_a_recreated_domain(k8s, project_crds):
    make_cd(k8s)
    stale = LegacyMembership(
        k8s,
        cd_namespace=NS,
        cd_name="cd",
        cd_uid="not-the-uid",
        clique_id=CLIQUE,
        node_name="node-a",
    )

    async def scenario() -> None:
        with pytest.raises(MembershipError, match="recreated"):
            await stale.join("10.0.0.1")
        await stale.leave()  # not ours: nothing to remove, no error
        assert await stale.peers() == []

    asyncio.run(scenario())
    status = (
        client.CustomObjectsApi(k8s)
        .get_namespaced_custom_object(
            names.GROUP, names.VERSION, NS, names.PLURAL_COMPUTE_DOMAINS, "cd"
        )
        .get("status")
        or {}
    )
    assert not status.get("nodes")


def _create_clique(k8s, daemons=None, owner_refs=None) -> None:
    metadata = {"name": NAME, "labels": {names.LABEL_COMPUTE_DOMAIN: CD_UID,
                                         names.LABEL_CLIQUE_ID: CLIQUE}}
    if owner_refs is not None:
        metadata["ownerReferences"] = owner_refs
    body = {"apiVersion": names.API_VERSION, "kind": names.KIND_CLIQUE, "metadata": metadata}
    if daemons is not None:
        body["daemons"] = daemons
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        names.GROUP, names.VERSION, NS, names.PLURAL_CLIQUES, body)


def test_a_contested_index_is_settled_by_list_order_and_written_with_readiness(
        k8s, project_crds):
    """Two daemons that appended at once with one index: the earlier entry keeps it, the
    later one holds the next free one at once (no write of its own) and writes it with its
    readiness flip; the earlier one writes nothing but its readiness."""
    a, b = member(k8s, "node-a"), member(k8s, "node-b")
    refs = [{"apiVersion": "v1", "kind": "Pod", "name": "daemon-node-a", "uid": a.pod_uid},
            {"apiVersion": "v1", "kind": "Pod", "name": "daemon-node-b", "uid": b.pod_uid}]
    entry = {"cliqueID": CLIQUE, "index": 0, "status": "NotReady"}
    _create_clique(k8s, [{**entry, "nodeName": "node-a", "ipAddress": "10.0.0.1"},
                         {**entry, "nodeName": "node-b", "ipAddress": "10.0.0.2"}], refs)
    daemons = get_clique(k8s)["daemons"]
    assert (a.settled_index(daemons), b.settled_index(daemons)) == (0, 1)

    async def scenario() -> None:
        assert await a.join("10.0.0.1") == 0
        assert await b.join("10.0.0.2") == 1
        assert a.writes == b.writes == 0  # both entries are in place: nothing to write
        await b.set_status(True)
        assert b.writes == 1

    asyncio.run(scenario())
    assert [(d["nodeName"], d["index"], d["status"]) for d in get_clique(k8s)["daemons"]] == [
        ("node-a", 0, "NotReady"), ("node-b", 1, "Ready")]


def test_losers_of_one_round_hold_different_indices_and_a_new_joiner_the_next(
        k8s, project_crds):
    members = [member(k8s, f"node-{i}") for i in range(4)]
    entry = {"cliqueID": CLIQUE, "index": 0, "status": "NotReady"}
    _create_clique(k8s, [{**entry, "nodeName": m.node_name, "ipAddress": f"10.0.0.{i + 1}"}
                         for i, m in enumerate(members)],
                   [{"apiVersion": "v1", "kind": "Pod", "name": m.pod_name, "uid": m.pod_uid}
                    for m in members])
    daemons = get_clique(k8s)["daemons"]
    # Every reader settles the same list the same way: 0, 1, 2, 3.
    assert [m.settled_index(daemons) for m in members] == [0, 1, 2, 3]
    # A joiner reading this list takes 4, not the 1 no entry has written yet.
    assert asyncio.run(member(k8s, "node-new").join("10.0.0.9")) == 4


def test_a_clique_without_lists_is_joined_by_a_whole_update(k8s, project_crds):
    """A clique another writer left without `daemons` or ownerReferences (nothing to append
    a JSON patch to): the join falls back to one resourceVersion-checked replace."""
    _create_clique(k8s)
    a = member(k8s, "node-a")
    assert asyncio.run(a.join("10.0.0.1")) == 0
    obj = get_clique(k8s)
    assert [r["uid"] for r in obj["metadata"]["ownerReferences"]] == [a.pod_uid]
    assert by_node(obj)["node-a"]["ipAddress"] == "10.0.0.1" and a.writes == 1


def test_status_and_leave_patch_only_our_entry_wherever_it_moved(k8s, project_crds):
    a, b, c = member(k8s, "node-a"), member(k8s, "node-b"), member(k8s, "node-c")

    async def scenario() -> None:
        for i, m in enumerate((a, b, c)):
            await m.join(f"10.0.0.{i + 1}")
        await a.leave()  # every later entry moves up one position
        await c.set_status(True)
        await b.set_status(True)
        assert {n: d["status"] for n, d in by_node(get_clique(k8s)).items()} == {
            "node-b": "Ready", "node-c": "Ready"}
        await c.leave()
        assert list(by_node(get_clique(k8s))) == ["node-b"]

    asyncio.run(scenario())


def test_leaving_says_the_references_words_once_removed(k8s, project_crds, caplog):
    """'Successfully removed daemon with IP <ip> from CDClique <name> (from ComputeDomain
    <ns>/<name>)', as the reference's daemon logs it and its test_cd_misc.bats greps, only
    for a leave that removed an entry."""
    caplog.set_level(logging.INFO)
    daemon = member(k8s, "node-a", cd_name="imex-channel-injection", cd_namespace="default")

    async def scenario() -> None:
        await daemon.join("10.0.0.1")
        await daemon.leave()
        await daemon.leave()  # nothing left to remove: nothing said

    asyncio.run(scenario())
    said = [r.getMessage() for r in caplog.records if "Successfully removed" in r.getMessage()]
    assert said == [f"Successfully removed daemon with IP 10.0.0.1 from CDClique {NAME} "
                    "(from ComputeDomain default/imex-channel-injection)"]
