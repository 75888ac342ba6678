"""The simulated kubelet's pod lifecycle against the API emulator and the real agent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from eventually import eventually_async
from kubernetes import client
from plugin_env import DRIVER_NS, NODE, AgentThread, NodeEnv

from sim.cluster.kubelet import SimKubelet

POD_IP = "127.0.1.5"


@pytest.fixture
def start_node(apiserver, cluster, short_dir, tmp_path) -> Iterator[Callable[..., NodeEnv]]:
    """Starts a node with the real agent (given extra flags) running in a thread."""
    agents: list[AgentThread] = []

    def start(*extra: str) -> NodeEnv:
        env = NodeEnv(short_dir / "n0", extra_args=list(extra))
        agents.append(AgentThread(env.config(apiserver.write_kubeconfig(tmp_path / "kc"))))
        return env

    try:
        yield start
    finally:
        for agent in agents:
            agent.close()


@pytest.fixture
def node(start_node) -> NodeEnv:
    return start_node()


def make_kubelet(k8s: client.ApiClient, env: NodeEnv, **kwargs: Any) -> SimKubelet:
    return SimKubelet(
        k8s,
        NODE,
        registry_dir=env.root / "registry",
        cdi_dirs=[env.root / "cdi"],
        pods_dir=env.root / "pods",
        pod_ip=POD_IP,
        plugin_poll=0.05,
        backoff_base=0.1,
        **kwargs,
    )


def pod_body(
    name: str,
    container: dict[str, Any],
    grace: int = 30,
    *,
    daemon_set: dict[str, Any],
    volumes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A pod of the domain's IMEX daemon DaemonSet (the agent prepares daemon claims for
    those only) using the claim `daemon`."""
    ds = daemon_set["metadata"]
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": ds["name"],
        "uid": ds["uid"],
        "controller": True,
    }
    return {
        "metadata": {
            "name": name,
            "labels": dict(ds.get("labels") or {}),
            "ownerReferences": [owner],
        },
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": grace,
            "resourceClaims": [{"name": "imex", "resourceClaimName": "daemon"}],
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "imex"}]}}
                | container
            ],
            **({"volumes": volumes} if volumes else {}),
        },
    }


async def reserve(k8s: client.ApiClient, claim: dict[str, Any], pod: Any) -> None:
    """What the scheduler does after allocation: reserve the claim for the pod."""
    resource = client.ResourceV1Api(k8s)
    claim = k8s.sanitize_for_serialization(
        await asyncio.to_thread(resource.read_namespaced_resource_claim, "daemon", DRIVER_NS)
    )
    claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": pod.metadata.name, "uid": pod.metadata.uid}
    ]
    await asyncio.to_thread(
        resource.replace_namespaced_resource_claim_status, "daemon", DRIVER_NS, claim
    )


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 10) -> Any:
    """The first truthy result of `check`, polled until `timeout` (tests/eventually.py)."""
    return await eventually_async(check, timeout=timeout, interval=0.05)


def count_claim_reads(kubelet: SimKubelet) -> list[str]:
    """The claims its pod workers read (a worker re-reads a claim not reserved yet)."""
    reads: list[str] = []
    real = kubelet.read_claim

    async def read_claim(namespace: str, name: str) -> Any:
        reads.append(name)
        return await real(namespace, name)

    kubelet.read_claim = read_claim  # type: ignore[method-assign]
    return reads


def read_pod(k8s: client.ApiClient, name: str) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    core = client.CoreV1Api(k8s)

    async def read() -> dict[str, Any] | None:
        try:
            pod = await asyncio.to_thread(core.read_namespaced_pod, name, DRIVER_NS)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return k8s.sanitize_for_serialization(pod)

    return read


def condition(pod: dict[str, Any] | None, kind: str) -> str | None:
    for c in ((pod or {}).get("status") or {}).get("conditions") or ():
        if c["type"] == kind:
            return c["status"]
    return None


