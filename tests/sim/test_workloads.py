"""The simulated workload controllers against the real API emulator, and (Deployments,
ReplicaSets, DaemonSet rollouts) against kube-controller-manager too."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from eventually import eventually as eventually_sync
from eventually import eventually_async
from kubernetes import client

from api import names
from controller.render import RenderSettings, daemon_set
from runtime.kubecall import call
from sim.cluster.workloads import (
    REVISION as REVISION_KEY,
)
from sim.cluster.workloads import (
    DaemonSetController,
    JobController,
    deletion_order,
    node_should_run,
    pod_template_hash,
    rolling_deletes,
    scaled_value,
    target_node,
)
from sim.controlplane import CONTROL_PLANES, KUBERNETES
from sim.controlplane.base import ControlPlane
from sim.controlplane.binaries import available
from sim.controlplane.emulator import EmulatorControlPlane
from sim.controlplane.upstream import KubernetesControlPlane

NS = "driver-ns"
CD_UID = "8d3c4f7e-0000-4000-8000-000000000001"
TIMEOUT = 5.0


async def eventually(
    fn: Callable[[], Awaitable[Any]], what: str, *, timeout: float = TIMEOUT
) -> Any:
    """Poll until `fn()` returns something truthy (the controllers react within ms)."""
    return await eventually_async(fn, what, timeout=timeout)


def reconciles(ctrl: Any) -> list[str]:
    """The owners (by name) of each reconcile `ctrl` completes from now on: one round that
    could have acted is a later event than the last write seen (resyncs included)."""
    done: list[str] = []
    real = ctrl._reconcile

    async def reconcile(owner: dict[str, Any]) -> None:
        await real(owner)
        done.append(owner["metadata"]["name"])

    ctrl._reconcile = reconcile
    return done


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
        rounds = reconciles(ctrl)
        ctrl.start()
        try:
            ds = _dict(k8s, await call(apps.create_namespaced_daemon_set, NS, _driver_daemon_set()))
            name = ds["metadata"]["name"]

            async def more_rounds(n: int) -> None:
                """Until `n` more reconciles of the DaemonSet have completed."""
                target = rounds.count(name) + n
                await eventually_async(lambda: rounds.count(name) >= target,
                                       f"{n} more reconciles")

            async def ds_status() -> dict[str, Any]:
                got = _dict(k8s, await call(apps.read_namespaced_daemon_set, name, NS))
                return got.get("status") or {}

            # No node carries the label: no pods, and a status saying so.
            st = await eventually(
                lambda: _status_matches(ds_status, observedGeneration=1), "the first status"
            )
            assert st["desiredNumberScheduled"] == 0
            await more_rounds(1)
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
            await more_rounds(2)
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
        rounds = reconciles(ctrl)
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
            done = rounds.count("work")
            # A resync later: nothing more is created.
            await eventually_async(lambda: rounds.count("work") >= done + 2, "a resync later")
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
    caplog.set_level("ERROR", logger="runtime")


# --- Deployments, ReplicaSets and DaemonSet rollouts, on both control planes ------------------
#
# The same scenarios run against the emulator (the controllers above) and against the real
# kube-controller-manager, so that the emulator is held to what a cluster does. No kubelet
# runs and no node takes pods: pods stay unscheduled, deleting one removes it at once, and
# the tests make pods Ready by writing their status, as a kubelet would.

PLANE_TIMEOUT = 30.0
# The emulator takes no strategic merge patch of Deployments (sim/apiserver/strategic_patch.py).
MERGE_PATCH = "application/merge-patch+json"
TEMPLATE_HASH = "pod-template-hash"


class _Loop:
    """An event loop in a thread: the emulator's actors run there for the whole module."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[Any], timeout: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module", params=CONTROL_PLANES)
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """One control plane of each kind for the module (the upstream one is skipped, saying
    why, where `make k8s` has not built it)."""
    if request.param == KUBERNETES:
        built, why = available()
        if not built:
            pytest.skip(f"kubernetes control plane: {why}")
    root = Path(tempfile.mkdtemp(prefix="cd-wl-", dir="/tmp"))
    loop = _Loop()
    cp: ControlPlane = (
        KubernetesControlPlane(root) if request.param == KUBERNETES else EmulatorControlPlane(root)
    )
    try:
        loop.run(cp.start())
        loop.run(cp.wait_settled())
        yield cp
    finally:
        loop.run(cp.stop())
        loop.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def admin(plane: ControlPlane) -> Iterator[tuple[client.ApiClient, str]]:
    """The admin's client and a fresh namespace whose default ServiceAccount exists."""
    k8s = plane.admin.api_client()
    ns = f"wl-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    eventually_sync(lambda: core.list_namespaced_service_account(ns).items,
                    "the default ServiceAccount", timeout=PLANE_TIMEOUT, interval=0.05)
    try:
        yield k8s, ns
    finally:
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(ns)
        k8s.close()


