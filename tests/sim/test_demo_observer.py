"""The demo's observer and its per-join accounting: the evidence read from watched caches
(no LISTs per look) and the driver's API cost divided by the daemons that joined."""

from __future__ import annotations

import asyncio

from kubernetes import client

from api import names
from sim.apiserver.runner import ServerThread
from sim.cluster.demo import ClusterWatch, driver_traffic, per_join

ACCOUNTS = {"controller": "ctl", "agent": "plugin", "daemon": "imex"}


def _user(account: str) -> str:
    return f"system:serviceaccount:drv:{account}"


def test_driver_traffic_per_join() -> None:
    before = {_user("ctl"): {"create": 1, "watchEvents": 10, "watchBytes": 1000}}
    after = {
        _user("ctl"): {"create": 3, "patch": 1, "list": 9, "watchEvents": 30, "watchBytes": 5000},
        _user("plugin"): {"update": 4, "conflict": 2, "get": 7},
        _user("imex"): {"patch": 2, "delete": 2, "watchEvents": 4, "watchBytes": 800},
        "someone-else": {"create": 100},
    }
    traffic = driver_traffic(before, after, ACCOUNTS, "drv")
    assert traffic == {
        "controller": {"writes": 3, "conflicts": 0, "watchEvents": 20, "watchBytes": 4000},
        "agent": {"writes": 4, "conflicts": 2, "watchEvents": 0, "watchBytes": 0},
        "daemon": {"writes": 4, "conflicts": 0, "watchEvents": 4, "watchBytes": 800},
    }
    join = per_join(traffic, 2)
    assert join["daemons"] == 2
    assert join["api_writes"] == {"total": 5.5, "controller": 1.5, "agent": 2.0, "daemon": 2.0}
    assert join["conflicts"]["total"] == 1.0
    assert join["watch_events"]["total"] == 12.0
    assert join["watch_bytes"] == {"total": 2400, "controller": 2000, "agent": 0, "daemon": 400}


def test_cluster_watch_sees_changes_without_listing(
    apiserver: ServerThread, k8s: client.ApiClient, project_crds: list[dict]
) -> None:
    core = client.CoreV1Api(k8s)
    core.create_namespace({"metadata": {"name": "drv"}})

    async def main() -> None:
        watch = ClusterWatch(k8s, "drv")
        await watch.start()
        try:
            while watch.snapshot() is None:
                await watch.changed(0.1)
            lists = apiserver.call(lambda: apiserver.server.stats.requests.get("list", 0))
            await asyncio.to_thread(
                client.CustomObjectsApi(k8s).create_namespaced_custom_object,
                names.GROUP,
                names.VERSION,
                "default",
                names.PLURAL_COMPUTE_DOMAINS,
                {
                    "apiVersion": f"{names.GROUP}/{names.VERSION}",
                    "kind": names.KIND_COMPUTE_DOMAIN,
                    "metadata": {"name": "cd"},
                    "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "t"}}},
                },
            )
            for _ in range(50):
                snap = watch.snapshot()
                assert snap is not None
                if snap.cds:
                    break
                await watch.changed(0.1)
            assert [c["metadata"]["name"] for c in snap.cds] == ["cd"]
            later = apiserver.call(lambda: apiserver.server.stats.requests.get("list", 0))
            assert later == lists  # the change came by watch
        finally:
            watch.stop()

    asyncio.run(main())