def test_workload_pod_is_prepared_runs_and_is_removed_with_its_claim(k8s, cluster, node):
    cd_uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    claim = cluster.daemon_claim("daemon", cd_uid, reserved=False)
    core = client.CoreV1Api(k8s)
    read = read_pod(k8s, "work")

    async def main() -> None:
        kubelet = make_kubelet(k8s, node)
        reads = count_claim_reads(kubelet)
        kubelet.start()
        try:
            pod = await asyncio.to_thread(
                core.create_namespaced_pod,
                DRIVER_NS,
                pod_body("work", {}, daemon_set=cluster.daemon_set(cd_uid)),
            )
            # Not reserved yet: kubelet must not prepare it. Its worker read the claim, found
            # it not reserved, and read it again after waiting instead of preparing.
            await eventually_async(lambda: reads.count("daemon") >= 2, "the claim read again")
            assert (await read())["status"].get("phase") in (None, "Pending")
            assert node.cdi_files() == ["k8s.compute-domain.nvidia.com-device_base.yaml"]
            await reserve(k8s, claim, pod)

            async def running() -> dict[str, Any] | None:
                current = await read()
                return current if condition(current, "Ready") == "True" else None

            current = await eventually(running)
            status = current["status"]
            assert status["phase"] == "Running"
            assert status["podIP"] == POD_IP
            assert {c["type"] for c in status["conditions"]} == {
                "PodScheduled",
                "PodReadyToStartContainers",
                "Initialized",
                "ContainersReady",
                "Ready",
            }
            [cs] = status["containerStatuses"]
            assert cs["name"] == "main" and cs["ready"] and "running" in cs["state"]
            view = json.loads((node.root / "pods" / f"{DRIVER_NS}_work" / "main.json").read_text())
            assert view["env"]["COMPUTE_DOMAIN_UUID"] == cd_uid
            assert view["env"]["CLIQUE_ID"] == node.clique_id
            imexd = [m for m in view["mounts"] if m["containerPath"] == "/imexd"]
            assert len(imexd) == 1
            assert Path(imexd[0]["hostPath"]).is_relative_to(node.plugin_dir)
            uid = claim["metadata"]["uid"]
            assert any(uid in f for f in node.cdi_files())

            await asyncio.to_thread(core.delete_namespaced_pod, "work", DRIVER_NS)

            async def gone() -> bool:
                return await read() is None

            await eventually(gone)
            assert node.cdi_files() == ["k8s.compute-domain.nvidia.com-device_base.yaml"]
            assert not (node.root / "pods" / f"{DRIVER_NS}_work").exists()
        finally:
            await kubelet.stop()

    asyncio.run(main())


def test_prepare_failure_is_reported_and_retried(k8s, cluster, start_node):
    """A claim whose ComputeDomain does not exist fails preparation: Events, retries."""
    node = start_node("--prepare-timeout", "1s")
    cd_uid = "00000000-0000-0000-0000-000000000000"
    claim = cluster.daemon_claim("daemon", cd_uid, reserved=False)
    core = client.CoreV1Api(k8s)

    async def main() -> None:
        kubelet = make_kubelet(k8s, node)
        kubelet.start()
        try:
            pod = await asyncio.to_thread(
                core.create_namespaced_pod,
                DRIVER_NS,
                pod_body("work", {}, daemon_set=cluster.daemon_set(cd_uid)),
            )
            await reserve(k8s, claim, pod)

            async def events() -> list[Any]:
                listed = await asyncio.to_thread(core.list_namespaced_event, DRIVER_NS)
                return [
                    e
                    for e in listed.items
                    if e.reason == "FailedPrepareDynamicResources"
                    and e.involved_object.uid == pod.metadata.uid
                ]

            found = await eventually(lambda: _at_least(events, 2), timeout=15)
            assert "NodePrepareResources" in found[0].message
            assert (await read_pod(k8s, "work")())["status"].get("phase") in (None, "Pending")
        finally:
            await kubelet.stop()

    asyncio.run(main())


async def _at_least(check: Callable[[], Awaitable[list[Any]]], n: int) -> list[Any] | None:
    found = await check()
    return found if len(found) >= n else None