async def _within(fn: Callable[[], Awaitable[Any]], what: str) -> Any:
    return await eventually(fn, what, timeout=PLANE_TIMEOUT)


async def _live_pods(k8s: client.ApiClient, ns: str) -> list[dict[str, Any]]:
    core = client.CoreV1Api(k8s)
    items = _dict(k8s, await call(core.list_namespaced_pod, ns))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _active(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]


def _is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions") or ()
    )


def _image(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["containers"][0]["image"])


async def _mark_ready(k8s: client.ApiClient, pod: dict[str, Any]) -> None:
    """What a kubelet reports once the containers run and pass their readiness probes."""
    core = client.CoreV1Api(k8s)
    body = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    with contextlib.suppress(client.ApiException):  # deleted meanwhile
        md = pod["metadata"]
        await call(core.patch_namespaced_pod_status, md["name"], md["namespace"], body)


class _Kubelet:
    """Marks every new pod of the namespace Running and Ready, unless paused."""

    def __init__(self, k8s: client.ApiClient, ns: str) -> None:
        self.k8s, self.ns = k8s, ns
        self.paused = False
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            if not self.paused:
                for pod in _active(await _live_pods(self.k8s, self.ns)):
                    if not _is_ready(pod) and not self.paused:
                        await _mark_ready(self.k8s, pod)
            await asyncio.sleep(0.05)

    def __enter__(self) -> _Kubelet:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


def _web(replicas: int, image: str, strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": image}]},
        },
    }
    if strategy is not None:
        spec["strategy"] = strategy
    return {"metadata": {"name": "web"}, "spec": spec}


async def _replica_sets(k8s: client.ApiClient, ns: str) -> list[dict[str, Any]]:
    apps = client.AppsV1Api(k8s)
    items = _dict(k8s, await call(apps.list_namespaced_replica_set, ns))["items"]
    return sorted(items, key=lambda r: int(r["metadata"]["annotations"][REVISION_KEY]))


async def _deployment(k8s: client.ApiClient, ns: str) -> dict[str, Any]:
    apps = client.AppsV1Api(k8s)
    return _dict(k8s, await call(apps.read_namespaced_deployment, "web", ns))


async def _set_image(k8s: client.ApiClient, ns: str, image: str) -> None:
    apps = client.AppsV1Api(k8s)
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}}
    await call(apps.patch_namespaced_deployment, "web", ns, patch, _content_type=MERGE_PATCH)


async def _scale(k8s: client.ApiClient, ns: str, replicas: int) -> None:
    apps = client.AppsV1Api(k8s)
    patch = {"spec": {"replicas": replicas}}
    await call(apps.patch_namespaced_deployment, "web", ns, patch, _content_type=MERGE_PATCH)


