"""A simulated node for kubelet-plugin tests: host directories, fixture files, and a real
agent (in-process on its own event loop, or as a real process) talking to the emulator."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from eventually import eventually
from kubernetes import client

from agent.plugin.app import PluginApp
from agent.plugin.config import PluginConfig, add_plugin_flags, config_from_args
from api import names
from api.kubelet.dra.v1 import api_pb2 as v1
from api.kubelet.dra.v1 import api_pb2_grpc as v1_grpc
from api.kubelet.dra.v1beta1 import api_pb2 as v1beta1
from api.kubelet.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from api.kubelet.pluginregistration import api_pb2 as reg
from api.kubelet.pluginregistration import api_pb2_grpc as reg_grpc
from sim.cluster.node import FABRIC_IMEX_MGMT, PROC_DEVICES, clique_id, nvml_fixture

DRIVER_NS = "nvidia-dra-driver"
NODE = "node-a"
class FlatHost:
    """A host that runs the agent as a program with flags (as systemd does), every host
    path it uses in one directory: `plugins`, `registry`, `cdi`, `driver-root`, and the
    simulated kernel and GPU files (`proc-devices`, `fabric-imex-mgmt`, `boot_id`,
    `nvml.json`) of `sim.cluster.node`."""

    def __init__(self, root: Path, name: str, clique: int | None) -> None:
        self.root = Path(root)
        self.name = name
        for d in ("plugins", "registry", "cdi", "driver-root/dev", "pods"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "proc-devices").write_text(PROC_DEVICES)
        (self.root / "fabric-imex-mgmt").write_text(FABRIC_IMEX_MGMT)
        if not (self.root / "boot_id").exists():
            (self.root / "boot_id").write_text(f"{uuid.uuid4()}\n")
        self.set_clique(clique)

    @property
    def clique_id(self) -> str:
        return clique_id(self.clique)

    def set_clique(self, clique: int | None) -> None:
        self.clique = clique
        (self.root / "nvml.json").write_text(json.dumps(nvml_fixture(self.name, clique)))

    def agent_args(self, kubeconfig: Path, namespace: str) -> list[str]:
        """`compute-domain-agent plugin` flags pointing every host path into the root."""
        r = self.root
        return [
            "--node-name", self.name,
            "--namespace", namespace,
            "--kubeconfig", str(kubeconfig),
            "--cdi-root", str(r / "cdi"),
            "--container-driver-root", str(r / "driver-root"),
            "--nvidia-driver-root", str(r / "driver-root"),
            "--kubelet-registrar-directory-path", str(r / "registry"),
            "--kubelet-plugins-directory-path", str(r / "plugins"),
            "--proc-devices-path", str(r / "proc-devices"),
            "--fabric-imex-mgmt-path", str(r / "fabric-imex-mgmt"),
            "--boot-id-path", str(r / "boot_id"),
            "--nvml-source", f"fixture:{r / 'nvml.json'}",
        ]  # fmt: skip

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugins" / names.DRIVER_NAME

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.root / "registry" / names.REGISTRATION_SOCKET_NAME

    def cdi_files(self) -> list[str]:
        return sorted(p.name for p in (self.root / "cdi").iterdir())


@dataclass
class NodeEnv:
    """Host directories of one node (`FlatHost`) plus the agent flags the plugin tests
    use."""

    root: Path
    node_name: str = NODE
    clique: int | None = 3
    extra_args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.host = FlatHost(self.root, self.node_name, self.clique)

    @property
    def clique_id(self) -> str:
        return self.host.clique_id

    def set_clique(self, clique: int | None) -> None:
        self.clique = clique
        self.host.set_clique(clique)

    def args(self, kubeconfig: Path) -> list[str]:
        return [
            *self.host.agent_args(kubeconfig, DRIVER_NS),
            "--prepare-timeout",
            "5s",
            *self.extra_args,
        ]

    def config(self, kubeconfig: Path) -> PluginConfig:
        import argparse

        parser = argparse.ArgumentParser()
        add_plugin_flags(parser)
        return config_from_args(parser.parse_args(self.args(kubeconfig)))

    @property
    def plugin_dir(self) -> Path:
        return self.host.plugin_dir

    @property
    def dra_socket(self) -> Path:
        return self.host.dra_socket

    @property
    def registration_socket(self) -> Path:
        return self.host.registration_socket

    def cdi_files(self) -> list[str]:
        return self.host.cdi_files()


class AgentThread:
    """The real PluginApp on its own event loop in a background thread."""

    def __init__(self, config: PluginConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = PluginApp(config)
        self.run(self.app.start())

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        try:
            self.run(self.app.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


class AgentProcess:
    """`compute-domain-agent plugin` as a real process (for crash tests and the CLI)."""

    def __init__(self, env: NodeEnv, kubeconfig: Path, program: Path | None = None) -> None:
        binary = program or Path(sys.executable).parent / "compute-domain-agent"
        self.log = env.root / "agent.log"
        self.proc = subprocess.Popen(
            [binary, "plugin", *env.args(kubeconfig)],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )
        # A killed agent leaves its socket files behind: wait until this one answers.
        answering(env, self.proc.poll, self.log, timeout=60, interval=0.05)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def terminate(self) -> int:
        self.proc.terminate()
        return self.proc.wait(20)


def answering(env: NodeEnv, exited: Callable[[], int | None], log: Path, *,
              timeout: float, interval: float) -> None:
    """Until the agent of `env` answers kubelet's calls; fails with its log's end if it
    exits (`exited()` is its exit status once it has) or stays silent for `timeout`."""
    kubelet = Kubelet(env)

    def answers() -> bool:
        code = exited()
        if code is not None:
            pytest.fail(f"agent exited {code}: {log.read_text()[-3000:]}")
        try:
            kubelet.get_info(timeout=0.5)
            kubelet.prepare([], timeout=0.5)
        except grpc.RpcError:
            return False
        return True

    try:
        eventually(answers, "the agent answering", timeout=timeout, interval=interval)
    except AssertionError as err:
        raise AssertionError("agent did not start: " + log.read_text()[-3000:]) from err


def waits_of(agent: AgentThread) -> list[tuple[int, ...]]:
    """The view generation each waiting Prepare had checked when it went back to waiting
    (`Driver` waits for the next change in `ClusterView.wait_for_change`): proof that a
    Prepare saw a state and did not return."""
    view = agent.app.cluster
    waits: list[tuple[int, ...]] = []
    real = view.wait_for_change

    async def wait_for_change(since: tuple[int, ...], timeout: float) -> None:
        waits.append(since)
        await real(since, timeout)

    view.wait_for_change = wait_for_change  # type: ignore[method-assign]
    return waits


class Kubelet:
    """The kubelet side of the gRPC contract, over the real unix sockets."""

    def __init__(self, env: NodeEnv) -> None:
        self.env = env

    def get_info(self, timeout: float = 10) -> reg.PluginInfo:
        with grpc.insecure_channel(f"unix://{self.env.registration_socket}") as ch:
            return reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=timeout)

    def notify(self, registered: bool, error: str = "") -> None:
        with grpc.insecure_channel(f"unix://{self.env.registration_socket}") as ch:
            reg_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=registered, error=error), timeout=10
            )

    def prepare(
        self, claims: list[dict[str, Any]], *, beta: bool = False, timeout: float = 45
    ) -> Any:
        return self._dra("NodePrepareResources", claims, beta, timeout)

    def unprepare(self, claims: list[dict[str, Any]], *, beta: bool = False) -> Any:
        return self._dra("NodeUnprepareResources", claims, beta, 45)

    def _dra(self, rpc: str, claims: list[dict[str, Any]], beta: bool, timeout: float) -> Any:
        """Call DRA service method `rpc` (v1, or v1beta1 with `beta`) for `claims`."""
        mod, stub_mod = (v1beta1, v1beta1_grpc) if beta else (v1, v1_grpc)
        refs = [
            mod.Claim(namespace=md["namespace"], uid=md["uid"], name=md["name"])
            for md in (c["metadata"] for c in claims)
        ]
        request = getattr(mod, f"{rpc}Request")(claims=refs)
        with grpc.insecure_channel(f"unix://{self.env.dra_socket}") as ch:
            return getattr(stub_mod.DRAPluginStub(ch), rpc)(request, timeout=timeout)


class ClusterObjects:
    """Creates what the controller and scheduler would: CDs, claims with allocations."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.resource = client.ResourceV1Api(api)

    def node(self, name: str) -> None:
        self.core.create_node({"metadata": {"name": name}})

    def namespace(self, name: str) -> None:
        self.core.create_namespace({"metadata": {"name": name}})

    def compute_domain(
        self, name: str, namespace: str = "default", mode: str = "Single"
    ) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.PLURAL_COMPUTE_DOMAINS,
            {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND_COMPUTE_DOMAIN,
                "metadata": {"name": name},
                "spec": {
                    "numNodes": 0,
                    "channel": {
                        "resourceClaimTemplate": {"name": f"{name}-channel"},
                        "allocationMode": mode,
                    },
                },
            },
        )

    def claim(
        self,
        name: str,
        namespace: str,
        node: str,
        *,
        device: str,
        request: str,
        parameters: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """A claim as the scheduler leaves it: created, then allocated via /status."""
        klass = (
            names.DEVICE_CLASS_DAEMON
            if device.startswith("daemon")
            else names.DEVICE_CLASS_DEFAULT_CHANNEL
        )
        spec: dict[str, Any] = {
            "devices": {"requests": [{"name": request, "exactly": {"deviceClassName": klass}}]}
        }
        config = []
        if parameters is not None:
            config = [
                {
                    "requests": [request],
                    "opaque": {"driver": names.DRIVER_NAME, "parameters": parameters},
                }
            ]
            spec["devices"]["config"] = config
        created = self.resource.create_namespaced_resource_claim(
            namespace, {"metadata": {"name": name}, "spec": spec}
        )
        body = self.api.sanitize_for_serialization(created)
        body["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": request,
                            "driver": names.DRIVER_NAME,
                            "pool": node,
                            "device": device,
                        }
                    ],
                    "config": [dict(c, source="FromClaim") for c in config],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            }
        }
        updated = self.resource.replace_namespaced_resource_claim_status(name, namespace, body)
        return self.api.sanitize_for_serialization(updated)

    def channel_claim(
        self,
        name: str,
        namespace: str,
        cd_uid: str,
        mode: str | None = None,
        *,
        device: str = "channel-0",
    ) -> dict[str, Any]:
        """A workload's channel claim on node `NODE` for the ComputeDomain `cd_uid`."""
        params = channel_params(cd_uid, mode)
        return self.claim(
            name, namespace, NODE, device=device, request="channel", parameters=params
        )

    def daemon_claim(self, name: str, cd_uid: str, *, reserved: bool = True) -> dict[str, Any]:
        """An IMEX daemon's claim (driver namespace) on node `NODE` for `cd_uid`, reserved
        for a daemon pod of the domain's DaemonSet there, as the scheduler leaves it
        (`reserved=False`: the caller makes and reserves the pod)."""
        params = daemon_params(cd_uid)
        claim = self.claim(
            name, DRIVER_NS, NODE, device="daemon-0", request="daemon", parameters=params
        )
        if not reserved:
            return claim
        return self.reserve(claim, self.daemon_pod(f"{name}-pod", cd_uid))

    def daemon_set(self, cd_uid: str) -> dict[str, Any]:
        """The domain's IMEX daemon DaemonSet (created once), as the controller makes it."""
        ds_name = names.daemon_object_name(cd_uid)
        apps = client.AppsV1Api(self.api)
        try:
            return self.api.sanitize_for_serialization(
                apps.read_namespaced_daemon_set(ds_name, DRIVER_NS))
        except client.ApiException as err:
            if err.status != 404:
                raise
        labels = {names.LABEL_COMPUTE_DOMAIN: cd_uid}
        body = {
            "metadata": {"name": ds_name, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {
                    "containers": [{"name": "imex", "image": "example/imex:1"}]}},
            },
        }
        return self.api.sanitize_for_serialization(
            apps.create_namespaced_daemon_set(DRIVER_NS, body))

    def daemon_pod(self, name: str, cd_uid: str, *, node: str = NODE,
                   owner: dict[str, Any] | None = None) -> dict[str, Any]:
        """A daemon pod bound to `node`, controlled by the domain's DaemonSet (or `owner`)."""
        ds = self.daemon_set(cd_uid)
        ref = owner or {"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": True,
                        "name": ds["metadata"]["name"], "uid": ds["metadata"]["uid"]}
        body = {
            "metadata": {"name": name, "labels": {names.LABEL_COMPUTE_DOMAIN: cd_uid},
                         "ownerReferences": [ref]},
            "spec": {"nodeName": node, "containers": [{"name": "imex", "image": "x"}]},
        }
        return self.api.sanitize_for_serialization(
            self.core.create_namespaced_pod(DRIVER_NS, body))

    def reserve(self, claim: dict[str, Any], *pods: dict[str, Any]) -> dict[str, Any]:
        """The claim reserved for `pods` (what the scheduler writes before binding)."""
        md = claim["metadata"]
        claim["status"]["reservedFor"] = [
            {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
            for p in pods
        ]
        updated = self.resource.replace_namespaced_resource_claim_status(
            md["name"], md["namespace"], claim)
        return self.api.sanitize_for_serialization(updated)

    def set_clique_daemon(
        self, cd_uid: str, clique_id: str, node: str, status: str, index: int = 0
    ) -> None:
        name = names.clique_object_name(cd_uid, clique_id)
        args = (names.GROUP, names.VERSION, DRIVER_NS, names.PLURAL_CLIQUES)
        daemon = {
            "nodeName": node,
            "ipAddress": "127.0.1.1",
            "cliqueID": clique_id,
            "index": index,
            "status": status,
        }
        try:
            current = self.custom.get_namespaced_custom_object(*args, name)
        except client.ApiException:
            self.custom.create_namespaced_custom_object(
                *args,
                {
                    "apiVersion": names.API_VERSION,
                    "kind": names.KIND_CLIQUE,
                    "metadata": {"name": name},
                    "daemons": [daemon],
                },
            )
            return
        current["daemons"] = [d for d in current.get("daemons") or [] if d["nodeName"] != node] + [
            daemon
        ]
        self.custom.replace_namespaced_custom_object(*args, name, current)

    def set_cd_node_status(self, cd: dict[str, Any], node: str, status: str) -> None:
        current = self.custom.get_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            cd["metadata"]["namespace"],
            names.PLURAL_COMPUTE_DOMAINS,
            cd["metadata"]["name"],
        )
        current["status"] = {
            "status": "NotReady",
            "nodes": [
                {
                    "name": node,
                    "ipAddress": "10.0.0.1",
                    "cliqueID": "",
                    "index": -1,
                    "status": status,
                }
            ],
        }
        self.custom.replace_namespaced_custom_object_status(
            names.GROUP,
            names.VERSION,
            cd["metadata"]["namespace"],
            names.PLURAL_COMPUTE_DOMAINS,
            cd["metadata"]["name"],
            current,
        )

    def node_labels(self, node: str) -> dict[str, str]:
        return self.core.read_node(node).metadata.labels or {}


def channel_params(cd_uid: str, mode: str | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND_CHANNEL_CONFIG,
        "domainID": cd_uid,
    }
    if mode is not None:
        p["allocationMode"] = mode
    return p


def daemon_params(cd_uid: str) -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.KIND_DAEMON_CONFIG, "domainID": cd_uid}


@pytest.fixture
def cluster(k8s, project_crds) -> ClusterObjects:
    """The driver's namespace and node `NODE` in the API emulator, with the project's CRDs."""
    objects = ClusterObjects(k8s)
    objects.namespace(DRIVER_NS)
    objects.node(NODE)
    return objects


def waiting_reason(resp: Any, uid: str) -> str:
    """The reason a claim is still waiting at the end of a Prepare call (an error that
    kubelet records on the pod and retries), failing if the claim got anything else."""
    from agent.plugin.claim_errors import PREPARE_FAILED_PREFIX, STILL_RETRYING, STILL_WAITING

    assert uid in resp.claims, f"claim {uid} left out of the response"
    error = resp.claims[uid].error
    assert error.startswith(PREPARE_FAILED_PREFIX), error
    reason = error.split(f":{uid}': ", 1)[-1]
    assert reason.startswith((STILL_WAITING, STILL_RETRYING)), error
    return reason
