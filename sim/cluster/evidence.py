"""The evidence chain of one ComputeDomain, observed step by step as the cluster converges.

A workload container sees its IMEX channel only after a chain of hand-offs between the
controller, the scheduler, the agent, kubelet and the IMEX daemons. `EvidenceChain` reads
the cluster (the API as an admin, and each node's published container views) and records,
for every link, when it first held and the evidence that it did:

  ComputeDomain UID -> workload ResourceClaimTemplate -> claim allocations -> node labels
  -> daemon pods Ready -> clique entries Ready -> CDI IDs -> channel device in containers

(host-managed mode has no labels, daemon pods or clique entries: the host IMEX is the
agent's business). When the chain does not complete, `first_missing()` names the link that
broke, which is what a user needs to look at first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from api import names
from runtime.draclient import discover
from runtime.kubecall import call

Obj = dict[str, Any]

CHANNEL_DEVICE_PREFIX: Final = "/dev/nvidia-caps-imex-channels/channel"


@dataclass
class Link:
    """One hand-off: its name, whether and when (seconds after the CD existed) it held."""

    key: str
    title: str
    done_at: float | None = None
    count: str = ""
    detail: str = ""
    data: Obj = field(default_factory=dict)

    def to_dict(self) -> Obj:
        return {
            "step": self.key,
            "title": self.title,
            "ok": self.done_at is not None,
            "seconds": None if self.done_at is None else round(self.done_at, 3),
            "count": self.count,
            "detail": self.detail,
            "evidence": self.data,
        }


DRIVER_LINKS: Final = (
    ("computeDomain", "ComputeDomain"),
    ("template", "workload ResourceClaimTemplate"),
    ("allocation", "claims allocated"),
    ("nodeLabel", "nodes labeled"),
    ("daemonPod", "IMEX daemon pods running"),
    ("cliqueEntry", "clique entries Ready"),
    ("cdi", "claims prepared (CDI IDs)"),
    ("device", "channel device in containers"),
)
# Agent placement: the node agents run nvidia-imex; no daemon pod may exist.
AGENT_LINKS: Final = tuple(
    ("agentImex", "IMEX in the node agents (no daemon pods)") if key == "daemonPod"
    else (key, title) for key, title in DRIVER_LINKS
)
HOST_LINKS: Final = (
    ("computeDomain", "ComputeDomain"),
    ("template", "workload ResourceClaimTemplate"),
    ("allocation", "claims allocated"),
    ("cdi", "claims prepared (CDI IDs)"),
    ("device", "channel device in containers"),
)


@dataclass
class Snapshot:
    """The objects one observation looked at (admin view of the API)."""

    cds: list[Obj]
    templates: list[Obj]
    claims: list[Obj]
    pods: list[Obj]
    nodes: list[Obj]
    cliques: list[Obj]

    @classmethod
    async def take(cls, api: client.ApiClient, driver_namespace: str) -> Snapshot:
        custom = client.CustomObjectsApi(api)
        dra = await discover(api)
        core = client.CoreV1Api(api)

        async def items(fn: Any, *args: Any) -> list[Obj]:
            listed = await call(fn, *args)
            if isinstance(listed, dict):
                return list(listed.get("items") or [])
            return [api.sanitize_for_serialization(i) for i in listed.items]

        return cls(
            cds=await items(
                custom.list_cluster_custom_object,
                names.GROUP,
                names.VERSION,
                names.PLURAL_COMPUTE_DOMAINS,
            ),
            templates=await items(dra.list, "resourceclaimtemplates"),
            claims=await items(dra.list, "resourceclaims"),
            pods=await items(core.list_pod_for_all_namespaces),
            nodes=await items(core.list_node),
            cliques=await items(
                custom.list_namespaced_custom_object,
                names.GROUP,
                names.VERSION,
                driver_namespace,
                names.PLURAL_CLIQUES,
            ),
        )


def _md(obj: Mapping[str, Any]) -> Obj:
    return dict(obj.get("metadata") or {})


def _ref(obj: Mapping[str, Any]) -> str:
    md = _md(obj)
    return f"{md.get('namespace')}/{md.get('name')}" if md.get("namespace") else md["name"]


def _fraction(done: int, total: int) -> str:
    return f"{done}/{total}"


class EvidenceChain:
    """Observes one ComputeDomain (by namespace/name) until its workloads see channels."""

    def __init__(
        self,
        namespace: str,
        name: str,
        *,
        driver_namespace: str,
        host_managed: bool,
        node_roots: Mapping[str, Path],
        agent_placement: bool = False,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.driver_namespace = driver_namespace
        self.host_managed = host_managed
        self.agent_placement = agent_placement and not host_managed
        self.node_roots = dict(node_roots)
        links = (HOST_LINKS if host_managed else AGENT_LINKS if self.agent_placement
                 else DRIVER_LINKS)
        self.links = [Link(k, t) for k, t in links]
        self.uid = ""
        self._origin: float | None = None

    @property
    def complete(self) -> bool:
        return all(link.done_at is not None for link in self.links)

    def first_missing(self) -> Link | None:
        return next((link for link in self.links if link.done_at is None), None)

    def link(self, key: str) -> Link:
        return next(link for link in self.links if link.key == key)

    def observe(self, snap: Snapshot, now: float) -> None:
        """Record every link that holds in `snap` and has not been seen before."""
        cd = next(
            (
                c
                for c in snap.cds
                if _md(c).get("namespace") == self.namespace and _md(c).get("name") == self.name
            ),
            None,
        )
        if cd is None:
            return
        if self._origin is None:
            self._origin = now
            self.uid = _md(cd)["uid"]
        previous_done = True
        for link, found in zip(self.links, self._checks(cd, snap), strict=True):
            if link.done_at is None:
                ok, count, detail, data = found
                link.count, link.detail, link.data = count, detail, data
                # A chain: a link holds only once every link before it held (three labeled
                # nodes out of four allocations so far are not "nodes labeled").
                if ok and previous_done:
                    link.done_at = now - self._origin
            previous_done = link.done_at is not None

    # --- the links -----------------------------------------------------------------------

    def _checks(self, cd: Obj, snap: Snapshot) -> list[tuple[bool, str, str, Obj]]:
        template_name = (
            ((cd.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}
        ).get("name", "")
        workloads = self._workload_pods(snap, template_name)
        claims = self._workload_claims(snap, workloads)
        nodes = sorted({c["node"] for c in claims.values() if c["node"]})
        checks = [
            (True, "", f"uid {self.uid}", {"uid": self.uid}),
            self._template(snap, template_name),
            self._allocation(claims, len(workloads)),
        ]
        if not self.host_managed:
            checks += [
                self._labels(snap, nodes),
                self._agent_imex(snap, nodes) if self.agent_placement
                else self._daemon_pods(snap, nodes),
                self._clique_entries(snap, nodes),
            ]
        views = self._views(workloads)
        checks += [self._cdi(views, len(workloads)), self._devices(views, len(workloads))]
        return checks

    def _workload_pods(self, snap: Snapshot, template_name: str) -> list[Obj]:
        return sorted(
            (
                p
                for p in snap.pods
                if _md(p).get("namespace") == self.namespace
                and any(
                    rc.get("resourceClaimTemplateName") == template_name
                    for rc in (p.get("spec") or {}).get("resourceClaims") or ()
                )
            ),
            key=lambda p: _md(p)["name"],
        )

    def _workload_claims(self, snap: Snapshot, pods: Sequence[Obj]) -> dict[str, Obj]:
        """claim name -> {pod, node, device} for the workloads' claims of our driver."""
        by_name = {
            _md(c)["name"]: c for c in snap.claims if _md(c).get("namespace") == self.namespace
        }
        out: dict[str, Obj] = {}
        for pod in pods:
            for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
                claim = by_name.get(status.get("resourceClaimName") or "")
                if claim is None:
                    continue
                results = (
                    ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
                ).get("results") or []
                ours = [r for r in results if r.get("driver") == names.DRIVER_NAME]
                out[_md(claim)["name"]] = {
                    "pod": _md(pod)["name"],
                    "node": ours[0].get("pool", "") if ours else "",
                    "device": ours[0].get("device", "") if ours else "",
                }
        return out

    def _template(self, snap: Snapshot, template_name: str) -> tuple[bool, str, str, Obj]:
        for t in snap.templates:
            md = _md(t)
            if md.get("namespace") == self.namespace and md.get("name") == template_name:
                labels = md.get("labels") or {}
                owned = labels.get(names.LABEL_COMPUTE_DOMAIN) == self.uid
                detail = f"{self.namespace}/{template_name}, labeled with the CD UID"
                return owned, "", detail, {"name": template_name, "labels": labels}
        return False, "", f"{self.namespace}/{template_name} not created yet", {}

    @staticmethod
    def _allocation(claims: Mapping[str, Obj], pods: int) -> tuple[bool, str, str, Obj]:
        done = {k: v for k, v in claims.items() if v["device"]}
        example = next(iter(sorted(done.items())), None)
        detail = (
            f"{example[0]} -> {names.DRIVER_NAME}/{example[1]['node']}/{example[1]['device']}"
            if example
            else "no workload claim allocated yet"
        )
        ok = pods > 0 and len(done) >= pods
        return ok, _fraction(len(done), pods), detail, {"claims": done}

    def _labels(self, snap: Snapshot, nodes: Sequence[str]) -> tuple[bool, str, str, Obj]:
        labeled = sorted(
            _md(n)["name"]
            for n in snap.nodes
            if (_md(n).get("labels") or {}).get(names.LABEL_COMPUTE_DOMAIN) == self.uid
        )
        ok = bool(nodes) and set(nodes) <= set(labeled)
        detail = f"{names.LABEL_COMPUTE_DOMAIN}={self.uid}"
        return ok, _fraction(len(set(labeled) & set(nodes)), len(nodes)), detail, {"nodes": labeled}

    def _daemon_pods(self, snap: Snapshot, nodes: Sequence[str]) -> tuple[bool, str, str, Obj]:
        ready = {
            (p.get("spec") or {}).get("nodeName"): _md(p)["name"]
            for p in snap.pods
            if _md(p).get("namespace") == self.driver_namespace
            and (_md(p).get("labels") or {}).get(names.LABEL_COMPUTE_DOMAIN) == self.uid
            and (p.get("status") or {}).get("phase") == "Running"
        }
        on_nodes = {n: ready[n] for n in nodes if n in ready}
        example = next(iter(sorted(on_nodes.items())), None)
        detail = f"{self.driver_namespace}/{example[1]} on {example[0]}" if example else ""
        ok = bool(nodes) and len(on_nodes) == len(nodes)
        return ok, _fraction(len(on_nodes), len(nodes)), detail, {"pods": on_nodes}

    def _agent_imex(self, snap: Snapshot, nodes: Sequence[str]) -> tuple[bool, str, str, Obj]:
        """No daemon pod of the domain anywhere, and the node agent running on each node."""
        daemons = [_ref(p) for p in snap.pods
                   if (_md(p).get("labels") or {}).get(names.LABEL_COMPUTE_DOMAIN) == self.uid]
        agents = {
            (p.get("spec") or {}).get("nodeName"): _md(p)["name"]
            for p in snap.pods
            if _md(p).get("namespace") == self.driver_namespace
            and "kubelet-plugin" in _md(p)["name"]
            and (p.get("status") or {}).get("phase") == "Running"
        }
        on_nodes = {n: agents[n] for n in nodes if n in agents}
        ok = bool(nodes) and len(on_nodes) == len(nodes) and not daemons
        detail = (f"daemon pods: {', '.join(daemons)}" if daemons
                  else f"0 daemon pods; node agents running on {len(on_nodes)} nodes")
        return ok, _fraction(len(on_nodes), len(nodes)), detail, {"agents": on_nodes,
                                                                "daemonPods": daemons}

    def _clique_entries(self, snap: Snapshot, nodes: Sequence[str]) -> tuple[bool, str, str, Obj]:
        entries: dict[str, Obj] = {}
        others: dict[str, str] = {}
        cliques: list[str] = []
        for clique in snap.cliques:
            if not _md(clique)["name"].startswith(f"{self.uid}."):
                continue
            cliques.append(_md(clique)["name"])
            for d in clique.get("daemons") or ():
                others[d.get("nodeName", "")] = f"{d.get('status')}, index {d.get('index')}"
                if d.get("status") == names.STATUS_READY:
                    entries[d.get("nodeName", "")] = {
                        "index": d.get("index"),
                        "ipAddress": d.get("ipAddress"),
                        "cliqueID": d.get("cliqueID"),
                    }
        on_nodes = {n: entries[n] for n in nodes if n in entries}
        example = next(iter(sorted(on_nodes.items())), None)
        detail = (
            f"{example[0]}: index {example[1]['index']}, {example[1]['ipAddress']}"
            f" in {', '.join(sorted(cliques))}"
            if example
            else ""
        )
        missing = sorted(set(nodes) - set(on_nodes))
        if missing and on_nodes:
            shown = ", ".join(f"{n} ({others.get(n, 'no entry')})" for n in missing[:5])
            detail = f"not Ready: {shown}; {detail}"
        ok = bool(nodes) and len(on_nodes) == len(nodes)
        return ok, _fraction(len(on_nodes), len(nodes)), detail, {"entries": on_nodes}

    def _views(self, pods: Sequence[Obj]) -> dict[str, Obj]:
        """pod name/container -> the container view its node's kubelet published."""
        out: dict[str, Obj] = {}
        for pod in pods:
            spec = pod.get("spec") or {}
            root = self.node_roots.get(spec.get("nodeName") or "")
            if root is None:
                continue
            pod_dir = root / "pods" / f"{self.namespace}_{_md(pod)['name']}"
            for container in spec.get("containers") or ():
                if not (container.get("resources") or {}).get("claims"):
                    continue
                try:
                    view = json.loads((pod_dir / f"{container['name']}.json").read_text())
                except (FileNotFoundError, json.JSONDecodeError):
                    continue
                out[f"{_md(pod)['name']}/{container['name']}"] = view
        return out

    @staticmethod
    def _cdi(views: Mapping[str, Obj], pods: int) -> tuple[bool, str, str, Obj]:
        ids = {k: v.get("cdiDevices") or [] for k, v in views.items()}
        with_ids = {k: v for k, v in ids.items() if v}
        example = next(iter(sorted(with_ids.items())), None)
        detail = f"{example[0]}: {', '.join(example[1])}" if example else ""
        ok = pods > 0 and len(with_ids) >= pods
        return ok, _fraction(len(with_ids), pods), detail, {"cdiDevices": with_ids}

    @staticmethod
    def _devices(views: Mapping[str, Obj], pods: int) -> tuple[bool, str, str, Obj]:
        found: dict[str, list[Obj]] = {}
        for key, view in views.items():
            channels = [
                d
                for d in view.get("deviceNodes") or ()
                if str(d.get("path", "")).startswith(CHANNEL_DEVICE_PREFIX)
            ]
            if channels:
                found[key] = channels
        example = next(iter(sorted(found.items())), None)
        detail = ""
        if example:
            d = example[1][0]
            more = f" (+{len(example[1]) - 1} more)" if len(example[1]) > 1 else ""
            detail = f"{example[0]}: {d['path']} (c {d['major']}:{d['minor']}){more}"
        ok = pods > 0 and len(found) >= pods
        data = {k: [d["path"] for d in v] for k, v in found.items()}
        return ok, _fraction(len(found), pods), detail, {"devices": data}

    def to_dict(self) -> Obj:
        return {
            "computeDomain": f"{self.namespace}/{self.name}",
            "uid": self.uid,
            "complete": self.complete,
            "steps": [link.to_dict() for link in self.links],
        }