def _kubectl(plane: ControlPlane, kubectl_bin: Path, ns: str, *args: str) -> str:
    home = Path(tempfile.mkdtemp(prefix="cd-kc-"))
    try:
        config = plane.admin.write_kubeconfig(home / "config", namespace=ns)
        out = subprocess.run(
            [str(kubectl_bin), "--kubeconfig", str(config), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
            check=False,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
    return out.stdout


def _deployment_done(st: dict[str, Any], replicas: int, generation: int) -> bool:
    """What `kubectl rollout status` waits for, and both conditions as a cluster has them."""
    conditions = {c["type"]: (c["status"], c["reason"]) for c in st.get("conditions") or ()}
    return (
        st.get("observedGeneration") == generation
        and st.get("replicas", 0) == st.get("updatedReplicas", 0) == replicas
        and st.get("readyReplicas", 0) == st.get("availableReplicas", 0) == replicas
        and "unavailableReplicas" not in st
        and conditions.get("Available") == ("True", "MinimumReplicasAvailable")
        and conditions.get("Progressing") == ("True", "NewReplicaSetAvailable")
    )


def test_deployment_rolls_out_through_replica_sets(
    plane: ControlPlane, admin: tuple[client.ApiClient, str], kubectl_bin: Path
) -> None:
    k8s, ns = admin
    apps = client.AppsV1Api(k8s)
    core = client.CoreV1Api(k8s)

    async def scenario() -> None:
        with _Kubelet(k8s, ns) as kubelet:
            created = _dict(
                k8s, await call(apps.create_namespaced_deployment, ns, _web(2, "web:1"))
            )
            uid = created["metadata"]["uid"]

            # One ReplicaSet, named and labelled after its template's hash, owned by the
            # Deployment; its pods named after it and owned by it.
            [rs] = await _within(lambda: _replica_sets(k8s, ns), "the first ReplicaSet")
            digest = rs["metadata"]["labels"][TEMPLATE_HASH]
            rs_name = rs["metadata"]["name"]
            assert rs_name == f"web-{digest}"
            labels = {"app": "web", TEMPLATE_HASH: digest}
            assert rs["metadata"]["labels"] == labels
            assert rs["spec"]["selector"] == {"matchLabels": labels}
            assert rs["spec"]["template"]["metadata"]["labels"] == labels
            assert rs["metadata"]["annotations"][REVISION_KEY] == "1"
            assert rs["metadata"]["ownerReferences"] == [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "web",
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]

            async def pods_of(rs_name: str, n: int) -> list[dict[str, Any]]:
                pods = _active(await _live_pods(k8s, ns))
                mine = [p for p in pods if p["metadata"]["name"].startswith(f"{rs_name}-")]
                return pods if len(pods) == len(mine) == n else []

            pods = await _within(lambda: pods_of(rs_name, 2), "two pods")
            for pod in pods:
                md = pod["metadata"]
                assert md["generateName"] == f"{rs_name}-"
                assert len(md["name"]) == len(rs_name) + 6
                assert md["labels"] == labels
                ref = md["ownerReferences"]
                assert ref == [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": rs_name,
                        "uid": rs["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ]

            async def rolled_out(replicas: int, generation: int) -> dict[str, Any]:
                d = await _deployment(k8s, ns)
                return d if _deployment_done(d.get("status") or {}, replicas, generation) else {}

            d = await _within(lambda: rolled_out(2, 1), "the Deployment rolled out")
            await _within(lambda: _annotated(_deployment(k8s, ns), REVISION_KEY, "1"), "revision 1")
            out = _kubectl(plane, kubectl_bin, ns, "rollout", "status", "deployment/web")
            assert 'deployment "web" successfully rolled out' in out
            table = _kubectl(plane, kubectl_bin, ns, "get", "deployment", "web")
            assert table.splitlines()[1].split()[:4] == ["web", "2/2", "2", "2"]

            # A deleted pod is replaced.
            victim = pods[0]["metadata"]["name"]
            await call(core.delete_namespaced_pod, victim, ns)

            async def replaced() -> list[dict[str, Any]]:
                now = await pods_of(rs_name, 2)
                return now if victim not in {p["metadata"]["name"] for p in now} else []

            pods = await _within(replaced, "the deleted pod replaced")

            async def all_ready() -> list[dict[str, Any]]:
                # The pods themselves: the Deployment's status may still be the one from
                # before the deletion.
                now = await pods_of(rs_name, 2)
                return now if all(_is_ready(p) for p in now) else []

            await _within(all_ready, "the replacement ready")
            await _within(lambda: rolled_out(2, 1), "the Deployment available again")

            # Scaled up (the new pod stays unready), then down: the unready one goes.
            kubelet.paused = True
            await _scale(k8s, ns, 3)
            three = await _within(lambda: pods_of(rs_name, 3), "three pods")
            [extra] = [p for p in three if not _is_ready(p)]
            await _scale(k8s, ns, 2)
            two = await _within(lambda: pods_of(rs_name, 2), "two pods again")
            assert extra["metadata"]["name"] not in {p["metadata"]["name"] for p in two}
            assert {p["metadata"]["name"] for p in two} == {p["metadata"]["name"] for p in pods}
            kubelet.paused = False

            # A Failed pod no longer counts: it is replaced, and left as it is.
            failed = two[0]["metadata"]["name"]
            await call(
                core.patch_namespaced_pod_status, failed, ns, {"status": {"phase": "Failed"}}
            )

            async def failed_replaced() -> list[dict[str, Any]]:
                pods = await _live_pods(k8s, ns)
                active = [p["metadata"]["name"] for p in _active(pods)]
                still = any(p["metadata"]["name"] == failed for p in pods)
                return pods if still and len(active) == 2 and failed not in active else []

            await _within(failed_replaced, "the Failed pod replaced")
            await _within(lambda: rolled_out(2, 3), "the Deployment available again")

            # A new template: a second ReplicaSet takes over and the old one goes to 0.
            await _set_image(k8s, ns, "web:2")

            async def rolled() -> list[dict[str, Any]]:
                rss = await _replica_sets(k8s, ns)
                pods = _active(await _live_pods(k8s, ns))
                done = (
                    len(rss) == 2
                    and rss[0]["spec"]["replicas"] == 0
                    and rss[1]["spec"]["replicas"] == 2
                    and len(pods) == 2
                    and all(_image(p) == "web:2" for p in pods)
                )
                return rss if done else []

            old, new = await _within(rolled, "the rollout to the new template")
            assert old["metadata"]["name"] == rs_name
            new_digest = new["metadata"]["labels"][TEMPLATE_HASH]
            assert new_digest != digest
            assert new["metadata"]["name"] == f"web-{new_digest}"
            assert new["metadata"]["annotations"][REVISION_KEY] == "2"
            for pod in _active(await _live_pods(k8s, ns)):
                assert pod["metadata"]["labels"][TEMPLATE_HASH] == new_digest
                assert pod["metadata"]["ownerReferences"][0]["uid"] == new["metadata"]["uid"]
            await _within(lambda: rolled_out(2, 4), "the new template rolled out")
            await _within(lambda: _annotated(_deployment(k8s, ns), REVISION_KEY, "2"), "revision 2")
            out = _kubectl(plane, kubectl_bin, ns, "rollout", "status", "deployment/web")
            assert "successfully rolled out" in out

            # Deleting the Deployment: the garbage collector takes ReplicaSets and pods along.
            await call(apps.delete_namespaced_deployment, "web", ns)

            async def all_gone() -> bool:
                return not await _replica_sets(k8s, ns) and not await _live_pods(k8s, ns)

            await _within(all_gone, "ReplicaSets and pods collected")
            assert d["metadata"]["uid"] == uid

    asyncio.run(scenario())


async def _annotated(read: Awaitable[dict[str, Any]], key: str, value: str) -> bool:
    return ((await read)["metadata"].get("annotations") or {}).get(key) == value


def test_deployment_recreate_stops_old_pods_first(
    plane: ControlPlane, admin: tuple[client.ApiClient, str]
) -> None:
    k8s, ns = admin
    apps = client.AppsV1Api(k8s)

    async def scenario() -> None:
        with _Kubelet(k8s, ns):
            body = _web(2, "web:1", {"type": "Recreate"})
            await call(apps.create_namespaced_deployment, ns, body)

            async def ready(image: str) -> list[dict[str, Any]]:
                pods = _active(await _live_pods(k8s, ns))
                if len(pods) != 2 or not all(_image(p) == image and _is_ready(p) for p in pods):
                    return []
                return pods

            await _within(lambda: ready("web:1"), "two ready pods")
            await _set_image(k8s, ns, "web:2")

            async def rolled_out() -> list[dict[str, Any]]:
                pods = await ready("web:2")
                if not pods and {_image(p) for p in await _live_pods(k8s, ns)} == {
                        "web:1", "web:2"}:
                    pytest.fail("new pods while old ones still run")
                return pods

            await _within(rolled_out, "the rollout")

    asyncio.run(scenario())


def _daemons(ns: str, max_unavailable: Any, strategy: str = "RollingUpdate") -> dict[str, Any]:
    update: dict[str, Any] = {"type": strategy}
    if strategy == "RollingUpdate":
        update["rollingUpdate"] = {"maxUnavailable": max_unavailable}
    return {
        "metadata": {"name": "daemon"},
        "spec": {
            "selector": {"matchLabels": {"app": "daemon"}},
            "updateStrategy": update,
            "template": {
                "metadata": {"labels": {"app": "daemon"}},
                "spec": {
                    # Only this test's nodes; tolerate the taints the node lifecycle
                    # controller puts on nodes whose kubelet never reports.
                    "nodeSelector": {"workloads-test": ns},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "daemon", "image": "daemon:1"}],
                },
            },
        },
    }


async def _daemon_nodes(k8s: client.ApiClient, ns: str, count: int) -> list[str]:
    core = client.CoreV1Api(k8s)
    names = [f"{ns}-node-{i}" for i in range(count)]
    for name in names:
        body = {"metadata": {"name": name, "labels": {"workloads-test": ns}}}
        await call(core.create_node, body)
    return names


async def _delete_nodes(k8s: client.ApiClient, names: list[str]) -> None:
    core = client.CoreV1Api(k8s)
    for name in names:
        with contextlib.suppress(client.ApiException):
            await call(core.delete_node, name)


async def _per_node(k8s: client.ApiClient, ns: str, nodes: list[str]) -> dict[str, dict[str, Any]]:
    """The live daemon pod of each node, when every node has exactly one."""
    pods = _active(await _live_pods(k8s, ns))
    by_node = {target_node(p): p for p in pods}
    return by_node if len(pods) == len(nodes) and sorted(by_node) == sorted(nodes) else {}


async def _set_daemon_image(k8s: client.ApiClient, ns: str, image: str) -> None:
    apps = client.AppsV1Api(k8s)
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "daemon", "image": image}]}}}}
    await call(apps.patch_namespaced_daemon_set, "daemon", ns, patch)


