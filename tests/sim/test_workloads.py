"""The simulated DaemonSet and Job controllers against the real API emulator."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes import client

from api import names
from api.kube import call
from controller.render import RenderSettings, daemon_set
from sim.cluster.workloads import (
    DaemonSetController,
    JobController,
    node_should_run,
    target_node,
)

NS = "driver-ns"
CD_UID = "8d3c4f7e-0000-4000-8000-000000000001"
TIMEOUT = 5.0


async def eventually(fn: Callable[[], Awaitable[Any]], what: str) -> Any:
    """Poll until `fn()` returns something truthy (the controllers react within ms)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while True:
        result = await fn()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {result!r}")
        await asyncio.sleep(0.02)


def _dict(k8s: client.ApiClient, obj: Any) -> dict[str, Any]:
    return k8s.sanitize_for_serialization(obj)


async def _pods(k8s: client.ApiClient, *, live_only: bool = True) -> list[dict[str, Any]]:
    core = client.CoreV1Api(k8s)
    items = _dict(k8s, await call(core.list_namespaced_pod, NS))["items"]
    if live_only:
        items = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    return items


def _setup(k8s: client.ApiClient, nodes: int = 3) -> client.CoreV1Api:
    core = client.CoreV1Api(k8s)
    core.create_namespace({"metadata": {"name": NS}})
    # The daemon pods' ServiceAccount, as the manifests create it: admission refuses a pod
    # whose account does not exist.
    core.create_namespaced_service_account(NS, {"metadata": {"name": names.DAEMON_SERVICE_ACCOUNT}})
    for i in range(nodes):
        core.create_node({"metadata": {"name": f"node-{i}"}})
    return core


async def _label(core: client.CoreV1Api, node: str, value: str | None) -> None:
    patch = {"metadata": {"labels": {names.LABEL_COMPUTE_DOMAIN: value}}}
    await call(core.patch_node, node, patch)


def _driver_daemon_set() -> dict[str, Any]:
    settings = RenderSettings(namespace=NS, image="example/imex:1", daemon_log_verbosity=1)
    return daemon_set(CD_UID, settings)


def test_daemon_set_follows_node_labels(k8s: client.ApiClient) -> None:
    core = _setup(k8s)
    apps = client.AppsV1Api(k8s)

    async def scenario() -> None:
        ctrl = DaemonSetController(k8s, resync_seconds=0.5)
        ctrl.start()
        try:
            ds = _dict(k8s, await call(apps.create_namespaced_daemon_set, NS, _driver_daemon_set()))
            name = ds["metadata"]["name"]

            async def ds_status() -> dict[str, Any]:
                got = _dict(k8s, await call(apps.read_namespaced_daemon_set, name, NS))
                return got.get("status") or {}

            # No node carries the label: no pods, and a status saying so.
            st = await eventually(
                lambda: _status_matches(ds_status, observedGeneration=1), "the first status"
            )
            assert st["desiredNumberScheduled"] == 0
            await asyncio.sleep(0.3)
            assert await _pods(k8s) == []

            await _label(core, "node-0", CD_UID)
            await _label(core, "node-2", CD_UID)
            await _label(core, "node-1", "some-other-cd")
            pods = await eventually(
                lambda: _pods_on(k8s, {"node-0", "node-2"}), "pods on the labeled nodes"
            )
            for pod in pods:
                md = pod["metadata"]
                assert md["name"].startswith(f"{name}-")
                assert md["generateName"] == f"{name}-"
                assert md["labels"][names.LABEL_COMPUTE_DOMAIN] == CD_UID
                assert md["labels"]["controller-revision-hash"]
                assert md["ownerReferences"] == [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": name,
                        "uid": ds["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ]
                tmpl = ds["spec"]["template"]["spec"]
                assert pod["spec"]["resourceClaims"] == tmpl["resourceClaims"]
                assert pod["spec"]["nodeSelector"] == tmpl["nodeSelector"]
                # Pinned by affinity and left to the scheduler (which allocates its claim).
                assert "nodeName" not in pod["spec"]
                terms = pod["spec"]["affinity"]["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ]["nodeSelectorTerms"]
                assert terms == [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [target_node(pod)]}
                        ]
                    }
                ]
                assert pod["spec"]["containers"][0]["image"] == "example/imex:1"
            await eventually(
                lambda: _status_matches(
                    ds_status, desiredNumberScheduled=2, currentNumberScheduled=2, numberReady=0
                ),
                "status counting two scheduled pods",
            )
            # Steady state: exactly one pod per node, across resyncs.
            await asyncio.sleep(0.8)
            assert len(await _pods(k8s)) == 2

            # A Ready pod is counted ready and available.
            pod0 = next(p for p in pods if target_node(p) == "node-0")
            ready = {
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            }
            await call(core.patch_namespaced_pod_status, pod0["metadata"]["name"], NS, ready)
            await eventually(
                lambda: _status_matches(ds_status, numberReady=1, numberAvailable=1),
                "one ready pod",
            )

            # The label goes: the pod on that node is deleted (it terminates gracefully,
            # waiting for a kubelet that this test does not run).
            await _label(core, "node-2", None)
            await eventually(lambda: _pods_on(k8s, {"node-0"}), "node-2's pod deleted")
            await eventually(
                lambda: _status_matches(
                    ds_status, desiredNumberScheduled=1, currentNumberScheduled=1
                ),
                "status after the label went",
            )

            # A node that goes away takes its daemon pod with it.
            await _label(core, "node-1", CD_UID)
            await eventually(lambda: _pods_on(k8s, {"node-0", "node-1"}), "node-1's pod")
            await call(core.delete_node, "node-1")
            await eventually(lambda: _pods_on(k8s, {"node-0"}), "node-1's pod deleted")
        finally:
            await ctrl.stop()

    asyncio.run(scenario())


