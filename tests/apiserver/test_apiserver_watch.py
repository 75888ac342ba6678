"""List and watch: selectors, paging, resourceVersions, bookmarks, 410 Gone, faults."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import pytest
from eventually import eventually
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

# Every namespace has it, as on a cluster (the root CA publisher).
ROOT_CA = "kube-root-ca.crt"


def make(core, name, labels=None, ns="default"):
    return core.create_namespaced_config_map(
        ns, {"metadata": {"name": name, "labels": labels or {}}}
    )


def test_label_and_field_selectors(k8s):
    core = client.CoreV1Api(k8s)
    make(core, "a", {"tier": "front", "env": "prod"})
    make(core, "b", {"tier": "back", "env": "prod"})
    make(core, "c", {"tier": "back"})

    def names(**kw):
        listed = core.list_namespaced_config_map("default", **kw).items
        return [c.metadata.name for c in listed if c.metadata.name != ROOT_CA]

    assert names(label_selector="tier=back") == ["b", "c"]
    assert names(label_selector="env!=prod") == ["c"]
    assert names(label_selector="tier in (front,back),env") == ["a", "b"]
    assert names(label_selector="!env") == ["c"]
    assert names(label_selector="tier notin (back)") == ["a"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b") == ["a", "c"]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default", field_selector="spec.nodeName=x")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == (
        '"spec.nodeName" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default", label_selector="a in (")
    assert err.value.status == 400


def test_pod_field_selector_by_node(k8s):
    core = client.CoreV1Api(k8s)
    for name, node in [("p1", "n1"), ("p2", "n2"), ("p3", "n1")]:
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": name},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            },
        )
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1")
    assert [p.metadata.name for p in pods.items] == ["p1", "p3"]


def test_paging_with_limit_and_continue(k8s):
    core = client.CoreV1Api(k8s)
    for i in range(7):
        make(core, f"cm-{i}")
    seen, token = [], None
    while True:
        page = core.list_namespaced_config_map("default", limit=3, _continue=token)
        seen += [c.metadata.name for c in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count > 0
    assert seen == [f"cm-{i}" for i in range(7)] + [ROOT_CA]  # "cm-" < "kube-"


def stream(k8s, **kwargs):
    core = client.CoreV1Api(k8s)
    w = watch.Watch()
    return w, w.stream(core.list_namespaced_config_map, "default", **kwargs)


def test_watch_from_resource_version_replays_history(k8s):
    core = client.CoreV1Api(k8s)
    start = core.list_namespaced_config_map("default").metadata.resource_version
    make(core, "w1")
    cm = make(core, "w2")
    cm.data = {"x": "y"}
    core.replace_namespaced_config_map("w2", "default", cm)
    core.delete_namespaced_config_map("w1", "default")
    _w, events = stream(k8s, resource_version=start, timeout_seconds=2)
    got = [(e["type"], e["object"].metadata.name) for e in events]
    assert got == [("ADDED", "w1"), ("ADDED", "w2"), ("MODIFIED", "w2"), ("DELETED", "w1")]


def test_watch_without_resource_version_starts_with_current_state(k8s):
    core = client.CoreV1Api(k8s)
    make(core, "existing")
    w, events = stream(k8s, timeout_seconds=1)
    first = next(events)
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "existing")
    w.stop()


def test_watch_selector_transitions(k8s):
    core = client.CoreV1Api(k8s)
    start = core.list_namespaced_config_map("default").metadata.resource_version
    cm = make(core, "t", {"pick": "no"})
    cm.metadata.labels = {"pick": "yes"}
    cm = core.replace_namespaced_config_map("t", "default", cm)
    cm.metadata.labels = {"pick": "no"}
    core.replace_namespaced_config_map("t", "default", cm)
    _w, events = stream(k8s, resource_version=start, label_selector="pick=yes", timeout_seconds=1)
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]


def test_watch_delivers_live_events_and_bookmarks(apiserver, k8s):
    apiserver.call(lambda: setattr(apiserver.server, "_bookmark_interval", 0.1))
    core = client.CoreV1Api(k8s)
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    received = []

    def consume():
        w = watch.Watch()
        for e in w.stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=2,
        ):
            received.append(e["type"])
            if e["type"] == "ADDED":
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    eventually(lambda: "BOOKMARK" in received, "a bookmark on the open watch", timeout=5)
    make(core, "live")
    t.join(5)
    assert "BOOKMARK" in received and received[-1] == "ADDED"


def test_watch_from_compacted_version_is_410_gone(apiserver, k8s):
    core = client.CoreV1Api(k8s)
    old = make(core, "x").metadata.resource_version
    make(core, "y")
    apiserver.call(apiserver.server.store.compact)
    _w, events = stream(k8s, resource_version=old, timeout_seconds=2)
    with pytest.raises(ApiException) as err:
        list(events)
    assert err.value.status == 410


def test_history_window_expires_old_versions(k8s):
    from sim.apiserver.runner import ServerThread

    small = ServerThread(history_window=5).start()
    try:
        api = small.api_client()
        core = client.CoreV1Api(api)
        old = make(core, "first").metadata.resource_version
        for i in range(10):
            make(core, f"more-{i}")
        w = watch.Watch()
        with pytest.raises(ApiException) as err:
            list(
                w.stream(
                    core.list_namespaced_config_map,
                    "default",
                    resource_version=old,
                    timeout_seconds=1,
                )
            )
        assert err.value.status == 410
    finally:
        small.close()


def test_relist_and_rewatch_through_dropped_watches_and_compaction_loses_nothing(apiserver, k8s):
    """A reflector-style client under faults sees the final state of every object."""
    core = client.CoreV1Api(k8s)
    total = 60
    seen: dict[str, str] = {}
    done = threading.Event()

    def reflector():
        while not done.is_set():
            listing = core.list_namespaced_config_map("default")
            # A re-list replaces the cache, as a reflector does.
            seen.clear()
            seen.update({cm.metadata.name: (cm.data or {}).get("v", "") for cm in listing.items
                         if cm.metadata.name != ROOT_CA})  # fmt: skip
            rv = listing.metadata.resource_version
            try:
                w = watch.Watch()
                for e in w.stream(
                    core.list_namespaced_config_map,
                    "default",
                    resource_version=rv,
                    timeout_seconds=5,
                ):
                    obj = e["object"]
                    if obj.metadata.name == ROOT_CA:
                        continue
                    if e["type"] == "DELETED":
                        seen.pop(obj.metadata.name, None)
                    else:
                        seen[obj.metadata.name] = (obj.data or {}).get("v", "")
                    if done.is_set():
                        w.stop()
            except ApiException as err:
                assert err.status == 410  # compacted: re-list

    t = threading.Thread(target=reflector)
    t.start()
    for i in range(total):
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": f"o{i}"}, "data": {"v": "1"}}
        )
        if i % 7 == 3:
            apiserver.call(apiserver.server.store.close_watches)
        if i % 11 == 5:
            apiserver.call(apiserver.server.store.compact)
        if i % 5 == 0 and i:
            core.patch_namespaced_config_map(f"o{i - 1}", "default", {"data": {"v": "2"}})
        if i % 9 == 0 and i:
            core.delete_namespaced_config_map(f"o{i - 2}", "default")
    expected = {
        c.metadata.name: c.data["v"]
        for c in core.list_namespaced_config_map("default").items
        if c.metadata.name != ROOT_CA
    }
    with contextlib.suppress(AssertionError):  # the assertion below shows what is missing
        eventually(lambda: seen == expected, "the reflector caught up", timeout=10, interval=0.05)
    done.set()
    make(core, "wake-up")  # ends the reflector's current watch
    t.join(10)
    assert {k: v for k, v in seen.items() if k != "wake-up"} == expected


def test_injected_429_has_retry_after(apiserver, k8s):
    def configure():
        faults = apiserver.server.faults
        faults.error_rate, faults.error_code = 1.0, 429

    apiserver.call(configure)
    core = client.CoreV1Api(k8s)
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default")
    assert err.value.status == 429
    assert err.value.headers["Retry-After"] == "1"
    assert json.loads(err.value.body)["reason"] == "TooManyRequests"
    apiserver.call(lambda: setattr(apiserver.server.faults, "error_rate", 0.0))
    assert [c.metadata.name for c in core.list_namespaced_config_map("default").items] == [ROOT_CA]


def test_restart_keeps_objects(apiserver, k8s):
    core = client.CoreV1Api(k8s)
    make(core, "survivor")
    apiserver.restart()
    assert core.read_namespaced_config_map("survivor", "default").metadata.name == "survivor"


def test_bookmark_never_passes_an_event_still_queued(apiserver, k8s):
    """A wait that runs out while an event is queued (both land in one turn of a busy
    loop) must not send a bookmark past that event: a client resuming from the bookmark
    after the watch ended would miss it for good."""
    store = apiserver.server.store
    stalled = threading.Event()

    class StallOnce(asyncio.Queue):
        """The first get is late: it lets the first event sit in the queue until the
        watch's wait runs out."""

        armed = True

        async def get(self):
            if self.armed:
                self.armed = False
                await self._arrived.wait()
                stalled.set()
                await asyncio.sleep(3600)
            return await super().get()

        def put_nowait(self, item):
            super().put_nowait(item)
            self._arrived.set()

    def install():
        real = store.watch

        def watch_with_stall(key, namespace, index=None):
            watcher = real(key, namespace, index)
            if key[-1] == "configmaps":
                watcher.queue = StallOnce()
                watcher.queue._arrived = asyncio.Event()
            return watcher

        store.watch = watch_with_stall
        apiserver.server._bookmark_interval = 10  # the one wait is the whole watch

    apiserver.call(install)
    core = client.CoreV1Api(k8s)
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    seen: list[tuple[str, str, str]] = []

    def consume(from_rv, timeout):
        for e in watch.Watch(return_type="object").stream(
            core.list_namespaced_config_map, "default", resource_version=from_rv,
            allow_watch_bookmarks=True, timeout_seconds=timeout,
        ):
            md = e["object"]["metadata"]
            seen.append((e["type"], md.get("name", ""), md["resourceVersion"]))

    t = threading.Thread(target=consume, args=(rv, 1))
    t.start()
    # The change must reach the open watch's queue, not its opening replay.
    eventually(lambda: apiserver.call(lambda: store.watcher_count), "the open watch",
               timeout=5, interval=0.01)
    make(core, "late")
    assert stalled.wait(5)
    t.join(10)
    # Resume from the last version the first watch reported, as an informer does.
    last = seen[-1][2] if seen else rv
    consume(last, 1)
    assert ("ADDED", "late") in [(kind, name) for kind, name, _ in seen], seen