async def _daemons_ready(
    k8s: client.ApiClient, ns: str, nodes: list[str]
) -> dict[str, dict[str, Any]]:
    """Every node's daemon pod, all marked Ready, and the DaemonSet counting them."""
    apps = client.AppsV1Api(k8s)
    pods = await _within(lambda: _per_node(k8s, ns, nodes), "a daemon pod per node")
    for pod in pods.values():
        await _mark_ready(k8s, pod)

    async def counted() -> dict[str, Any]:
        ds = _dict(k8s, await call(apps.read_namespaced_daemon_set, "daemon", ns))
        return ds if (ds.get("status") or {}).get("numberReady") == len(nodes) else {}

    await _within(counted, "the DaemonSet counting ready pods")
    return pods


@pytest.mark.parametrize("max_unavailable", ["100%", 3])
def test_daemon_set_rolling_update_replaces_all_at_once(
    admin: tuple[client.ApiClient, str], max_unavailable: Any
) -> None:
    k8s, ns = admin
    apps = client.AppsV1Api(k8s)

    async def scenario() -> None:
        nodes = await _daemon_nodes(k8s, ns, 3)
        try:
            await call(apps.create_namespaced_daemon_set, ns, _daemons(ns, max_unavailable))
            old = await _daemons_ready(k8s, ns, nodes)
            await _set_daemon_image(k8s, ns, "daemon:2")

            async def replaced() -> dict[str, dict[str, Any]]:
                pods = await _per_node(k8s, ns, nodes)
                return pods if pods and all(_image(p) == "daemon:2" for p in pods.values()) else {}

            # Nobody marks the new pods ready: all were replaced without waiting for any.
            new = await _within(replaced, "every node's pod replaced")
            assert not any(_is_ready(p) for p in new.values())
            assert not {p["metadata"]["name"] for p in new.values()} & {
                p["metadata"]["name"] for p in old.values()
            }
        finally:
            await _delete_nodes(k8s, nodes)

    asyncio.run(scenario())


