"""sim/apiserver/watchers.py: an event reaches the watches filed under its object's field
value (or the value it had), the unfiled ones, and no other; the per-resource history
replays what a watch from a version missed, across compaction."""

from __future__ import annotations

import pytest

from sim.apiserver.store import ExpiredError, Store

NODES, PODS = ("", "nodes"), ("", "pods")


def _drain(watcher):
    out = []
    while not watcher.queue.empty():
        out.append(watcher.queue.get_nowait())
    return [(e.type, e.obj["metadata"]["name"]) for e in out]


def _pod(name, node, ns="default"):
    return {"kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": {"nodeName": node}}


def test_an_event_reaches_only_the_watches_that_may_select_it():
    store = Store()
    one = store.watch(NODES, None, ("metadata.name", "node-1"))
    two = store.watch(NODES, None, ("metadata.name", "node-2"))
    every = store.watch(NODES, None)
    pods = store.watch(PODS, None)
    for name in ("node-1", "node-2", "node-3"):
        store.put(NODES, {"kind": "Node", "metadata": {"name": name}})
    assert _drain(one) == [("ADDED", "node-1")]
    assert _drain(two) == [("ADDED", "node-2")]
    assert [n for _, n in _drain(every)] == ["node-1", "node-2", "node-3"]
    assert _drain(pods) == []
    store.delete(NODES, "", "node-2")
    assert (_drain(one), _drain(two)) == ([], [("DELETED", "node-2")])


def test_a_watch_sees_the_object_that_leaves_its_value_and_its_namespace_only():
    store = Store()
    on_a = store.watch(PODS, None, ("spec.nodeName", "a"))
    on_b = store.watch(PODS, "team", ("spec.nodeName", "b"))
    store.put(PODS, _pod("p", "a", ns="team"))
    store.put(PODS, _pod("p", "b", ns="team"))  # moved from a to b: both hear of it
    store.put(PODS, _pod("q", "b", ns="other"))
    assert [t for t, _ in _drain(on_a)] == ["ADDED", "MODIFIED"]
    assert _drain(on_b) == [("MODIFIED", "p")]


def test_an_unwatched_watch_gets_nothing_and_is_not_counted():
    store = Store()
    watcher = store.watch(NODES, None, ("metadata.name", "node-1"))
    assert store.watcher_count == 1
    store.unwatch(watcher)
    store.unwatch(watcher)
    store.put(NODES, {"kind": "Node", "metadata": {"name": "node-1"}})
    assert store.watcher_count == 0 and _drain(watcher) == []


def test_history_per_resource_resumes_and_expires():
    store = Store(history_window=4)
    store.put(NODES, {"metadata": {"name": "n1"}})  # rv 1
    store.put(PODS, _pod("p1", "n1"))  # rv 2
    store.put(NODES, {"metadata": {"name": "n2"}})  # rv 3
    store.put(PODS, _pod("p2", "n1", ns="x"))  # rv 4
    assert [e.rv for e in store.events_since(PODS, None, 1)] == [2, 4]
    assert [e.rv for e in store.events_since(PODS, "x", 0)] == [4]
    store.put(NODES, {"metadata": {"name": "n3"}})  # rv 5: rv 1 leaves the window
    assert [e.rv for e in store.events_since(NODES, None, 1)] == [3, 5]
    with pytest.raises(ExpiredError):
        store.events_since(NODES, None, 0)
