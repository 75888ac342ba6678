"""Init containers on the simulated kubelet, as a user sees them: `kubectl get pod`,
`kubectl logs -c`, the pod's status through the API.

One running cluster (one node, the driver installed, its kubelet-plugin pod's own init
container included) serves the module; each test uses a namespace of its own. The init
containers are shell commands of a host image, sharing an emptyDir with the containers.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from eventually import eventually
from kubernetes import client

from sim.cluster.cluster import ClusterSpec, SimCluster
from sim.cluster.leftovers import process_leftovers

TIMEOUT = 60.0  # generous: the machine may be busy; every wait ends as soon as it holds
Obj = dict[str, Any]


class _Loop:
    """An event loop in a thread: the cluster's actors run there for the whole module."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[Any], timeout: float = 180) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclass
class Env:
    cluster: SimCluster
    kubectl_bin: Path
    core: client.CoreV1Api
    namespace: str = ""

    def kubectl(self, *args: str, ns: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.kubectl_bin), "--kubeconfig", str(self.cluster.kubeconfigs["admin"]),
             "-n", ns or self.namespace, *args],
            capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip

    def pod(self, name: str) -> Obj:
        return self.core.api_client.sanitize_for_serialization(
            self.core.read_namespaced_pod(name, self.namespace)
        )

    def status_cell(self, name: str) -> str:
        """The STATUS column of `kubectl get pod NAME`."""
        out = self.kubectl("get", "pod", name, "--no-headers")
        assert out.returncode == 0, out.stderr
        return out.stdout.split()[2]

    def create(self, name: str, spec: Obj) -> None:
        self.core.create_namespaced_pod(self.namespace, {"metadata": {"name": name}, "spec": spec})


@pytest.fixture(scope="module")
def running(kubectl_bin: Path) -> Iterator[Env]:
    root = Path(tempfile.mkdtemp(prefix="cd-init-", dir="/tmp"))
    loop = _Loop()
    cluster = SimCluster(ClusterSpec(root=root, nodes=1, cliques=1))
    admin: client.ApiClient | None = None
    try:
        loop.run(cluster.start())
        admin = cluster.control_plane.admin.api_client()
        yield Env(cluster, kubectl_bin, client.CoreV1Api(admin))
    finally:
        if admin is not None:
            admin.close()
        loop.run(cluster.stop())
        loop.close()
        left = process_leftovers(root)
        shutil.rmtree(root, ignore_errors=True)
        assert left == [], left


@pytest.fixture
def env(running: Env) -> Iterator[Env]:
    """The cluster, with a fresh namespace whose default ServiceAccount exists."""
    ns = f"init-{uuid.uuid4().hex[:8]}"
    running.core.create_namespace({"metadata": {"name": ns}})
    wait_for(lambda: running.core.list_namespaced_service_account(ns).items, "the default SA")
    running.namespace = ns
    try:
        yield running
    finally:
        running.core.delete_namespace(ns)