def test_daemon_set_rolling_update_keeps_max_unavailable(
    admin: tuple[client.ApiClient, str],
) -> None:
    k8s, ns = admin
    apps = client.AppsV1Api(k8s)

    async def scenario() -> None:
        nodes = await _daemon_nodes(k8s, ns, 3)
        try:
            await call(apps.create_namespaced_daemon_set, ns, _daemons(ns, 1))
            await _daemons_ready(k8s, ns, nodes)
            await _set_daemon_image(k8s, ns, "daemon:2")
            loop = asyncio.get_running_loop()
            seen: dict[str, float] = {}  # new pod -> when first seen
            most_down = 0

            async def rolled_out() -> bool:
                nonlocal most_down
                pods = _active(await _live_pods(k8s, ns))
                up = {target_node(p) for p in pods if _is_ready(p)}
                down = len(set(nodes) - up)
                most_down = max(most_down, down)
                if down > 1:
                    pytest.fail(f"{down} nodes without a ready daemon pod at once")
                new = [p for p in pods if _image(p) == "daemon:2"]
                if len(new) == len(pods) == len(nodes) and all(_is_ready(p) for p in new):
                    return True
                for pod in new:
                    name = pod["metadata"]["name"]
                    # A kubelet that takes its time: a too eager controller shows meanwhile.
                    if (
                        not _is_ready(pod)
                        and loop.time() - seen.setdefault(name, loop.time()) > 0.3
                    ):
                        await _mark_ready(k8s, pod)
                return False

            await _within(rolled_out, "the rollout to finish")
            assert most_down == 1  # one node at a time, not none
        finally:
            await _delete_nodes(k8s, nodes)

    asyncio.run(scenario())