FAKE_DAEMON = """#!/bin/sh
trap 'echo term >> "$OUT/terms"; exit 0' TERM
id -u > "$OUT/uid"
cat /etc/hosts > "$OUT/hosts"
ls /imexd > "$OUT/imexd"
test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo yes > "$OUT/token"
env > "$OUT/env.tmp" && mv "$OUT/env.tmp" "$OUT/env"  # whole, never half-written
echo start >> "$OUT/starts"  # after the trap: a start line means SIGTERM is handled
while true; do sleep 0.05; done
"""


def test_daemon_container_runs_with_env_probes_restarts_and_stops(k8s, cluster, node, tmp_path):
    cd_uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    claim = cluster.daemon_claim("daemon", cd_uid, reserved=False)
    core = client.CoreV1Api(k8s)
    read = read_pod(k8s, "daemon")
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    script = bin_dir / "fake-daemon"
    script.write_text(FAKE_DAEMON)
    script.chmod(0o755)
    container = {
        "command": ["fake-daemon", "run"],
        "volumeMounts": [{"name": "out", "mountPath": "/out"}],
        "env": [
            {"name": "OUT", "value": "/out"},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        ],
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", 'test -e "$OUT/ready"']},
            "periodSeconds": 10,
        },
        "livenessProbe": {
            "exec": {"command": ["sh", "-c", 'test ! -e "$OUT/die"']},
            # Probed every 0.1 s (the cap), restarted after the probe's own window of 1 s.
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
    }

    async def main() -> None:
        kubelet = make_kubelet(k8s, node, path_extra=[bin_dir], probe_period_cap=0.1)
        kubelet.start()
        try:
            pod = await asyncio.to_thread(
                core.create_namespaced_pod,
                DRIVER_NS,
                pod_body(
                    "daemon",
                    container,
                    grace=2,
                    daemon_set=cluster.daemon_set(cd_uid),
                    volumes=[{"name": "out", "hostPath": {"path": str(out)}}],
                ),
            )
            await reserve(k8s, claim, pod)
            await eventually(lambda: _exists(out / "env"))
            env = dict(
                line.split("=", 1) for line in (out / "env").read_text().splitlines() if "=" in line
            )
            assert env["NODE_NAME"] == NODE
            assert env["POD_IP"] == POD_IP
            assert env["POD_UID"] == pod.metadata.uid
            assert env["COMPUTE_DOMAIN_UUID"] == cd_uid
            assert env["PATH"].startswith(str(bin_dir))
            # A container: root by default (a host image), the pod's /etc/hosts, the
            # domain directory bind-mounted at /imexd, the ServiceAccount token projected.
            assert (out / "uid").read_text().strip() == "0"
            assert f"{POD_IP}\tdaemon" in (out / "hosts").read_text()
            [imexd] = [d for d in node.plugin_dir.glob("domains/*") if d.is_dir()]
            assert (out / "imexd").read_text().split() == sorted(p.name for p in imexd.iterdir())
            assert (out / "token").read_text().strip() == "yes"
            assert "KUBECONFIG" not in env  # in-cluster configuration, as on a cluster

            async def phase_ready() -> tuple[str, str | None]:
                current = await read()
                return (current or {}).get("status", {}).get("phase"), condition(current, "Ready")

            async def running_not_ready() -> bool:
                return await phase_ready() == ("Running", "False")

            async def ready() -> bool:
                return await phase_ready() == ("Running", "True")

            await eventually(running_not_ready)
            (out / "ready").touch()
            await eventually(ready)

            # A failed liveness probe restarts the process.
            (out / "die").touch()

            async def restarted() -> bool:
                current = await read()
                [cs] = current["status"]["containerStatuses"]
                return cs["restartCount"] >= 1 and "running" in cs["state"]

            await eventually(lambda: _lines(out / "terms", 1))
            (out / "die").unlink()
            await eventually(restarted)
            await eventually(ready)
            assert (await read())["status"]["phase"] == "Running"
            await eventually(lambda: _lines(out / "starts", 2))  # the new one traps TERM

            await asyncio.to_thread(core.delete_namespaced_pod, "daemon", DRIVER_NS)

            async def gone() -> bool:
                return await read() is None

            await eventually(gone)
            assert len((out / "terms").read_text().splitlines()) == 2
            assert node.cdi_files() == ["k8s.compute-domain.nvidia.com-device_base.yaml"]
        finally:
            await kubelet.stop()

    asyncio.run(main())