def wait_for(check: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    """The first truthy result of `check`, polled until `timeout` (then a failure)."""
    return eventually(check, what, timeout=timeout, interval=0.1)


def pod_when(env: Env, name: str, holds: Callable[[Obj], Any], what: str) -> Obj:
    """The pod, once `holds(pod)` (polled until TIMEOUT)."""
    return wait_for(lambda: (pod := env.pod(name)) and holds(pod) and pod, what)  # type: ignore[no-any-return]


def shell(name: str, script: str) -> Obj:
    return {
        "name": name,
        "image": "busybox",
        "command": ["/bin/sh", "-c", script],
        "volumeMounts": [{"name": "work", "mountPath": "/work"}],
    }


def pod_spec(inits: list[Obj], main: str, restart: str = "Always") -> Obj:
    return {
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 1,
        "volumes": [{"name": "work", "emptyDir": {}}],
        "initContainers": inits,
        "containers": [shell("main", main)],
    }


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def condition(pod: Obj, kind: str) -> Obj:
    found = [c for c in (pod.get("status") or {}).get("conditions") or () if c["type"] == kind]
    return found[0] if found else {}


def init_status(pod: Obj, name: str = "init") -> Obj:
    found = [s for s in (pod.get("status") or {}).get("initContainerStatuses") or ()
             if s["name"] == name]  # fmt: skip
    return found[0] if found else {}


def main_status(pod: Obj) -> Obj:
    found = (pod.get("status") or {}).get("containerStatuses") or ()
    return found[0] if found else {}


def test_the_plugin_pods_init_container_found_the_nodes_driver(running: Env) -> None:
    """The driver's own DaemonSet: its init container (`compute-domain-agent prestart`)
    found the simulated node's nvidia-smi and libnvidia-ml.so.1 and completed."""
    ns = running.cluster.namespace
    pods = running.core.list_namespaced_pod(ns).items
    [plugin] = [p.metadata.name for p in pods if "kubelet-plugin" in p.metadata.name]
    running.namespace = ns
    pod = running.pod(plugin)
    [status] = pod["status"]["initContainerStatuses"]
    assert status["state"]["terminated"]["reason"] == "Completed", status
    assert status["ready"] is True
    assert condition(pod, "Initialized")["status"] == "True"
    logs = running.kubectl("logs", plugin, "-c", status["name"], ns=ns)
    assert logs.returncode == 0, logs.stderr
    assert "NVIDIA driver found under" in logs.stdout, logs.stdout
    assert "/usr/bin/nvidia-smi (NVIDIA-SMI version" in logs.stdout


def test_init_container_runs_to_completion_before_the_container(env: Env) -> None:
    """The container reads what the init container wrote into the emptyDir: under
    restartPolicy Never a container started before the file existed would fail the pod."""
    env.create("order", pod_spec(
        [shell("init", "sleep 0.5; echo written-by-init > /work/stamp")],
        "cat /work/stamp", restart="Never",
    ))  # fmt: skip
    pod = pod_when(env, "order", lambda p: phase(p) in ("Succeeded", "Failed"), "its end")
    assert phase(pod) == "Succeeded", pod["status"]
    terminated = init_status(pod)["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert init_status(pod)["ready"] is True
    assert condition(pod, "Initialized")["status"] == "True"
    logs = env.kubectl("logs", "order", "-c", "main")
    assert logs.stdout == "written-by-init\n", logs
    assert env.status_cell("order") == "Completed"


def test_a_failing_init_container_is_retried_then_the_container_starts(env: Env) -> None:
    """Fails twice (restartPolicy Always: crash-loop back-off), succeeds the third time;
    only then the container starts. `kubectl logs -c init` shows its last run, and
    `--previous` the one before."""
    counting = (
        'n=$(($(cat /work/n 2>/dev/null || echo 0) + 1)); echo $n > /work/n; '
        'echo "init attempt $n"; [ "$n" -ge 3 ]'
    )
    env.create("retry", pod_spec([shell("init", counting)], "cat /work/n; exec sleep 3600"))

    pod = pod_when(env, "retry", lambda p: "running" in main_status(p).get("state", {}),
                   "the container to run")  # fmt: skip
    assert phase(pod) == "Running"
    status = init_status(pod)
    assert status["restartCount"] == 2, status
    assert status["state"]["terminated"]["reason"] == "Completed"
    assert condition(pod, "Initialized")["status"] == "True"
    assert wait_for(lambda: env.status_cell("retry") == "Running", "STATUS Running")
    logs = env.kubectl("logs", "retry", "-c", "init")
    assert logs.returncode == 0 and logs.stdout == "init attempt 3\n", logs
    previous = env.kubectl("logs", "retry", "-c", "init", "--previous")
    assert previous.returncode == 0 and previous.stdout == "init attempt 2\n", previous
    main = wait_for(lambda: env.kubectl("logs", "retry", "-c", "main").stdout, "main's log")
    assert main == "3\n"


def test_a_blocking_init_container_keeps_the_pod_initializing(env: Env) -> None:
    """While the init container waits, the pod is Pending, `kubectl get pod` says
    Init:0/1 and its log is there; once it completes the pod runs."""
    script = "echo waiting for /work/go; while [ ! -e /work/go ]; do sleep 0.1; done; echo done"
    env.create("blocked", pod_spec([shell("init", script)], "exec sleep 3600"))
    pod_when(env, "blocked", lambda p: "running" in init_status(p).get("state", {}),
             "the init container to run")  # fmt: skip
    assert env.status_cell("blocked") == "Init:0/1"
    pod = env.pod("blocked")
    assert phase(pod) == "Pending"
    initialized = condition(pod, "Initialized")
    assert initialized["status"] == "False"
    assert initialized["reason"] == "ContainersNotInitialized"
    assert initialized["message"] == "containers with incomplete status: [init]"
    assert main_status(pod)["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert init_status(pod)["ready"] is False
    logs = wait_for(lambda: env.kubectl("logs", "blocked", "-c", "init").stdout, "init's log")
    assert logs == "waiting for /work/go\n"
    # A user unblocks it from inside the running init container.
    touched = env.kubectl("exec", "blocked", "-c", "init", "--", "touch", "/work/go")
    assert touched.returncode == 0, touched.stderr
    assert wait_for(lambda: env.status_cell("blocked") == "Running", "STATUS Running")
    assert env.kubectl("logs", "blocked", "-c", "init").stdout == "waiting for /work/go\ndone\n"


def test_init_containers_run_in_order_and_once(env: Env) -> None:
    """Two init containers, in order; a crash of the container restarts only it."""
    main = ("if [ ! -e /work/crashed ]; then touch /work/crashed; exit 1; fi; "
            "cat /work/runs; exec sleep 3600")  # fmt: skip
    env.create("twice", pod_spec(
        [shell("first", "echo first >> /work/runs"), shell("second", "echo second >> /work/runs")],
        main,
    ))  # fmt: skip

    def restarted(pod: Obj) -> bool:
        status = main_status(pod)
        return status.get("restartCount") == 1 and "running" in status["state"]

    pod = pod_when(env, "twice", restarted, "the container's restart")
    for name in ("first", "second"):
        assert init_status(pod, name)["restartCount"] == 0
        assert init_status(pod, name)["state"]["terminated"]["reason"] == "Completed"
    logs = wait_for(lambda: env.kubectl("logs", "twice", "-c", "main").stdout, "main's log")
    assert logs == "first\nsecond\n"


def test_init_container_failing_under_restart_policy_never_fails_the_pod(env: Env) -> None:
    env.create("broken", pod_spec([shell("init", "echo no driver; exit 3")], "exec sleep 3600",
                                  restart="Never"))  # fmt: skip
    pod = pod_when(env, "broken", lambda p: phase(p) == "Failed", "the pod to fail")
    terminated = init_status(pod)["state"]["terminated"]
    assert terminated["exitCode"] == 3 and terminated["reason"] == "Error"
    assert main_status(pod)["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert condition(pod, "Initialized")["status"] == "False"
    assert env.status_cell("broken") == "Init:Error"
    assert env.kubectl("logs", "broken", "-c", "init").stdout == "no driver\n"


def test_a_sidecar_init_container_is_refused_saying_why(env: Env) -> None:
    sidecar = shell("init", "exec sleep 3600") | {"restartPolicy": "Always"}
    env.create("sidecar", pod_spec([sidecar], "exec sleep 3600"))
    def refused(pod: Obj) -> bool:
        waiting = init_status(pod).get("state", {}).get("waiting") or {}
        return waiting.get("reason") == "CreateContainerConfigError"

    pod = pod_when(env, "sidecar", refused, "the sidecar's refusal")
    message = init_status(pod)["state"]["waiting"]["message"]
    assert "sidecar containers are not supported by the simulated kubelet" in message
    assert phase(pod) == "Pending"
    assert env.status_cell("sidecar") == "Init:CreateContainerConfigError"
    events = env.core.list_namespaced_event(env.namespace).items
    assert any(
        e.involved_object.name == "sidecar"
        and e.type == "Warning"
        and "not supported by the simulated kubelet" in e.message
        for e in events
    )