def test_daemon_set_on_delete_keeps_outdated_pods(admin: tuple[client.ApiClient, str]) -> None:
    k8s, ns = admin
    apps = client.AppsV1Api(k8s)
    core = client.CoreV1Api(k8s)

    async def scenario() -> None:
        nodes = await _daemon_nodes(k8s, ns, 2)
        try:
            body = _daemons(ns, None, strategy="OnDelete")
            await call(apps.create_namespaced_daemon_set, ns, body)
            old = await _daemons_ready(k8s, ns, nodes)
            await _set_daemon_image(k8s, ns, "daemon:2")

            async def observed() -> bool:
                """The controller has handled the new template (its status says so)."""
                ds = _dict(k8s, await call(apps.read_namespaced_daemon_set, "daemon", ns))
                generation = ds["metadata"]["generation"]
                return generation > 1 and ds["status"].get("observedGeneration") == generation

            await _within(observed, "the DaemonSet controller observing the new template")
            pods = await _per_node(k8s, ns, nodes)
            assert {p["metadata"]["name"] for p in pods.values()} == {
                p["metadata"]["name"] for p in old.values()
            }
            # Deleted by hand, a pod comes back with the new template.
            await call(core.delete_namespaced_pod, old[nodes[0]]["metadata"]["name"], ns)

            async def updated() -> dict[str, dict[str, Any]]:
                pods = await _per_node(k8s, ns, nodes)
                ok = pods and _image(pods[nodes[0]]) == "daemon:2"
                return pods if ok and _image(pods[nodes[1]]) == "daemon:1" else {}

            await _within(updated, "the deleted pod recreated from the new template")
        finally:
            await _delete_nodes(k8s, nodes)

    asyncio.run(scenario())


