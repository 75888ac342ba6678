"""`/_sim/stats` counts requests and 409 conflicts per user, so benchmarks can tell whose
writes a flow cost (the controller's, the agents', the daemons')."""

import json
import urllib.request

import pytest
from kubernetes import client

from sim.apiserver.authn import TokenAuthenticator
from sim.apiserver.runner import ServerThread


def test_writes_and_conflicts_are_counted_per_user() -> None:
    auth = TokenAuthenticator()
    auth.add_admin("admin")
    auth.add_user("other", "alice", ["system:masters"])
    thread = ServerThread(authenticator=auth).start()
    try:
        admin = client.CoreV1Api(thread.api_client("admin"))
        other = client.CoreV1Api(thread.api_client("other"))
        cm = admin.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
        changed = client.V1ConfigMap(metadata=cm.metadata, data={"k": "v"})
        admin.replace_namespaced_config_map("a", "default", changed)
        with pytest.raises(client.ApiException) as err:
            other.replace_namespaced_config_map("a", "default", cm)  # stale: a 409
        assert err.value.status == 409
        other.list_namespaced_config_map("default")
        # Writes of Events count as writes and, besides, as eventWrites (set aside by reports).
        event = {"metadata": {"name": "e"}, "involvedObject": {"kind": "ConfigMap", "name": "a"},
                 "reason": "Test", "message": "m"}  # fmt: skip
        other.create_namespaced_event("default", event)
        other.patch_namespaced_event("e", "default", {"message": "again"})
        # A JSON patch whose `test` no longer holds lost a race, as a 409 does.
        with pytest.raises(client.ApiException) as err:
            other.patch_namespaced_config_map(  # a list body goes as a JSON patch
                "a", "default", [{"op": "test", "path": "/data/k", "value": "stale"}]
            )
        assert err.value.status == 422
        with urllib.request.urlopen(f"{thread.url}/_sim/stats") as response:
            stats = json.loads(response.read())
        assert stats["byUser"]["kubernetes-admin"] == {"create": 1, "update": 1}
        assert stats["byUser"]["alice"] == {
            "update": 1, "conflict": 2, "list": 1, "create": 1, "patch": 2, "eventWrites": 2,
        }  # fmt: skip
        assert stats["conflicts"] == 2
    finally:
        thread.close()
