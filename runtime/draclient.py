"""resource.k8s.io in whichever version the cluster serves, as v1-shaped dicts.

Kubernetes 1.32 serves only v1beta1, 1.33 v1beta1 and v1beta2, 1.34 on v1. The driver finds
the newest served version once at start (or takes the one an admin pins, e.g. the chart's
`resourceApiVersion`), sends and reads that version on the wire and hands v1 shapes to its
code (api/draconvert.py). The generic REST calls of `CustomObjectsApi` work for any group and
version and return plain JSON, so no version's generated client models are involved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubernetes import client

from api import draconvert
from api.draconvert import GROUP, KINDS, VERSIONS
from runtime.kubecall import call_retrying

Obj = dict[str, Any]


class ResourceApiError(RuntimeError):
    """The cluster serves no usable resource.k8s.io version (or not the pinned one)."""


def served_versions(api: client.ApiClient) -> list[str]:
    """The resource.k8s.io versions the API server lists in discovery ([] when none)."""
    group = client.ApisApi(api).get_api_versions(_request_timeout=20)
    for g in group.groups or []:
        if g.name == GROUP:
            return [v.version for v in g.versions or []]
    return []


def pick_version(served: list[str], wanted: str = "") -> str:
    """`wanted` when set and served, else the newest of v1, v1beta2, v1beta1 served."""
    if wanted:
        version = draconvert.check_version(wanted)
        if version not in served:
            raise ResourceApiError(
                f"resource API version {draconvert.api_version(version)} was asked for "
                f"(--resource-api-version / RESOURCE_API_VERSION), but the API server serves "
                f"{_listing(served)}; unset it to use the newest served version")
        return version
    for version in VERSIONS:
        if version in served:
            return version
    raise ResourceApiError(
        f"the API server serves {_listing(served)}: Dynamic Resource Allocation needs "
        "Kubernetes 1.32 or later with resource.k8s.io v1, v1beta2 or v1beta1 enabled "
        "(1.32 and 1.33: the DynamicResourceAllocation feature gate and the "
        "resource.k8s.io/v1beta1 runtime config)")


def _listing(served: list[str]) -> str:
    if not served:
        return "no resource.k8s.io version"
    return ", ".join(draconvert.api_version(v) for v in served)


async def discover(api: client.ApiClient, wanted: str = "", *, within: float = 60.0,
                   served: Callable[[client.ApiClient], list[str]] = served_versions
                   ) -> DraApi:
    """The DraApi of the version to speak (pick_version), asking discovery until it names
    one: a kube-apiserver that has just (re)started lists its groups before all of them are
    installed, so "no resource.k8s.io" is believed only after `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        versions = await call_retrying(served, api, within=within)
        try:
            return DraApi(api, pick_version(versions, wanted))
        except ResourceApiError:
            if loop.time() >= deadline:
                raise
        await asyncio.sleep(min(1.0, max(0.0, deadline - loop.time())))


class DraApi:
    """The four DRA resources (plurals of api/draconvert.py KINDS) in one served version.

    Blocking calls, like the generated client's: run them through runtime/kubecall.py `call`.
    """

    def __init__(self, api: client.ApiClient, version: str = "v1") -> None:
        self.version = draconvert.check_version(version)
        self._custom = client.CustomObjectsApi(api)

    @property
    def api_version(self) -> str:
        return draconvert.api_version(self.version)

    def to_v1(self, plural: str) -> Callable[[Obj], Obj]:
        """Converts one object of `plural` as this version serves it to v1 shape."""
        kind = KINDS[plural]
        return lambda obj: draconvert.to_v1(obj, kind, self.version)

    def _out(self, plural: str, obj: Obj) -> Obj:
        """A v1-shaped body as this version takes it (its apiVersion set: the generic calls
        send the body as given)."""
        return draconvert.from_v1({**obj, "apiVersion": draconvert.api_version("v1"),
                                   "kind": KINDS[plural]}, KINDS[plural], self.version)

    def _in(self, plural: str, obj: Any) -> Obj:
        """A served object as the API answered it (a JSON object), in v1 shape."""
        if not isinstance(obj, dict):
            raise TypeError(f"{plural}: expected a JSON object, got {type(obj).__name__}")
        return self.to_v1(plural)(obj)

    def lister(self, plural: str, namespace: str = "") -> Callable[..., Any]:
        """The raw list call of `plural`, for runtime/informer.py (with `to_v1`) and watches: the
        listing and watch events come back in the served version."""
        if namespace:
            def list_namespaced(**kwargs: Any) -> Any:
                return self._custom.list_namespaced_custom_object(
                    GROUP, self.version, namespace, plural, **kwargs)
            return list_namespaced

        def list_all(**kwargs: Any) -> Any:
            return self._custom.list_cluster_custom_object(GROUP, self.version, plural,
                                                           **kwargs)
        return list_all

    def list(self, plural: str, namespace: str = "", **kwargs: Any) -> Obj:
        """The listing with its items in v1 shape."""
        listing = dict(self.lister(plural, namespace)(**kwargs))
        convert = self.to_v1(plural)
        listing["items"] = [convert(o) for o in listing.get("items") or []]
        return listing

    def read(self, plural: str, name: str, namespace: str = "", **kwargs: Any) -> Obj:
        if namespace:
            obj = self._custom.get_namespaced_custom_object(GROUP, self.version, namespace,
                                                            plural, name, **kwargs)
        else:
            obj = self._custom.get_cluster_custom_object(GROUP, self.version, plural, name,
                                                         **kwargs)
        return self._in(plural, obj)

    def create(self, plural: str, body: Obj, namespace: str = "", **kwargs: Any) -> Obj:
        wire = self._out(plural, body)
        if namespace:
            obj = self._custom.create_namespaced_custom_object(GROUP, self.version, namespace,
                                                               plural, wire, **kwargs)
        else:
            obj = self._custom.create_cluster_custom_object(GROUP, self.version, plural, wire,
                                                            **kwargs)
        return self._in(plural, obj)

    def delete(self, plural: str, name: str, namespace: str = "", **kwargs: Any) -> Any:
        if namespace:
            return self._custom.delete_namespaced_custom_object(
                GROUP, self.version, namespace, plural, name, **kwargs)
        return self._custom.delete_cluster_custom_object(GROUP, self.version, plural, name,
                                                         **kwargs)

    def replace(self, plural: str, name: str, namespace: str, body: Obj, **kwargs: Any) -> Obj:
        return self._replace(self._custom.replace_namespaced_custom_object, plural, name,
                             namespace, body, **kwargs)

    def replace_status(self, plural: str, name: str, namespace: str, body: Obj,
                       **kwargs: Any) -> Obj:
        return self._replace(self._custom.replace_namespaced_custom_object_status, plural,
                             name, namespace, body, **kwargs)

    def _replace(self, put: Callable[..., Any], plural: str, name: str, namespace: str,
                 body: Obj, **kwargs: Any) -> Obj:
        obj = put(GROUP, self.version, namespace, plural, name, self._out(plural, body),
                  **kwargs)
        return self._in(plural, obj)