# --- pure helpers ---------------------------------------------------------------------------


def _pod(
    name: str, node: str, *, ready: bool, revision: str = "r1", **extra: Any
) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {
            "name": name,
            "uid": name,
            "labels": {"controller-revision-hash": revision},
            "creationTimestamp": extra.get("created", "2030-01-01T00:00:00Z"),
        },
        "spec": {"nodeName": node},
        "status": {"phase": extra.get("phase", "Running"), "conditions": conditions},
    }


def test_rolling_deletes_respects_the_unavailable_budget() -> None:
    nodes = ["a", "b", "c", "d"]
    old = {n: [_pod(f"p-{n}", n, ready=True)] for n in nodes}
    # Budget 1: one outdated pod at a time, in node order.
    assert [p["metadata"]["name"] for p in rolling_deletes(nodes, old, "r2", 1)] == ["p-a"]
    # 50% of 4 = 2; 100% = all at once; an unready outdated pod is replaced regardless.
    assert len(rolling_deletes(nodes, old, "r2", "50%")) == 2
    assert len(rolling_deletes(nodes, old, "r2", "100%")) == 4
    assert len(rolling_deletes(nodes, old, "r2", "30%")) == 2  # rounded up
    # A node being replaced (no pod yet) uses the budget up.
    missing = {**old, "a": []}
    assert rolling_deletes(nodes, missing, "r2", 1) == []
    # So does an updated pod that is not ready yet; an unready old pod still goes.
    mixed = {
        **old,
        "a": [_pod("new-a", "a", ready=False, revision="r2")],
        "c": [_pod("p-c", "c", ready=False)],
    }
    assert [p["metadata"]["name"] for p in rolling_deletes(nodes, mixed, "r2", 1)] == ["p-c"]
    # Everything up to date: nothing to do.
    new = {n: [_pod(f"n-{n}", n, ready=True, revision="r2")] for n in nodes}
    assert rolling_deletes(nodes, new, "r2", 1) == []


def test_deletion_order_prefers_unready_and_newest() -> None:
    older = _pod("older", "n1", ready=True, created="2020-01-01T00:00:00Z")
    newer = _pod("newer", "n2", ready=True, created="2029-01-01T00:00:00Z")
    unready = _pod("unready", "n3", ready=False, created="2010-01-01T00:00:00Z")
    pending = _pod("pending", "n4", ready=False, phase="Pending")
    unscheduled = _pod("unscheduled", "", ready=False, phase="Pending")
    pods = [older, newer, unready, pending, unscheduled]
    order = [p["metadata"]["name"] for p in deletion_order(pods)]
    assert order == ["unscheduled", "pending", "unready", "newer", "older"]
    # Two pods doubled up on one node go before a lone one.
    doubled = [_pod("x1", "n1", ready=True), _pod("x2", "n1", ready=True)]
    lone = _pod("lone", "n2", ready=True, created="2031-01-01T00:00:00Z")
    assert deletion_order([lone, *doubled])[-1]["metadata"]["name"] == "lone"


def test_scaled_values_and_template_hashes() -> None:
    assert scaled_value("25%", 3, round_up=True) == 1
    assert scaled_value("25%", 3, round_up=False) == 0
    assert scaled_value(2, 10, round_up=False) == 2
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}
    digest = pod_template_hash(template)
    assert digest and set(digest) <= set("bcdfghjklmnpqrstvwxz2456789")
    # Stable across representations (a null or empty field), changed by a collision count.
    noisy = {
        "metadata": {"labels": {"app": "web"}, "creationTimestamp": None, "annotations": {}},
        "spec": template["spec"],
    }
    assert pod_template_hash(noisy) == digest
    assert pod_template_hash(template, 1) != digest