def test_daemon_set_skips_tainted_nodes_unless_tolerated(k8s: client.ApiClient) -> None:
    core = _setup(k8s, nodes=2)
    apps = client.AppsV1Api(k8s)
    taint = {"spec": {"taints": [{"key": "gpu", "value": "busy", "effect": "NoSchedule"}]}}
    core.patch_node("node-1", taint)
    plain = {
        "metadata": {"name": "plain"},
        "spec": {
            "selector": {"matchLabels": {"app": "plain"}},
            "template": {
                "metadata": {"labels": {"app": "plain"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }

    async def scenario() -> None:
        ctrl = DaemonSetController(k8s, resync_seconds=0.5)
        ctrl.start()
        try:
            await call(apps.create_namespaced_daemon_set, NS, plain)
            await eventually(lambda: _pods_on(k8s, {"node-0"}), "the untainted node only")

            # The driver's DaemonSet tolerates every taint (three `operator: Exists`).
            await call(apps.create_namespaced_daemon_set, NS, _driver_daemon_set())
            await _label(core, "node-1", CD_UID)
            pods = await eventually(
                lambda: _pods_on(k8s, {"node-0", "node-1"}), "the driver's pod on node-1"
            )
            assert {p["metadata"]["generateName"] for p in pods} == {
                "plain-",
                f"{_driver_daemon_set()['metadata']['name']}-",
            }
            # A NoExecute taint drops the plain pod too.
            noexec = {"spec": {"taints": [{"key": "x", "effect": "NoExecute"}]}}
            await call(core.patch_node, "node-0", noexec)
            await eventually(lambda: _pods_on(k8s, {"node-1"}), "the plain pod gone")
        finally:
            await ctrl.stop()

    asyncio.run(scenario())


def test_node_should_run_matches_affinity_and_tolerations() -> None:
    node = {
        "metadata": {"name": "n1", "labels": {"zone": "a", "gpus": "8"}},
        "spec": {
            "taints": [
                {"key": "k", "value": "v", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"},
            ]
        },
    }

    def affinity(*exprs: dict[str, Any], fields: bool = False) -> dict[str, Any]:
        term = {"matchFields" if fields else "matchExpressions": list(exprs)}
        required = {"nodeSelectorTerms": [term]}
        spec = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
        return {"affinity": spec, "tolerations": [{"operator": "Exists"}]}

    assert not node_should_run({}, node)  # the NoSchedule taint
    assert node_should_run({"tolerations": [{"key": "k", "value": "v"}]}, node)
    assert not node_should_run({"tolerations": [{"key": "k", "value": "w"}]}, node)
    assert node_should_run({"tolerations": [{"key": "k", "operator": "Exists"}]}, node)
    assert node_should_run(affinity({"key": "zone", "operator": "In", "values": ["a"]}), node)
    assert not node_should_run(
        affinity({"key": "zone", "operator": "NotIn", "values": ["a"]}), node
    )
    assert node_should_run(affinity({"key": "gpus", "operator": "Gt", "values": ["4"]}), node)
    assert not node_should_run(affinity({"key": "gone", "operator": "Exists"}), node)
    by_name = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    assert node_should_run(affinity(by_name, fields=True), node)


def test_job_runs_parallel_pods_until_completions(k8s: client.ApiClient) -> None:
    core = _setup(k8s, nodes=0)
    batch = client.BatchV1Api(k8s)
    job = {
        "metadata": {"name": "work"},
        "spec": {
            "parallelism": 2,
            "completions": 3,
            "template": {
                "metadata": {"labels": {"app": "work"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            },
        },
    }

    async def scenario() -> None:
        ctrl = JobController(k8s, resync_seconds=0.5)
        ctrl.start()
        try:
            created = _dict(k8s, await call(batch.create_namespaced_job, NS, job))
            uid = created["metadata"]["uid"]

            async def active(n: int) -> list[dict[str, Any]]:
                """The running pods when there are exactly `n` of them."""
                pods = await _pods(k8s)
                running = [
                    p for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")
                ]
                return running if len(running) == n else []

            async def job_status() -> dict[str, Any]:
                got = _dict(k8s, await call(batch.read_namespaced_job, "work", NS))
                return got.get("status") or {}

            async def succeed(pod: dict[str, Any]) -> None:
                done = {"status": {"phase": "Succeeded"}}
                await call(core.patch_namespaced_pod_status, pod["metadata"]["name"], NS, done)

            seen: set[str] = set()
            # Two at a time; each success brings a new pod while more are needed (3 in all:
            # after two successes one more pod is enough).
            for succeeded, running in ((0, 2), (1, 2), (2, 1)):
                pods = await eventually(
                    lambda r=running: active(r), f"{running} active after {succeeded} done"
                )
                await eventually(
                    lambda s=succeeded, r=running: _status_matches(
                        job_status, active=r, succeeded=s
                    ),
                    f"status: {running} active, {succeeded} succeeded",
                )
                for pod in pods:
                    md = pod["metadata"]
                    seen.add(md["name"])
                    assert md["generateName"] == "work-"
                    assert md["labels"]["job-name"] == "work"
                    assert md["labels"]["batch.kubernetes.io/job-name"] == "work"
                    assert md["labels"]["controller-uid"] == uid
                    assert md["labels"]["app"] == "work"
                    ref = md["ownerReferences"][0]
                    assert (ref["kind"], ref["uid"], ref["controller"]) == ("Job", uid, True)
                await succeed(_oldest(pods))

            st = await eventually(
                lambda: _status_matches(job_status, succeeded=3, active=0), "the Job complete"
            )
            assert st["startTime"]
            assert st["completionTime"]
            conditions = {c["type"]: c["status"] for c in st["conditions"]}
            assert conditions["Complete"] == "True"
            await asyncio.sleep(0.8)  # a resync later: nothing more is created
            pods = await _pods(k8s)
            assert len(pods) == len(seen) == 3
            assert all(p["status"]["phase"] == "Succeeded" for p in pods)
        finally:
            await ctrl.stop()

    asyncio.run(scenario())


def _oldest(pods: list[dict[str, Any]]) -> dict[str, Any]:
    return min(pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))


async def _pods_on(k8s: client.ApiClient, nodes: set[str]) -> list[dict[str, Any]]:
    """The live pods if there is exactly one on each of `nodes` and none elsewhere."""
    pods = await _pods(k8s)
    on = sorted(target_node(p) for p in pods)
    return pods if on == sorted(nodes) else []


async def _status_matches(
    read: Callable[[], Awaitable[dict[str, Any]]], **want: int
) -> dict[str, Any]:
    """The status if every wanted field has its value (absent counts as 0), else {}."""
    st = await read()
    ok = all(st.get(k, 0) == v for k, v in want.items())
    return st if ok else {}


@pytest.fixture(autouse=True)
def _quiet_informer_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("ERROR", logger="api.kube")
