"""`/_sim/stats` counts what watches cost the server per user: the events it streamed to
that user's watches and their bytes, so a benchmark can weigh a component's watches."""

import json
import urllib.request

from kubernetes import client, watch

from sim.apiserver.authn import TokenAuthenticator
from sim.apiserver.runner import ServerThread


def _stats(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/_sim/stats") as response:
        return json.loads(response.read())


def test_watch_events_and_bytes_are_counted_per_user() -> None:
    auth = TokenAuthenticator()
    auth.add_admin("admin")
    auth.add_user("watcher", "bob", ["system:masters"])
    thread = ServerThread(authenticator=auth).start()
    try:
        admin = client.CoreV1Api(thread.api_client("admin"))
        bob = client.CoreV1Api(thread.api_client("watcher"))
        ns = admin.create_namespace({"metadata": {"name": "w"}})
        assert ns.metadata.name == "w"
        for i in range(3):
            admin.create_namespaced_config_map("w", {"metadata": {"name": f"cm-{i}"}})
        listed = bob.list_namespaced_config_map("w", label_selector="none=none")
        rv = listed.metadata.resource_version
        admin.create_namespaced_config_map("w", {"metadata": {"name": "late"}})
        # From an older version: the four ConfigMaps' ADDED (three plus the root CA's are
        # before `rv`, so only "late"), then nothing until the timeout.
        events = list(
            watch.Watch().stream(
                bob.list_namespaced_config_map, "w", resource_version=rv, timeout_seconds=1
            )
        )
        assert [e["object"].metadata.name for e in events] == ["late"]
        # From "": every ConfigMap of the namespace as ADDED (the root CA's included).
        events += list(watch.Watch().stream(bob.list_namespaced_config_map, "w", timeout_seconds=1))
        assert len(events) == 1 + 5
        stats = _stats(thread.url)
        mine = stats["byUser"]["bob"]
        assert mine["watchEvents"] == 6
        assert mine["watchBytes"] > 6 * len('{"type":"ADDED","object":{}}')
        assert mine["watch"] == 2 and mine["list"] == 1
        # The admin never watched: no watch counters for it.
        assert "watchEvents" not in stats["byUser"]["kubernetes-admin"]
    finally:
        thread.close()
