"""The demo's observer and its per-join accounting: the evidence read from watched caches
(no LISTs per look) and the driver's API cost divided by the daemons that joined."""

from __future__ import annotations

import asyncio

from kubernetes import client

from api import names
from sim.apiserver.runner import ServerThread
from sim.cluster.demo import ClusterWatch, ReadinessFlaps, driver_traffic, per_join

ACCOUNTS = {"controller": "ctl", "agent": "plugin", "daemon": "imex"}


def _user(account: str) -> str:
    return f"system:serviceaccount:drv:{account}"


def test_driver_traffic_per_join() -> None:
    before = {_user("ctl"): {"create": 1, "watchEvents": 10, "watchBytes": 1000}}
    after = {
        _user("ctl"): {"create": 3, "patch": 1, "list": 9, "watchEvents": 30, "watchBytes": 5000},
        _user("plugin"): {"update": 4, "conflict": 2, "get": 7},
        _user("imex"): {
            "create": 3,
            "patch": 2,
            "delete": 2,
            "eventWrites": 3,
            "watchEvents": 4,
            "watchBytes": 800,
        },
        "someone-else": {"create": 100},
    }
    traffic = driver_traffic(before, after, ACCOUNTS, "drv")
    def row(writes: int, events: int, conflicts: int, watched: int, nbytes: int) -> dict:
        return {
            "writes": writes,
            "eventWrites": events,
            "conflicts": conflicts,
            "watchEvents": watched,
            "watchBytes": nbytes,
        }

    assert traffic == {
        "controller": row(3, 0, 0, 20, 4000),
        "agent": row(4, 0, 2, 0, 0),
        "daemon": row(4, 3, 0, 4, 800),
    }
    join = per_join(traffic, 2)
    assert join["daemons"] == 2
    assert join["api_writes"] == {"total": 5.5, "controller": 1.5, "agent": 2.0, "daemon": 2.0}
    assert join["event_writes"] == {"total": 1.5, "controller": 0.0, "agent": 0.0, "daemon": 1.5}
    assert join["conflicts"]["total"] == 1.0
    assert join["watch_events"]["total"] == 12.0
    assert join["watch_bytes"] == {"total": 2400, "controller": 2000, "agent": 0, "daemon": 400}


def test_per_join_from_the_audit_log_leaves_watch_figures_out() -> None:
    """kube-apiserver's audit log counts requests, not watch bytes: the report says nothing
    of watches rather than zero."""
    after = {
        _user("ctl"): {"create": 2, "patch": 1, "watch": 3},
        _user("imex"): {"create": 2, "eventWrites": 1, "conflict": 1, "update": 1},
    }
    traffic = driver_traffic({}, after, ACCOUNTS, "drv")
    assert all("watchBytes" not in t for t in traffic.values())
    join = per_join(traffic, 1)
    assert join["api_writes"]["total"] == 5.0
    assert join["event_writes"]["total"] == 1.0
    assert join["conflicts"]["total"] == 1.0
    assert "watch_bytes" not in join and "watch_events" not in join


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


def test_readiness_flaps_count_ready_to_not_ready_per_entry() -> None:
    def clique(name: str, *statuses: tuple[str, str]) -> dict:
        return {
            "metadata": {"name": name},
            "daemons": [{"nodeName": n, "status": s} for n, s in statuses],
        }

    flaps = ReadinessFlaps()
    flaps.observe(clique("a", ("n1", "NotReady"), ("n2", "NotReady")))  # joining: no flap
    flaps.observe(clique("a", ("n1", "Ready"), ("n2", "NotReady")))
    flaps.observe(clique("b", ("n1", "NotReady")))  # another clique's n1
    assert flaps.count == 0
    flaps.observe(clique("a", ("n1", "NotReady"), ("n2", "Ready")))
    assert flaps.count == 1
    flaps.observe(clique("a", ("n1", "Ready"), ("n2", "Ready")))
    flaps.observe(clique("a", ("n1", "Ready")))  # n2 left: not a flap
    assert flaps.count == 1
