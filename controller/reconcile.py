"""One reconcile of one ComputeDomain, idempotent.

Live CD: finalizer, generated objects, status. Deleting CD: the reference's strict order,
finalizers removed only from objects the server already shows terminating, the CD's own
finalizer last, once the generated objects are really gone. No CD at all (a stale UID):
delete what still carries its label and clear the finalizers in the same pass. The
reference's is `onAddOrUpdate` in computedomain.go and its cleanup loops (cleanup.go) in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/tree/main/cmd/compute-domain-controller.

A reconcile that cannot progress says why on the CD (an Event and the Reconciled=False
condition) instead of retrying silently.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from api import names
from api.clique import ComputeDomainClique
from api.computedomain import Condition, StoredComputeDomain
from api.objects import K8sObject
from api.pod import Pod, PodList
from controller import render, status
from controller.caches import Caches, TypedCache, cd_label
from controller.config import ControllerConfig
from controller.events import EventRecorder
from controller.statuspacer import StatusPacer
from runtime.draclient import DraApi
from runtime.kubecall import call
from runtime.logsetup import vlog

log = logging.getLogger(__name__)
CONDITION = "Reconciled"
# At most one write of a ComputeDomain's node entries per this many seconds (Reconciler).
STATUS_INTERVAL_S = 1.0
TEMPLATES = "resourceclaimtemplates"


class RetryError(Exception):
    """Not done yet (waiting for the server to catch up): reconcile again later."""


@dataclass
class BlockedError(Exception):
    """The CD cannot progress until someone acts; reported on the CD."""

    reason: str
    message: str


class Reconciler:
    def __init__(self, api: client.ApiClient, dra: DraApi, config: ControllerConfig,
                 caches: Caches, events: EventRecorder, *,
                 requeue_after: Callable[[str, float], None] | None = None,
                 status_interval: float = STATUS_INTERVAL_S) -> None:
        """`requeue_after(uid, seconds)` runs a reconcile of `uid` later (the work queue's
        add_after); with it, a domain's per-node status entries are written in batches at
        most once per `status_interval` (statuspacer.py)."""
        self._requeue_after = requeue_after
        self._status_interval = status_interval
        self._pacer = StatusPacer(status_interval if requeue_after is not None else 0.0)
        self._api = api
        self._cfg = config
        self._caches = caches
        # Typed reads of the caches' items, each parsed once per version of the object.
        self._cds = TypedCache(StoredComputeDomain, lambda: caches.cds)
        self._templates = TypedCache(K8sObject, lambda: caches.templates)
        self._daemonsets = TypedCache(K8sObject, lambda: caches.daemonsets)
        self._pods = TypedCache(Pod, lambda: caches.pods)
        self._node_objects = TypedCache(K8sObject, lambda: caches.nodes)
        self._cliques = TypedCache(ComputeDomainClique, lambda: caches.cliques)
        self._events = events
        self._settings = config.render_settings()
        self._custom = client.CustomObjectsApi(api)
        self._dra = dra
        self._apps = client.AppsV1Api(api)
        self._core = client.CoreV1Api(api)
        self.writes: dict[str, int] = {}

    def _count(self, uid: str) -> None:
        self.writes[uid] = self.writes.get(uid, 0) + 1

    def domains(self) -> list[StoredComputeDomain]:
        """Every ComputeDomain the cache holds (that parses)."""
        return self._cds.values()

    def referenced_uids(self) -> set[str]:
        """Every CD UID some generated object or label still refers to (for cleanup)."""
        uids = set(self._caches.cds.items)
        for kind, typed in (("ResourceClaimTemplate", self._templates),
                            ("DaemonSet", self._daemonsets), ("Pod", self._pods),
                            ("Node", self._node_objects), ("ComputeDomainClique", self._cliques)):
            # The reference controller's words for each periodic sweep (its cleanup.go).
            vlog(log, 6, "Cleanup: perform for %s objects", kind)
            uids |= {u for o in typed.values() if (u := o.label(names.LABEL_COMPUTE_DOMAIN))}
        return uids

    # --- entry point ---------------------------------------------------------------

    async def reconcile(self, uid: str) -> None:
        cd = self._cds.get(uid)
        if cd is None:
            self._pacer.forget(uid)
            await self._cleanup_stale(uid)
            return
        # The reference controller's words (its computedomain.go), which its tests grep.
        vlog(log, 2, "Processing added or updated ComputeDomain: %s/%s/%s", cd.namespace,
             cd.name, uid)
        try:
            if cd.deleting:
                await self._delete(cd)
            else:
                await self._ensure(cd)
        except BlockedError as blocked:
            await self._report(cd, blocked)
            raise RetryError(blocked.message) from None

    # --- live CD ---------------------------------------------------------------------

    async def _ensure(self, cd: StoredComputeDomain) -> None:
        uid = cd.uid
        cd = await self._add_finalizer(cd)
        if self._cfg.daemon_pods:
            await self._ensure_daemon_objects(uid)
        await self._ensure_workload_template(cd)
        await self._write_status(cd)
        if self._cfg.cliques and not self._cfg.host_managed:
            await self._prune_cliques(uid)

    async def _add_finalizer(self, cd: StoredComputeDomain) -> StoredComputeDomain:
        if names.FINALIZER in cd.finalizers:
            return cd
        body = {"metadata": {"finalizers": [*cd.finalizers, names.FINALIZER],
                             "resourceVersion": cd.metadata.resource_version}}
        updated = await call(self._custom.patch_namespaced_custom_object, names.GROUP,
                             names.VERSION, cd.namespace, names.PLURAL_COMPUTE_DOMAINS,
                             cd.name, body)
        self._count(cd.uid)
        return StoredComputeDomain.from_dict(updated)

    async def _create(self, uid: str, create: Any, *args: Any) -> None:
        try:
            await call(create, *args)
            self._count(uid)
        except ApiException as err:
            if err.status == 403:
                raise BlockedError("Forbidden", f"the controller may not create {args[-1]['kind']} "
                              f"{args[-1]['metadata']['name']}: check its RBAC") from None
            if err.status != 409:
                raise

    async def _ensure_daemon_objects(self, uid: str) -> None:
        managed = self._cfg.managed_namespaces
        if not [o for o in self._templates.labeled(uid, managed)
                if render.is_ours(o, uid, names.TARGET_DAEMON)]:
            rct = render.daemon_claim_template(uid, self._settings)
            await self._create(uid, self._create_template, self._cfg.namespace, rct)
        if not self._daemonsets.labeled(uid, managed):
            ds = render.daemon_set(uid, self._settings)
            await self._create(uid, self._apps.create_namespaced_daemon_set, self._cfg.namespace,
                               ds)

    async def _ensure_workload_template(self, cd: StoredComputeDomain) -> None:
        uid, namespace = cd.uid, cd.namespace
        name = cd.workload_template_name
        if not name:
            # The CRD does not require a spec, so `spec: null` gets through the API.
            raise BlockedError(
                "InvalidSpec",
                "spec.channel.resourceClaimTemplate.name is missing: recreate the "
                "ComputeDomain with a spec naming the workload ResourceClaimTemplate")
        if problem := _object_name_problem(name):
            raise BlockedError(
                "InvalidSpec",
                f"spec.channel.resourceClaimTemplate.name {_shown(name)} is not a valid "
                f"ResourceClaimTemplate name: {problem}; the spec is immutable, so recreate "
                "the ComputeDomain with a valid name")
        key = f"{namespace}/{name}"
        existing = self._templates.get(key)
        if existing is not None and render.is_ours(existing, uid, names.TARGET_WORKLOAD):
            return
        if existing is None:
            rct = render.workload_claim_template(cd, self._settings)
            try:
                await call(self._create_template, namespace, rct)
                self._count(uid)
                return
            except ApiException as err:
                if err.status == 403:
                    raise BlockedError("Forbidden", "the controller may not create the "
                                  f"ResourceClaimTemplate {key}: check its RBAC") from None
                if err.status == 422:  # retrying cannot help: say what the server refused
                    raise BlockedError("InvalidSpec", "the API server refused the "
                                       f"ResourceClaimTemplate {key}: "
                                       f"{_server_message(err)}") from None
                if err.status != 409:
                    raise
            # The template may be the one this controller created a moment ago that its
            # cache has not seen yet: only the live object says whether the name is taken.
            live = K8sObject.from_dict(await call(self._dra.read, TEMPLATES, name, namespace))
            if render.is_ours(live, uid, names.TARGET_WORKLOAD):
                return
        raise BlockedError(
            "TemplateNameTaken",
            f"ResourceClaimTemplate {key} already exists and was not created for this "
            "ComputeDomain: rename spec.channel.resourceClaimTemplate.name (the spec is "
            "immutable, so recreate the ComputeDomain) or delete that template")

    # --- status ------------------------------------------------------------------------

    def _nodes(self, cd: StoredComputeDomain) -> list[dict[str, Any]]:
        if self._cfg.host_managed:
            return []
        managed = self._cfg.managed_namespaces
        pods = self._pods.labeled(cd.uid, managed)
        if self._cfg.cliques:
            return status.nodes_from_cliques(self._cliques.labeled(cd.uid, managed), pods)
        if self._cfg.agent_placement:
            return status.nodes_legacy_agents(cd.status_nodes, self._labeled_nodes(cd.uid))
        return status.nodes_legacy(cd.status_nodes, pods)

    def _labeled_nodes(self, uid: str) -> set[str]:
        """The nodes carrying the domain's label: in agent placement, where its node agents
        run IMEX (an agent labels its node before it joins, and unlabels it after it left)."""
        return {o.name for o in self._node_objects.labeled(uid)}

    async def _write_status(self, cd: StoredComputeDomain, *,
                            blocked: BlockedError | None = None) -> None:
        current = cd.status
        current_conditions = list(current.conditions or ()) if current is not None else []
        nodes = self._nodes(cd)
        body = status.status_body(nodes, cd.num_nodes, host_managed=self._cfg.host_managed)
        if blocked is not None:
            # Not reconciled (its workloads get no channel): never Ready, whatever the
            # daemons report; the condition says why.
            body["status"] = names.STATUS_NOT_READY
        conditions = _with_condition(current_conditions, cd.metadata.generation, blocked)
        if conditions:
            body["conditions"] = [c.as_read() for c in conditions]
        summary_same = ((current.status if current is not None else None) == body["status"]
                        and _conditions_equal(current_conditions, conditions))
        changed = status.nodes_changed(cd.status_nodes, body.get("nodes") or [])
        if summary_same and not changed:
            self._pacer.nothing_held(cd.uid)
            return
        # Ready/NotReady and conditions are news at once; per-node entries are batched
        # (statuspacer.py).
        if summary_same and blocked is None and self._requeue_after is not None:
            # The domain's size: what it will hold (numNodes) while it still fills up.
            size = max(len(nodes), cd.num_nodes or 0)
            wait = self._pacer.hold_for(cd.uid, asyncio.get_running_loop().time(), changed,
                                        size)
            if wait is not None:
                self._requeue_after(cd.uid, wait)
                return
        new = cd.as_read(without=frozenset({"status"})) | {"status": body}
        try:
            await call(self._custom.replace_namespaced_custom_object_status, names.GROUP,
                       names.VERSION, cd.namespace, names.PLURAL_COMPUTE_DOMAINS, cd.name, new)
            self._count(cd.uid)
            self._pacer.wrote(cd.uid, asyncio.get_running_loop().time())
            vlog(log, 4, "CDStatusSync: updated ComputeDomain %s/%s: total nodes=%d",
                 cd.namespace, cd.name, len(body.get("nodes") or []))
        except ApiException as err:
            if err.status in (404, 409):  # a newer copy is on its way through the watch
                where = f"{cd.namespace}/{cd.name}"
                raise RetryError(f"status of {where}: {err.reason}") from None
            raise

    async def _report(self, cd: StoredComputeDomain, blocked: BlockedError) -> None:
        await self._events.warning(cd, blocked.reason, blocked.message)
        try:
            await self._write_status(cd, blocked=blocked)
        except (RetryError, ApiException) as err:
            log.info("could not record condition on %s: %s", cd.name, err)

    async def _prune_cliques(self, uid: str) -> None:
        managed = self._cfg.managed_namespaces
        if self._cfg.agent_placement:
            await self._prune_agent_cliques(uid)
            return
        pod_nodes = status.pod_node_names(self._pods.labeled(uid, managed))
        live: dict[str, set[str]] = {}  # namespace -> nodes of the daemon pods the server has
        for clique in self._cliques.labeled(uid, managed):
            kept = status.prune_clique_daemons(clique, pod_nodes)
            if kept is None:
                continue
            namespace = clique.namespace
            # The pod cache can lag the clique cache (a dropped watch, a re-list): a daemon
            # that just joined would look stale and lose its entry, as in the reference
            # (https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/1418).
            # Removing is destructive, so ask the server which daemon pods exist first
            # (once per namespace and pass).
            if namespace not in live:
                # Unparsed (_preload_content=False): the JSON, not the client's V1PodList.
                listed = await call(self._core.list_namespaced_pod, namespace,
                                    label_selector=f"{names.LABEL_COMPUTE_DOMAIN}={uid}",
                                    _preload_content=False)
                pods = PodList.from_dict(json.loads(cast(Any, listed).data)).items
                live[namespace] = status.pod_node_names(pods or ())
            await self._replace_daemons(uid, clique,
                                        status.prune_clique_daemons(clique, live[namespace]))

    async def _prune_agent_cliques(self, uid: str) -> None:
        """Agent placement: drop the entries of nodes that no longer carry the domain's
        label (a node removed, or its agent gone for good after Unprepare failed to leave).
        As for daemon pods, the cache is confirmed with the server before anything goes."""
        labeled = self._labeled_nodes(uid)
        live: set[str] | None = None
        for clique in self._cliques.labeled(uid, self._cfg.managed_namespaces):
            if status.prune_clique_daemons(clique, labeled) is None:
                continue
            if live is None:
                listed = await call(self._core.list_node,
                                    label_selector=f"{names.LABEL_COMPUTE_DOMAIN}={uid}",
                                    _preload_content=False)
                items = json.loads(cast(Any, listed).data).get("items") or []
                live = {K8sObject.from_dict(i).name for i in items}
            await self._replace_daemons(uid, clique, status.prune_clique_daemons(clique, live))

    async def _replace_daemons(self, uid: str, clique: ComputeDomainClique,
                               kept: list[dict[str, Any]] | None) -> None:
        if kept is None:
            return
        kept_nodes = {d.get("nodeName") for d in kept}
        removed = [d.node_name for d in clique.daemons or () if d.node_name not in kept_nodes]
        where = f"{clique.namespace}/{clique.name}"
        # The reference controller's words (its cdstatus.go); the nodes as Go prints a slice.
        log.info("CliqueCleanup: removing stale daemon entries from clique %s: [%s]", where,
                 " ".join(str(n) for n in removed))
        body = clique.as_read(without=frozenset({"daemons"})) | {"daemons": kept}
        try:
            await call(self._custom.replace_namespaced_custom_object, names.GROUP,
                       names.VERSION, clique.namespace, names.PLURAL_CLIQUES, clique.name, body)
            self._count(uid)
            log.info("CliqueCleanup: successfully removed %d stale daemon entries from clique "
                     "%s", len(removed), where)
        except ApiException as err:
            if err.status not in (404, 409):
                raise
            raise RetryError(f"pruning clique {clique.name}: {err.reason}") from None

    async def _delete_cliques(self, uid: str) -> None:
        """Agent placement: no daemon pod owns a domain's cliques (the garbage collector
        removes them with the pods in pod placement), so they go with the domain. An agent
        still running IMEX for it sees its domain deleting and does not join again."""
        if not self._cfg.cliques:
            return
        for clique in self._cliques.labeled(uid, self._cfg.managed_namespaces):
            if clique.deleting:
                continue
            try:
                await call(self._custom.delete_namespaced_custom_object, names.GROUP,
                           names.VERSION, clique.namespace, names.PLURAL_CLIQUES, clique.name)
                self._count(uid)
            except ApiException as err:
                if err.status != 404:
                    raise

    # --- deletion ----------------------------------------------------------------------

    async def _delete(self, cd: StoredComputeDomain) -> None:
        uid = cd.uid
        await self._delete_generated(uid)
        if names.FINALIZER in cd.finalizers:
            body = {"metadata": {"finalizers": [f for f in cd.finalizers
                                                if f != names.FINALIZER],
                                 "resourceVersion": cd.metadata.resource_version}}
            try:
                await call(self._custom.patch_namespaced_custom_object, names.GROUP,
                           names.VERSION, cd.namespace, names.PLURAL_COMPUTE_DOMAINS,
                           cd.name, body)
                self._count(uid)
            except ApiException as err:
                if err.status != 404:
                    raise

    async def _delete_generated(self, uid: str) -> None:
        """Delete the workload and daemon templates and the DaemonSets, remove the node
        labels, then the finalizers of objects now terminating; raises RetryError until
        everything is gone. The reference's order; the CD's own finalizer goes after."""
        workload = [o for o in self._templates.labeled(uid)
                    if render.is_ours(o, uid, names.TARGET_WORKLOAD)]
        daemon = [o for o in self._templates.labeled(uid, self._cfg.managed_namespaces)
                  if render.is_ours(o, uid, names.TARGET_DAEMON)]
        daemonsets = self._daemonsets.labeled(uid, self._cfg.managed_namespaces)
        # Listed objects carry no kind (a list's items do not): say which API each one is.
        generated: list[tuple[K8sObject, bool]] = [*((o, False) for o in [*workload, *daemon]),
                     *((o, True) for o in daemonsets)]
        for obj, is_ds in generated:
            await self._delete_object(uid, obj, is_ds)
        await self._remove_node_labels(uid)
        if self._cfg.agent_placement:
            await self._delete_cliques(uid)
        for obj, is_ds in generated:
            await self._remove_finalizer(uid, obj, is_ds)
        remaining = [*self._templates.labeled(uid), *self._daemonsets.labeled(uid)]
        if remaining:
            raise RetryError(f"ComputeDomain {uid}: {len(remaining)} generated objects still "
                             "exist")

    def _create_template(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._dra.create(TEMPLATES, body, namespace)

    def _api_for(self, daemonset: bool) -> tuple[Any, Any, Any]:
        """(read, delete, replace) of a DaemonSet or a ResourceClaimTemplate, each taking
        (name, namespace[, body])."""
        if daemonset:
            return (self._apps.read_namespaced_daemon_set, self._apps.delete_namespaced_daemon_set,
                    self._apps.replace_namespaced_daemon_set)
        return (functools.partial(self._dra.read, TEMPLATES),
                functools.partial(self._dra.delete, TEMPLATES),
                functools.partial(self._dra.replace, TEMPLATES))

    async def _delete_object(self, uid: str, obj: K8sObject, daemonset: bool) -> None:
        if obj.deleting:
            return
        _, delete, _ = self._api_for(daemonset)
        try:
            await call(delete, obj.name, obj.namespace)
            self._count(uid)
        except ApiException as err:
            if err.status != 404:
                raise

    async def _remove_finalizer(self, uid: str, obj: K8sObject, daemonset: bool) -> None:
        """Only from an object the server shows terminating: read it live, not from cache,
        so a stale object goes in the same pass as its delete."""
        read, _, replace = self._api_for(daemonset)
        name, namespace = obj.name, obj.namespace
        try:
            live: dict[str, Any] = self._api.sanitize_for_serialization(
                await call(read, name, namespace))
        except ApiException as err:
            if err.status == 404:
                return
            raise
        current = K8sObject.from_dict(live)
        if names.FINALIZER not in current.finalizers:
            return
        if not current.deleting:
            kind = "DaemonSet" if daemonset else "ResourceClaimTemplate"
            raise RetryError(f"attempting to remove finalizer before {kind} "
                             f"{namespace}/{name} marked for deletion")
        # A full update carrying the read resourceVersion: a strategic merge patch cannot
        # shrink a finalizer list, and a conflict must be seen, not overwritten.
        finalizers = [f for f in current.finalizers if f != names.FINALIZER]
        body = {**live, "metadata": {**live["metadata"], "finalizers": finalizers}}
        try:
            await call(replace, name, namespace, body)
            self._count(uid)
        except ApiException as err:
            if err.status not in (404, 409):
                raise
            raise RetryError(f"finalizer of {name}: {err.reason}") from None

    async def _remove_node_labels(self, uid: str) -> None:
        nodes = await call(self._core.list_node,
                           label_selector=f"{names.LABEL_COMPUTE_DOMAIN} in ({uid})")
        for node in nodes.items:
            md = node.metadata
            if md is None:  # the server always sends it
                continue
            labels = md.labels if md.labels else {}
            md.labels = {k: v for k, v in labels.items() if k != names.LABEL_COMPUTE_DOMAIN}
            try:
                await call(self._core.replace_node, md.name, node)
                self._count(uid)
            except ApiException as err:
                if err.status not in (404, 409):
                    raise
                raise RetryError(f"node {md.name}: {err.reason}") from None

    async def _cleanup_stale(self, uid: str) -> None:
        """Objects and labels of a CD that no longer exists, deleted and their finalizers
        cleared in one pass (the reference's cleanup loops usually need a second pass,
        10 minutes later)."""
        if not self._caches.cds.synced.is_set():
            raise RetryError("ComputeDomain cache not synced yet")
        stale = [*self._templates.labeled(uid), *self._daemonsets.labeled(uid)]
        labeled_nodes = self._node_objects.labeled(uid)
        if not stale and not labeled_nodes:
            return
        log.info("cleaning up %d objects and %d node labels of deleted ComputeDomain %s",
                 len(stale), len(labeled_nodes), uid)
        await self._delete_generated(uid)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# An object name: a DNS-1123 subdomain (kube-apiserver's ValidateObjectMeta).
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _object_name_problem(name: str) -> str | None:
    if len(name.encode()) > 253:
        return f"it has {len(name.encode())} characters, at most 253 are allowed"
    if not _OBJECT_NAME.fullmatch(name):
        return ("a name consists of lower case letters, digits, '-' and '.', and starts "
                "and ends with a letter or digit (a lowercase RFC 1123 subdomain)")
    return None


def _shown(name: str) -> str:
    return repr(name if len(name) <= 64 else f"{name[:61]}...")


def _server_message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body or "{}").get("message") or err.reason)
    except (ValueError, AttributeError):
        return str(err.reason)


def _with_condition(current: list[Condition], generation: int | None,
                    blocked: BlockedError | None) -> list[Condition]:
    """Reconciled=False with the reason while blocked; removed again once it recovers."""
    others = [c for c in current if c.type != CONDITION]
    if blocked is None:
        return others
    previous = next((c for c in current if c.type == CONDITION), None)
    if (previous is not None and previous.reason == blocked.reason
            and previous.message == blocked.message):
        return current
    condition = Condition(type=CONDITION, status="False", reason=blocked.reason,
                          message=blocked.message, last_transition_time=_now())
    if generation is not None:
        condition.observed_generation = generation
    return [*others, condition]


def _conditions_equal(a: list[Condition], b: list[Condition]) -> bool:
    def key(c: Condition) -> tuple[str, str, str, str]:
        return (c.type or "", c.status or "", c.reason or "", c.message or "")
    return sorted(map(key, a)) == sorted(map(key, b))


__all__ = ["BlockedError", "Reconciler", "RetryError", "cd_label"]
