"""The real controller on its own event loop in a thread, against the API emulator."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from eventually import eventually
from kubernetes import client

from api import names
from controller.app import ControllerApp
from controller.config import ControllerConfig, add_controller_flags, config_from_args

DRIVER_NS = "nvidia-dra-driver"


def make_config(*extra: str) -> ControllerConfig:
    parser = argparse.ArgumentParser()
    add_controller_flags(parser)
    return config_from_args(parser.parse_args([
        "--namespace", DRIVER_NS, "--image-name", "registry.example/compute-domain:test",
        "--resync-interval", "3600", *extra]))


class ControllerThread:
    def __init__(self, apiserver: Any, config: ControllerConfig, *, leader: bool = False
                 ) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = self.call(lambda: ControllerApp(config, apiserver.api_client()))
        self.stop_event = self.call(asyncio.Event)
        coro = self.app.run(self.stop_event) if leader else self.app.run_controller()
        self.task: asyncio.Task[Any] = self.call(lambda: self.loop.create_task(coro))
        if not leader:
            wait_for(lambda: self.app.leading.is_set(), 30)

    def call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def idle(self, timeout: float = 30) -> None:
        asyncio.run_coroutine_threadsafe(self.app.queue.idle(), self.loop).result(timeout)

    def close(self) -> None:
        """Stop the controller and wait until its finally-blocks ran (informers stopped)."""
        if not self.loop.is_running():
            return

        async def shutdown() -> None:
            self.stop_event.set()
            self.task.cancel()
            # Cancelled, or the error a test provoked: either way it has stopped.
            with contextlib.suppress(BaseException):
                await self.task

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(20)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def wait_for(predicate: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    """`eventually` (tests/eventually.py) with this module's defaults."""
    return eventually(predicate, what, timeout=timeout)


class Api:
    """Thin helpers over the real client for the tests."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.resource = client.ResourceV1Api(api)

    def create_cd(self, name: str, namespace: str = "default", *, num_nodes: int = 0,
                  mode: str | None = None, template: str | None = None) -> dict[str, Any]:
        channel: dict[str, Any] = {"resourceClaimTemplate": {"name": template or f"{name}-rct"}}
        if mode:
            channel["allocationMode"] = mode
        return self.custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL_COMPUTE_DOMAINS, {
                "apiVersion": names.API_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
                "metadata": {"name": name}, "spec": {"numNodes": num_nodes, "channel": channel}})

    def cd(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL_COMPUTE_DOMAINS, name)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise

    def delete_cd(self, name: str, namespace: str = "default") -> None:
        self.custom.delete_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL_COMPUTE_DOMAINS, name)

    def rct(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return self.api.sanitize_for_serialization(
                self.resource.read_namespaced_resource_claim_template(name, namespace))
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise

    def ds(self, name: str, namespace: str = DRIVER_NS) -> dict[str, Any] | None:
        try:
            return self.api.sanitize_for_serialization(
                self.apps.read_namespaced_daemon_set(name, namespace))
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise

    def read_clique(self, cd_uid: str, clique_id: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, DRIVER_NS, names.PLURAL_CLIQUES,
                names.clique_object_name(cd_uid, clique_id))
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise

    def clique(self, cd_uid: str, clique_id: str, daemons: list[dict[str, Any]]) -> None:
        self.custom.create_namespaced_custom_object(
            names.GROUP, names.VERSION, DRIVER_NS, names.PLURAL_CLIQUES, {
                "apiVersion": names.API_VERSION, "kind": names.KIND_CLIQUE,
                "metadata": {"name": names.clique_object_name(cd_uid, clique_id), "labels": {
                    names.LABEL_COMPUTE_DOMAIN: cd_uid, names.LABEL_CLIQUE_ID: clique_id}},
                "daemons": daemons})

    def daemon_pod(self, name: str, cd_uid: str, node: str, *, clique_id: str | None,
                   ip: str, ready: bool = True) -> None:
        labels = {names.LABEL_COMPUTE_DOMAIN: cd_uid}
        if clique_id is not None:
            labels[names.LABEL_CLIQUE_ID] = clique_id
        pod = self.core.create_namespaced_pod(DRIVER_NS, {
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "d", "image": "i"}]}})
        body = self.api.sanitize_for_serialization(pod)
        body["status"] = {"phase": "Running", "podIP": ip, "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}
        self.core.replace_namespaced_pod_status(name, DRIVER_NS, body)
