"""List+watch caches of everything the controller reasons about, each change mapped to the
ComputeDomain it concerns, so a clique or pod update reconciles exactly its CD; and the
typed reads of what they hold."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from kubernetes import client

from api import names
from api.objects import K8sObject, ParsedCache
from runtime.draclient import DraApi
from runtime.informer import Informer

log = logging.getLogger(__name__)
M = TypeVar("M", bound=K8sObject)


def _ns_name(obj: Mapping[str, Any]) -> str:
    md = obj["metadata"]
    return f"{md.get('namespace', '')}/{md['name']}"


def cd_label(obj: Mapping[str, Any]) -> str:
    """The CD label of an object as the API sent it ("" when unlabeled, or when its
    metadata is malformed: a watch callback must not raise). Runs on every watch event, so
    it reads the one label instead of parsing the object (the cache parses it once later)."""
    md = obj.get("metadata")
    labels = md.get("labels") if isinstance(md, Mapping) else None
    value = labels.get(names.LABEL_COMPUTE_DOMAIN) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else ""


class HasItems(Protocol):
    """What is read of an informer: its items, the API's JSON by key."""

    @property
    def items(self) -> Mapping[str, Mapping[str, Any]]: ...


class TypedCache(Generic[M]):
    """An informer's items as `model`s, each parsed once per version of the object.

    An object that does not parse (the API server's schema keeps them out) is an error
    when asked for by key, and is skipped with a warning where objects are listed, so it
    cannot stop the reconciles of other ComputeDomains.
    """

    def __init__(self, model: type[M], informer: Callable[[], HasItems | None]) -> None:
        self._informer = informer
        self._parsed = ParsedCache(model)
        self._reported: dict[str, Mapping[str, Any]] = {}  # key -> the item last warned of

    def _items(self) -> Mapping[str, Mapping[str, Any]]:
        informer = self._informer()
        return informer.items if informer is not None else {}

    def get(self, key: str) -> M | None:
        return self._parsed.get(self._items(), key)

    def values(self) -> list[M]:
        items = self._items()
        models, errors = self._parsed.parse_all(items)
        for key, why in errors.items():
            if self._reported.get(key) is not items[key]:  # once per version of it
                self._reported[key] = items[key]
                log.warning("ignoring %s: %s", key, why)
        if len(self._reported) > len(errors):
            self._reported = {k: v for k, v in self._reported.items() if k in errors}
        return models

    def labeled(self, uid: str, namespaces: tuple[str, ...] | None = None) -> list[M]:
        """The objects labeled with ComputeDomain `uid` (in `namespaces`, when given)."""
        out = []
        for obj in self.values():  # every reconcile, over every object: kept lean
            md = obj.metadata
            if (md.labels and md.labels.get(names.LABEL_COMPUTE_DOMAIN) == uid
                    and (namespaces is None or (md.namespace or "") in namespaces)):
                out.append(obj)
        return out


class Caches:
    def __init__(self, api: client.ApiClient, dra: DraApi, *, driver_managed: bool,
                 cliques: bool, enqueue: Callable[[str], None]) -> None:
        loop = asyncio.get_running_loop()
        custom = client.CustomObjectsApi(api)
        apps = client.AppsV1Api(api)
        core = client.CoreV1Api(api)
        to_dict = api.sanitize_for_serialization
        selector = {"label_selector": names.LABEL_COMPUTE_DOMAIN}

        def by_label(obj: dict[str, Any]) -> None:
            uid = cd_label(obj)
            if uid:
                enqueue(uid)

        def by_uid(obj: dict[str, Any]) -> None:
            enqueue(obj["metadata"]["uid"])

        self.cds = Informer(loop, custom.list_cluster_custom_object, lambda o: o["metadata"][
            "uid"], "computedomains", {"group": names.GROUP, "version": names.VERSION,
                                       "plural": names.PLURAL_COMPUTE_DOMAINS},
            on_change=by_uid)
        self.templates = Informer(loop, dra.lister("resourceclaimtemplates"), _ns_name,
                                  "resourceclaimtemplates", selector, on_change=by_label,
                                  convert=dra.to_v1("resourceclaimtemplates"))
        self.daemonsets: Informer | None = None
        self.pods: Informer | None = None
        self.nodes: Informer | None = None
        self.cliques: Informer | None = None
        if driver_managed:
            self.daemonsets = Informer(loop, apps.list_daemon_set_for_all_namespaces, _ns_name,
                                       "daemonsets", selector, to_dict=to_dict,
                                       on_change=by_label)
            self.pods = Informer(loop, core.list_pod_for_all_namespaces, _ns_name, "pods",
                                 selector, to_dict=to_dict, on_change=by_label)
            self.nodes = Informer(loop, core.list_node, lambda o: o["metadata"]["name"],
                                  "nodes", selector, to_dict=to_dict, on_change=by_label)
            if cliques:
                self.cliques = Informer(
                    loop, custom.list_cluster_custom_object, _ns_name, "computedomaincliques",
                    {"group": names.GROUP, "version": names.VERSION,
                     "plural": names.PLURAL_CLIQUES}, on_change=by_label)

    @property
    def all(self) -> list[Informer]:
        return [i for i in (self.cds, self.templates, self.daemonsets, self.pods, self.nodes,
                            self.cliques) if i is not None]

    def start(self) -> None:
        for informer in self.all:
            informer.start()

    def stop(self) -> None:
        for informer in self.all:
            informer.stop()

    async def wait_synced(self, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            await asyncio.gather(*(i.synced.wait() for i in self.all))