async def _exists(path: Path) -> bool:
    return path.exists()


async def _lines(path: Path, n: int) -> bool:
    return path.exists() and len(path.read_text().splitlines()) >= n


def test_daemon_that_exits_is_restarted_and_the_pod_stays_running(k8s, cluster, node, tmp_path):
    cd_uid = cluster.compute_domain("cd1")["metadata"]["uid"]
    claim = cluster.daemon_claim("daemon", cd_uid, reserved=False)
    core = client.CoreV1Api(k8s)
    read = read_pod(k8s, "daemon")
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    script = bin_dir / "fake-daemon"
    script.write_text('#!/bin/sh\necho start >> "$OUT/starts"\nexit 3\n')
    script.chmod(0o755)
    container = {
        "command": ["fake-daemon"],
        "env": [{"name": "OUT", "value": "/out"}],
        "volumeMounts": [{"name": "out", "mountPath": "/out"}],
    }

    async def main() -> None:
        kubelet = make_kubelet(k8s, node, path_extra=[bin_dir])
        kubelet.start()
        try:
            pod = await asyncio.to_thread(
                core.create_namespaced_pod,
                DRIVER_NS,
                pod_body(
                    "daemon",
                    container,
                    daemon_set=cluster.daemon_set(cd_uid),
                    volumes=[{"name": "out", "hostPath": {"path": str(out)}}],
                ),
            )
            await reserve(k8s, claim, pod)
            await eventually(lambda: _lines(out / "starts", 3))

            async def restarted() -> dict[str, Any] | None:
                """Restarted twice, and between two runs (while one runs, for the instant
                before it exits again, a container without a readiness probe is Ready)."""
                current = await read()
                statuses = (current or {}).get("status", {}).get("containerStatuses") or []
                between = statuses and "running" not in statuses[0]["state"]
                return current if between and statuses[0]["restartCount"] >= 2 else None

            current = await eventually(restarted)
            assert current["status"]["phase"] == "Running"
            [cs] = current["status"]["containerStatuses"]
            assert cs["lastState"]["terminated"]["exitCode"] == 3
            assert condition(current, "Ready") == "False"
            await asyncio.to_thread(core.delete_namespaced_pod, "daemon", DRIVER_NS)

            async def gone() -> bool:
                return await read() is None

            await eventually(gone)
        finally:
            await kubelet.stop()

    asyncio.run(main())


def test_an_event_the_api_server_cannot_take_is_dropped_not_raised(tmp_path, caplog) -> None:
    """With the API server down (connections refused) the kubelet's Events are lost, as
    the real kubelet's broadcaster drops them, and nothing that records one fails: a
    container's start used to die here, so a restarting kube-apiserver left pods that
    never ran (CI: the 20-node bring-up through API faults)."""
    import socket

    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = client.Configuration()
    config.host = f"http://127.0.0.1:{port}"
    kubelet = SimKubelet(client.ApiClient(config), NODE, registry_dir=tmp_path / "registry",
                         cdi_dirs=[tmp_path / "cdi"], pods_dir=tmp_path / "pods",
                         pod_ip=POD_IP)
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}}

    async def main() -> None:
        await kubelet.record_event(pod, "Started", "Container started", kind="Normal")
        kubelet.post_event(pod, "Pulled", "already present", kind="Normal")
        await asyncio.gather(*kubelet._events)

    with caplog.at_level("WARNING"):
        asyncio.run(main())
    lost = [r.getMessage() for r in caplog.records if "not recorded" in r.getMessage()]
    assert len(lost) == 2 and "event Started on default/p not recorded" in lost[0], lost
