"""The node's ResourceSlice: `channel-0` (and `daemon-0` when driver-managed).

Published at start and kept right: a slice that drifts (someone edited or deleted it, or
the node was recreated with a new UID) is put back on the next reconcile, which runs
periodically and whenever a watch on this node's slices reports a change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from api import names
from runtime.corev1 import CoreV1
from runtime.draclient import DraApi
from runtime.informer import Informer
from runtime.kubecall import call, error_text

log = logging.getLogger(__name__)


def desired_devices(*, host_managed: bool) -> list[dict[str, Any]]:
    def device(kind: str) -> dict[str, Any]:
        return {"name": f"{kind}-0", "attributes": {
            names.ATTRIBUTE_TYPE: {"string": kind}, names.ATTRIBUTE_ID: {"int": 0}}}
    devices = [device(names.DEVICE_TYPE_CHANNEL)]
    if not host_managed:
        devices.append(device(names.DEVICE_TYPE_DAEMON))
    return devices


def slice_body(node: str, owner: dict[str, Any], generation: int,
               devices: list[dict[str, Any]]) -> dict[str, Any]:
    """The node's one ResourceSlice (its pool is the node), owned by the Node object."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"generateName": f"00000-{names.DRIVER_NAME}-{node}-",
                     "ownerReferences": [owner]},
        "spec": {"driver": names.DRIVER_NAME, "nodeName": node,
                 "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                 "devices": devices},
    }


def _by_name(devices: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return sorted(devices or [], key=lambda d: str(d.get("name", "")))


class SlicePublisher:
    def __init__(self, api: client.ApiClient, dra: DraApi, node_name: str, *,
                 host_managed: bool, resync_s: float = 30.0) -> None:
        self._dra = dra
        self._core = CoreV1(api)
        self._node = node_name
        self._devices = desired_devices(host_managed=host_managed)
        self._resync = resync_s
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: Informer | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self.published: dict[str, Any] | None = None

    def _selector(self) -> str:
        return f"spec.nodeName={self._node},spec.driver={names.DRIVER_NAME}"

    async def reconcile(self) -> dict[str, Any]:
        """Create, fix or de-duplicate this node's slice; returns the slice as JSON."""
        node = await call(self._core.read_node, self._node, _request_timeout=20)
        owner = {"apiVersion": "v1", "kind": "Node", "name": self._node,
                 "uid": node["metadata"]["uid"], "controller": True}
        listing = await call(self._dra.list, "resourceslices",
                             field_selector=self._selector(), _request_timeout=20)
        slices: list[dict[str, Any]] = listing["items"]
        keep = None
        for item in sorted(slices, key=lambda s: s["metadata"]["name"]):
            if keep is None and self._matches(item, owner):
                keep = item
                continue
            with contextlib.suppress(ApiException):
                await call(self._dra.delete, "resourceslices", item["metadata"]["name"],
                           _request_timeout=20)
        if keep is None:
            generation = 1 + max((s["spec"].get("pool", {}).get("generation", 0)
                                  for s in slices), default=0)
            body = slice_body(self._node, owner, generation, self._devices)
            keep = await call(self._dra.create, "resourceslices", body, _request_timeout=20)
            log.info("published ResourceSlice %s with %s", keep["metadata"]["name"],
                     ", ".join(d["name"] for d in self._devices))
        self.published = keep
        return keep

    def _matches(self, item: dict[str, Any], owner: dict[str, Any]) -> bool:
        spec = item.get("spec") or {}
        owners = item["metadata"].get("ownerReferences") or []
        # In any order: the reference publishes its devices in Go map order, and a slice
        # it left behind is right as long as it holds the same devices.
        return (_by_name(spec.get("devices")) == _by_name(self._devices)
                and (spec.get("pool") or {}).get("name") == self._node
                and (spec.get("pool") or {}).get("resourceSliceCount") == 1
                and any(o.get("uid") == owner["uid"] for o in owners))

    def kick(self) -> None:
        self._kick.set()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._watch = Informer(
            loop, self._dra.lister("resourceslices"), lambda o: o["metadata"]["name"],
            "resourceslices", {"field_selector": self._selector()},
            convert=self._dra.to_v1("resourceslices"))
        self._watch.start()
        self._task = loop.create_task(self._run())
        self._watch_task = loop.create_task(self._kick_on_change())

    async def _kick_on_change(self) -> None:
        """Any change to this node's slices triggers a reconcile; a reconcile that finds the
        slice right writes nothing, so our own writes settle after one extra pass."""
        assert self._watch is not None
        seen = self._watch.version
        while True:
            await self._watch.changed(seen)
            seen = self._watch.version
            self.kick()

    def cancel(self) -> None:
        """End the watch and the loops without waiting for them (a stop cut short)."""
        if self._watch is not None:
            self._watch.stop()
        for task in (self._watch_task, self._task):
            if task is not None:
                task.cancel()

    async def stop(self) -> None:
        self.cancel()
        for task in (self._watch_task, self._task):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _run(self) -> None:
        while True:
            try:
                await self.reconcile()
            except Exception as err:  # keep serving; the next pass retries
                log.warning("publishing the ResourceSlice failed: %s", error_text(err))
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that races
                # the event being set, and this loop would never stop.
                async with asyncio.timeout(self._resync):
                    await self._kick.wait()
