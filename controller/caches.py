"""List+watch caches of everything the controller reasons about, each change mapped to the
ComputeDomain it concerns, so a clique or pod update reconciles exactly its CD."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubernetes import client

from api import names
from runtime.draclient import DraApi
from runtime.informer import Informer

Obj = dict[str, Any]


def _ns_name(obj: Obj) -> str:
    md = obj["metadata"]
    return f"{md.get('namespace', '')}/{md['name']}"


def cd_label(obj: Obj) -> str:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(names.LABEL_COMPUTE_DOMAIN, "")


class Caches:
    def __init__(self, api: client.ApiClient, dra: DraApi, *, driver_managed: bool,
                 cliques: bool, enqueue: Callable[[str], None]) -> None:
        loop = asyncio.get_running_loop()
        custom = client.CustomObjectsApi(api)
        apps = client.AppsV1Api(api)
        core = client.CoreV1Api(api)
        to_dict = api.sanitize_for_serialization
        selector = {"label_selector": names.LABEL_COMPUTE_DOMAIN}

        def by_label(obj: Obj) -> None:
            uid = cd_label(obj)
            if uid:
                enqueue(uid)

        def by_uid(obj: Obj) -> None:
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

    @staticmethod
    def labeled(informer: Informer | None, uid: str, namespaces: tuple[str, ...] | None = None
                ) -> list[Obj]:
        if informer is None:
            return []
        return [o for o in informer.items.values() if cd_label(o) == uid and (
            namespaces is None or o["metadata"].get("namespace", "") in namespaces)]

    def referenced_uids(self) -> set[str]:
        """Every CD UID some generated object or label still refers to (for cleanup)."""
        uids = set(self.cds.items)
        for informer in self.all[1:]:
            uids |= {cd_label(o) for o in informer.items.values() if cd_label(o)}
        return uids
