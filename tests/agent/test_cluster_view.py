"""The agent's view of the cluster watches only what concerns its node: its Node, and the
one clique of a domain it follows (field selector), never every ComputeDomain or clique;
domains are looked up when a claim names them, and read again for liveness decisions."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from eventually import eventually_async
from kubernetes import client

from agent.plugin.claim_errors import RetryableError
from agent.plugin.cluster import ClusterView
from api import names
from runtime.draclient import DraApi

NS = "nvidia-dra-driver"
NODE = "node-a"


def _cd(custom: client.CustomObjectsApi, name: str, namespace: str = "default") -> dict[str, Any]:
    return custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.PLURAL_COMPUTE_DOMAINS,
        {"apiVersion": names.API_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
         "metadata": {"name": name},
         "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}}})


def _clique(custom: client.CustomObjectsApi, cd_uid: str, status: str,
            node: str = NODE) -> None:
    name = names.clique_object_name(cd_uid, "c1")
    body = {"apiVersion": names.API_VERSION, "kind": names.KIND_CLIQUE,
            "metadata": {"name": name, "labels": {names.LABEL_COMPUTE_DOMAIN: cd_uid}},
            "daemons": [{"nodeName": node, "ipAddress": "10.0.0.1", "cliqueID": "c1",
                         "index": 0, "status": status}]}
    try:
        current = custom.get_namespaced_custom_object(names.GROUP, names.VERSION, NS,
                                                      names.PLURAL_CLIQUES, name)
    except client.ApiException:
        custom.create_namespaced_custom_object(names.GROUP, names.VERSION, NS,
                                               names.PLURAL_CLIQUES, body)
        return
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    custom.replace_namespaced_custom_object(names.GROUP, names.VERSION, NS,
                                            names.PLURAL_CLIQUES, name, body)


def test_follows_one_clique_and_looks_domains_up(k8s, project_crds) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    core.create_node({"metadata": {"name": NODE}})
    for ns in (NS, "other"):
        core.create_namespace({"metadata": {"name": ns}})
    mine, theirs = _cd(custom, "mine"), _cd(custom, "theirs", "other")
    uid, other_uid = mine["metadata"]["uid"], theirs["metadata"]["uid"]

    async def scenario() -> None:
        view = ClusterView(k8s, DraApi(k8s), NODE, NS, cliques_enabled=True)
        view.start()
        try:
            await view.wait_synced(10)
            # Looked up in the claim's namespace, once; a second ask costs nothing.
            mine = await view.compute_domain(uid, "default")
            assert mine is not None and mine.name == "mine"
            assert await view.compute_domain(uid, "default") is not None
            assert view.domains.lists == 1
            # A domain of another namespace is still found, so Prepare can say so.
            found = await view.compute_domain(other_uid, "default")
            assert found is not None and found.namespace == "other"
            known = view.known_domain(uid)
            assert known is not None and known.status is None

            await view.follow(uid, "c1")
            assert view.followed == [uid] and not view.node_ready(uid, "c1")
            assert view.daemon_entry(uid, "c1") == "clique c1 has no entries yet"
            # The clique holds another node's entry, not ours yet: not ready (the clique's
            # watch holds cliques, not the domain).
            since = view.generation()
            await asyncio.to_thread(_clique, custom, uid, names.STATUS_READY, "node-b")
            await view.wait_for_change(since, 10)
            informer = view._followed[uid]
            assert await informer.wait_for(lambda: bool(informer.items), 10)
            assert not view.node_ready(uid, "c1")
            since = view.generation()
            await asyncio.to_thread(_clique, custom, other_uid, names.STATUS_READY)
            await asyncio.to_thread(_clique, custom, uid, names.STATUS_READY)
            await view.wait_for_change(since, 10)
            informer = view._followed[uid]
            assert await informer.wait_for(lambda: view.node_ready(uid, "c1"), 10)
            # The other domain's clique never reached this node's watch.
            assert list(informer.items) == [names.clique_object_name(uid, "c1")]

            # Deleted: a refresh (cleanup, label repair) finds it gone.
            await asyncio.to_thread(custom.delete_namespaced_custom_object, names.GROUP,
                                    names.VERSION, "default", names.PLURAL_COMPUTE_DOMAINS,
                                    "mine")
            assert view.domains.live(uid)  # as last read
            await view.domains.refresh([uid, "never-existed"])
            assert not view.domains.live(uid) and not view.domains.maybe_live(uid)
            assert not view.domains.maybe_live("never-existed")
            assert view.domains.maybe_live("not-asked-about")
            view.unfollow(uid)
            assert view.followed == []
        finally:
            view.stop()

    asyncio.run(scenario())


def test_the_label_is_written_only_when_the_watched_node_lacks_it(k8s, project_crds) -> None:
    core = client.CoreV1Api(k8s)
    core.create_node({"metadata": {"name": NODE,
                                   "labels": {names.LABEL_COMPUTE_DOMAIN: "cd-1"}}})
    writes: list[str] = []

    async def scenario() -> None:
        view = ClusterView(k8s, DraApi(k8s), NODE, NS, cliques_enabled=True)

        async def add(cd_uid: str) -> None:
            writes.append(cd_uid)

        view.node.add_cd_label = add  # type: ignore[method-assign]
        view.start()
        try:
            await view.wait_synced(10)
            for _ in range(3):  # a waiting Prepare's wake-ups
                await view.add_cd_label("cd-1")
            await view.add_cd_label("cd-2")
        finally:
            view.stop()

    asyncio.run(scenario())
    assert writes == ["cd-2"]


def test_a_watch_nobody_waits_on_ends_after_the_grace(k8s, project_crds) -> None:
    core = client.CoreV1Api(k8s)
    core.create_node({"metadata": {"name": NODE}})
    core.create_namespace({"metadata": {"name": NS}})

    async def scenario() -> None:
        view = ClusterView(k8s, DraApi(k8s), NODE, NS, cliques_enabled=True)
        view.start()
        try:
            await view.follow("cd-1", "c1")
            await view.follow("cd-2", "c1")
            view.done_waiting("cd-1", grace=0.05)
            view.done_waiting("cd-2", grace=0.05)
            await view.follow("cd-2", "c1")  # asked again: cd-2's watch stays
            informer = view._followed["cd-1"]
            await eventually_async(lambda: "cd-1" not in view.followed, "cd-1's watch ended",
                                   interval=0.05)
            assert view.followed == ["cd-2"] and informer._stop.is_set()
        finally:
            view.stop()

    asyncio.run(scenario())


class _CountingCore:
    """The agent's core/v1 client, counting the Node reads and patches it makes."""

    def __init__(self, core: Any) -> None:
        self._core = core
        self.reads = 0
        self.patches = 0

    def read_node(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return self._core.read_node(*args, **kwargs)

    def patch_node(self, *args: Any, **kwargs: Any) -> Any:
        self.patches += 1
        return self._core.patch_node(*args, **kwargs)


def _label(core: client.CoreV1Api) -> str | None:
    return (core.read_node(NODE).metadata.labels or {}).get(names.LABEL_COMPUTE_DOMAIN)


def _watched_label(view: ClusterView) -> str | None:
    node = view.node.watched()
    return node.label(names.LABEL_COMPUTE_DOMAIN) if node is not None else None


@contextlib.asynccontextmanager
async def _counted_view(k8s: Any) -> AsyncIterator[tuple[ClusterView, _CountingCore]]:
    """A started, synced ClusterView of NODE whose Node reads and patches are counted."""
    view = ClusterView(k8s, DraApi(k8s), NODE, NS, cliques_enabled=True)
    counted = _CountingCore(view.node._core)
    view.node._core = counted  # type: ignore[assignment]
    view.start()
    try:
        await view.wait_synced(10)
        yield view, counted
    finally:
        view.stop()


def test_a_label_write_starts_from_the_watched_node(k8s, project_crds) -> None:
    """Prepare's label write is one PATCH, conditional on the resourceVersion the watch
    saw; a watch behind the Node costs a 409 and a GET, never a wrong decision."""
    core = client.CoreV1Api(k8s)
    core.create_node({"metadata": {"name": NODE}})

    async def scenario() -> None:
        async with _counted_view(k8s) as (view, counted):
            await view.add_cd_label("cd-1")
            assert (counted.reads, counted.patches) == (0, 1)
            assert await asyncio.to_thread(_label, core) == "cd-1"

            # The watch still shows cd-1's label, which is gone: a decision not to write
            # (another domain's label) is never taken on the watch's copy, but on a read.
            assert await view.node_object.wait_for(lambda: _watched_label(view) == "cd-1", 10)
            stale = view.node.watched()
            await view.node.remove_cd_label("cd-1")
            view.node.watched = lambda: stale
            counted.reads = counted.patches = 0
            await view.node.add_cd_label("cd-2")
            assert (counted.reads, counted.patches) == (1, 1)
            assert await asyncio.to_thread(_label, core) == "cd-2"

    asyncio.run(scenario())


def test_a_stale_watch_never_writes_over_a_newer_node(k8s, project_crds) -> None:
    core = client.CoreV1Api(k8s)
    core.create_node({"metadata": {"name": NODE}})

    async def scenario() -> None:
        async with _counted_view(k8s) as (view, counted):
            unlabeled = view.node.watched()
            assert unlabeled is not None
            await asyncio.to_thread(core.patch_node, NODE, {"metadata": {"labels": {
                names.LABEL_COMPUTE_DOMAIN: "other-cd"}}})
            view.node.watched = lambda: unlabeled  # the watch has not seen that yet
            with pytest.raises(RetryableError, match="different ComputeDomain"):
                await view.node.add_cd_label("cd-1")
            assert (counted.reads, counted.patches) == (1, 1)  # the 409, then the GET
            assert await asyncio.to_thread(_label, core) == "other-cd"

    asyncio.run(scenario())


def test_an_unprepared_domain_is_watched_until_the_grace_ends(k8s, project_crds) -> None:
    """The last Unprepare of a domain leaves its watch to the grace: a Prepare of the
    domain right after it (a pod replaced on the node) finds it listed."""
    core = client.CoreV1Api(k8s)
    core.create_node({"metadata": {"name": NODE}})
    core.create_namespace({"metadata": {"name": NS}})

    async def scenario() -> None:
        view = ClusterView(k8s, DraApi(k8s), NODE, NS, cliques_enabled=True)
        view.start()
        try:
            await view.wait_synced(10)
            await view.follow("cd-1", "c1")
            informer = view._followed["cd-1"]
            await view.remove_cd_label("cd-1")
            assert view.followed == ["cd-1"]
            await view.follow("cd-1", "c1")  # the next Prepare: the same, listed watch
            assert view._followed["cd-1"] is informer and informer.synced.is_set()
            view.follow_grace_s = 0.05
            await view.remove_cd_label("cd-1")
            await eventually_async(lambda: view.followed == [], "cd-1's watch ended",
                                   interval=0.05)
            assert informer.stopped
        finally:
            view.stop()

    asyncio.run(scenario())
