"""Everything `diagnose` looks at for one ComputeDomain, read once, plus the small lookups
the boundary checks share (a pod's claims, an object's Events, ages).

One read of the cluster, then pure checks: the verdicts never depend on the order in
which the objects were fetched, and tests can build `Facts` by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent.diagnose.reader import Reader, named
from api import draconvert, names
from api.imex import MODE_DRIVER_MANAGED, MODE_HOST_MANAGED
from runtime.draclient import ResourceApiError, pick_version

Obj = dict[str, Any]

DRIVER_MANAGED = MODE_DRIVER_MANAGED
HOST_MANAGED = MODE_HOST_MANAGED
POD_PLACEMENT = names.PLACEMENT_POD
AGENT_PLACEMENT = names.PLACEMENT_AGENT
# The Helm chart's names for its default release (`dra-driver-nvidia-gpu`, as the reference's).
CONTROLLER_DEPLOYMENT = "dra-driver-nvidia-gpu-controller"
PLUGIN_DAEMONSET = "dra-driver-nvidia-gpu-kubelet-plugin"
PLUGIN_CONTAINER = "compute-domains"  # the node agent's container in its pod

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NODE_PATH = "/api/v1/nodes"
NODE_EVENTS_NAMESPACE = "default"  # where Events about a Node (cluster-scoped) live


def ns_path(namespace: str, plural: str, group: str = "", version: str = "v1") -> str:
    base = f"/apis/{group}/{version}" if group else "/api/v1"
    return f"{base}/namespaces/{namespace}/{plural}"


def dra_path(version: str, plural: str, namespace: str = "") -> str:
    """A resource.k8s.io collection's path in `version`."""
    if namespace:
        return ns_path(namespace, plural, draconvert.GROUP, version)
    return f"/apis/{draconvert.GROUP}/{version}/{plural}"


def cd_path(namespace: str, name: str) -> str:
    return named(ns_path(namespace, names.PLURAL_COMPUTE_DOMAINS, names.GROUP, names.VERSION),
                 name)


def md(obj: Mapping[str, Any] | None) -> Obj:
    return dict((obj or {}).get("metadata") or {})


def labels(obj: Mapping[str, Any] | None) -> Obj:
    return dict(md(obj).get("labels") or {})


def container_env(obj: Mapping[str, Any] | None, name: str) -> str:
    """The value a Deployment's or DaemonSet's pod template gives variable `name` ('' for
    none): how the chart tells each component its settings."""
    spec = ((((obj or {}).get("spec") or {}).get("template") or {}).get("spec") or {})
    for container in spec.get("containers") or ():
        for env in container.get("env") or ():
            if env.get("name") == name and env.get("value"):
                return str(env["value"])
    return ""


def placement_of(workload: Mapping[str, Any] | None) -> str:
    """The IMEX placement a controller Deployment or plugin DaemonSet runs with ('' when
    the object is not there); unset means pod, as the components' flag defaults."""
    if workload is None:
        return ""
    return container_env(workload, names.ENV_IMEX_PLACEMENT) or POD_PLACEMENT


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass
class Facts:
    namespace: str
    name: str
    driver_namespace: str
    now: datetime
    cd: Obj | None = None
    crds: dict[str, Obj | None] = field(default_factory=dict)
    device_classes: dict[str, Obj | None] = field(default_factory=dict)
    resource_api: str = "v1"  # the resource.k8s.io version the DRA objects were read in
    lease: Obj | None = None
    controller: Obj | None = None  # the controller Deployment, if it runs in the cluster
    plugin_daemonset: Obj | None = None
    plugin_pods: list[Obj] = field(default_factory=list)
    slices: list[Obj] = field(default_factory=list)
    nodes: dict[str, Obj] = field(default_factory=dict)
    template: Obj | None = None  # the workload ResourceClaimTemplate (by the spec's name)
    daemon_template: Obj | None = None
    daemonset: Obj | None = None
    pods: list[Obj] = field(default_factory=list)  # workload pods using the template
    claims: dict[str, Obj] = field(default_factory=dict)  # CD namespace, by name
    daemon_pods: list[Obj] = field(default_factory=list)
    daemon_claims: dict[str, Obj] = field(default_factory=dict)
    cliques: list[Obj] = field(default_factory=list)
    events: list[Obj] = field(default_factory=list)
    labelled_nodes: list[str] = field(default_factory=list)  # carry this CD's label
    mode: str = DRIVER_MANAGED
    mode_source: str = ""
    placement: str = POD_PLACEMENT
    placement_source: str = ""
    errors: dict[str, str] = field(default_factory=dict)

    # --- the ComputeDomain -----------------------------------------------------------

    @property
    def uid(self) -> str:
        return str(md(self.cd).get("uid") or "")

    @property
    def template_name(self) -> str:
        spec = (self.cd or {}).get("spec") or {}
        return str(((spec.get("channel") or {}).get("resourceClaimTemplate") or {}).get("name")
                   or "")

    def device_class_path(self, name: str) -> str:
        return named(dra_path(self.resource_api, "deviceclasses"), name)

    def unreadable(self, path: str) -> str:
        """Why the object at `path` could not be read ('' when it was, or is absent)."""
        return self.errors.get(path, "")

    @property
    def host_managed(self) -> bool:
        return self.mode == HOST_MANAGED

    @property
    def agent_placement(self) -> bool:
        """The node agents run nvidia-imex themselves: no daemon objects, pods or claims."""
        return not self.host_managed and self.placement == AGENT_PLACEMENT

    def age(self, obj: Mapping[str, Any] | None) -> float:
        """Seconds since `obj` was created (0 when unknown)."""
        created = parse_time(md(obj).get("creationTimestamp"))
        return max(0.0, (self.now - created).total_seconds()) if created else 0.0

    # --- pods and claims ------------------------------------------------------------

    def pod_claim(self, pod: Obj, claims: Mapping[str, Obj], template: str) -> Obj | None:
        """The claim generated for `pod` from `template` (via the pod's status)."""
        entries = [c for c in (pod.get("spec") or {}).get("resourceClaims") or ()
                   if c.get("resourceClaimTemplateName") == template]
        statuses = {s.get("name"): s.get("resourceClaimName")
                    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
        for entry in entries:
            claim_name = statuses.get(entry.get("name"))
            if claim_name and claim_name in claims:
                return claims[claim_name]
        # Before the ResourceClaim controller fills in the status: find the claim by owner.
        uid = md(pod).get("uid")
        for claim in claims.values():
            if any(r.get("uid") == uid for r in md(claim).get("ownerReferences") or ()):
                return claim
        return None

    def daemon_pod_on(self, node: str) -> Obj | None:
        pods = [p for p in self.daemon_pods if (p.get("spec") or {}).get("nodeName") == node]
        live = [p for p in pods if not md(p).get("deletionTimestamp")]
        chosen = live or pods
        return chosen[0] if chosen else None

    def plugin_pod_on(self, node: str) -> Obj | None:
        """The node agent's pod on `node` (a live one first)."""
        pods = [p for p in self.plugin_pods if (p.get("spec") or {}).get("nodeName") == node]
        live = [p for p in pods if not md(p).get("deletionTimestamp")]
        chosen = live or pods
        return chosen[0] if chosen else None

    def node_clique(self, node: str) -> str:
        """The node's NVLink clique ID as the agent labelled it ('' for none)."""
        return str(labels(self.nodes.get(node)).get(names.LABEL_GPU_CLIQUE) or "")

    def clique_entry(self, node: str) -> tuple[Obj | None, Obj | None]:
        """(clique object, this node's entry in it) among this CD's cliques."""
        for clique in self.cliques:
            for entry in clique.get("daemons") or ():
                if entry.get("nodeName") == node:
                    return clique, entry
        clique_id = self.node_clique(node)
        wanted = names.clique_object_name(self.uid, clique_id) if clique_id else ""
        return next((c for c in self.cliques if md(c).get("name") == wanted), None), None

    def max_nodes(self) -> int:
        """MAX_NODES_PER_IMEX_DOMAIN as whoever runs nvidia-imex got it: the daemon pods
        from the controller, or the node agents from their DaemonSet."""
        source = self.plugin_daemonset if self.agent_placement else self.daemonset
        try:
            return int(container_env(source, names.ENV_MAX_NODES_PER_IMEX_DOMAIN))
        except ValueError:
            return names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN

    # --- events ---------------------------------------------------------------------

    def events_for(self, obj: Mapping[str, Any] | None, *reasons: str) -> list[Obj]:
        """Events about `obj` (by UID, else by kind/name), newest last."""
        if obj is None:
            return []
        meta = md(obj)
        uid, name = meta.get("uid"), meta.get("name")
        out = []
        for event in self.events:
            involved = event.get("involvedObject") or {}
            if involved.get("uid") and uid:
                if involved.get("uid") != uid:
                    continue
            elif involved.get("name") != name or involved.get("kind") != obj.get("kind"):
                continue
            if reasons and event.get("reason") not in reasons:
                continue
            out.append(event)
        return sorted(out, key=lambda e: self.event_time(e) or self.now)

    def node_events(self, node: str, *reasons: str, since: float | None = None) -> list[Obj]:
        """Events about Node `node` (the node agent's nvidia-imex writes them there, without
        its UID), newest last; `since`: only those of the last `since` seconds, because a
        node serves one domain after another and older ones may be about another domain."""
        out = [e for e in self.events
               if (e.get("involvedObject") or {}).get("kind") == "Node"
               and (e.get("involvedObject") or {}).get("name") == node
               and (not reasons or e.get("reason") in reasons)
               and (since is None or self.event_age(e) <= since)]
        return sorted(out, key=lambda e: self.event_time(e) or self.now)

    def event_time(self, event: Mapping[str, Any]) -> datetime | None:
        """When it last happened; events.k8s.io writers (newer kubelets) keep that in
        `series.lastObservedTime` and leave `lastTimestamp` empty."""
        series = event.get("series") or {}
        return (parse_time(series.get("lastObservedTime"))
                or parse_time(event.get("lastTimestamp")) or parse_time(event.get("eventTime"))
                or parse_time(md(event).get("creationTimestamp")))

    def event_age(self, event: Mapping[str, Any]) -> float:
        when = self.event_time(event)
        return max(0.0, (self.now - when).total_seconds()) if when else 0.0

    @staticmethod
    def event_count(events: Iterable[Mapping[str, Any]]) -> int:
        """How often they happened (`series.count` for events.k8s.io writers)."""
        return sum(int((e.get("series") or {}).get("count") or e.get("count") or 1)
                   for e in events)


class DraReader:
    """resource.k8s.io reads in the version the server serves, in v1 shape
    (api/draconvert.py): diagnose must work on a 1.32 cluster too."""

    def __init__(self, reader: Reader) -> None:
        self._reader = reader
        group = reader.get(f"/apis/{draconvert.GROUP}") or {}
        served = [v.get("version", "") for v in group.get("versions") or []]
        try:
            self.version = pick_version(served)
        except ResourceApiError:
            self.version = "v1"  # nothing served: the reads fail and say so as evidence

    def get(self, plural: str, namespace: str, name: str) -> Obj | None:
        obj = self._reader.get(named(dra_path(self.version, plural, namespace), name))
        return None if obj is None else draconvert.to_v1(
            obj, draconvert.KINDS[plural], self.version)

    def items(self, plural: str, namespace: str = "") -> list[Obj]:
        return [draconvert.to_v1(o, draconvert.KINDS[plural], self.version)
                for o in self._reader.items(dra_path(self.version, plural, namespace))]


def gather(reader: Reader, namespace: str, name: str, driver_namespace: str,
           now: datetime | None = None, mode: str = "", placement: str = "") -> Facts:
    """Read what the checks need; a missing ComputeDomain stops after the installation."""
    facts = Facts(namespace, name, driver_namespace, now or datetime.now(UTC))
    dra = DraReader(reader)
    facts.resource_api = dra.version
    for crd in (names.CRD_COMPUTE_DOMAINS, names.CRD_CLIQUES):
        facts.crds[crd] = reader.get(named(CRD_PATH, crd))
    for cls in (names.DEVICE_CLASS_DEFAULT_CHANNEL, names.DEVICE_CLASS_DAEMON):
        facts.device_classes[cls] = dra.get("deviceclasses", "", cls)
    facts.lease = reader.get(named(ns_path(driver_namespace, "leases", "coordination.k8s.io"),
                                   names.DEFAULT_LEADER_ELECTION_LEASE_NAME))
    apps = ns_path(driver_namespace, "deployments", "apps")
    facts.controller = reader.get(named(apps, CONTROLLER_DEPLOYMENT))
    facts.plugin_daemonset = reader.get(
        named(ns_path(driver_namespace, "daemonsets", "apps"), PLUGIN_DAEMONSET))
    if facts.plugin_daemonset is not None:
        selector = ((facts.plugin_daemonset.get("spec") or {}).get("selector") or {})
        match = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
        facts.plugin_pods = reader.items(ns_path(driver_namespace, "pods"), labels=match)
    # Before the domain's objects: agent placement reads the Nodes' Events too.
    facts.placement, facts.placement_source = _placement(facts, placement)
    facts.slices = [s for s in dra.items("resourceslices")
                    if (s.get("spec") or {}).get("driver") == names.DRIVER_NAME]
    facts.nodes = {md(n)["name"]: n for n in reader.items(NODE_PATH) if md(n).get("name")}
    facts.cd = reader.get(cd_path(namespace, name))
    if facts.cd is not None:
        _gather_domain(reader, dra, facts)
    facts.mode, facts.mode_source = _mode(facts, mode)
    facts.errors = dict(reader.errors)
    return facts


def _gather_domain(reader: Reader, dra: DraReader, facts: Facts) -> None:
    uid, ns, dns = facts.uid, facts.namespace, facts.driver_namespace
    selector = f"{names.LABEL_COMPUTE_DOMAIN}={uid}"
    facts.labelled_nodes = sorted(n for n, node in facts.nodes.items()
                                  if labels(node).get(names.LABEL_COMPUTE_DOMAIN) == uid)
    if facts.template_name:
        facts.template = dra.get("resourceclaimtemplates", ns, facts.template_name)
    daemon_name = names.daemon_object_name(uid)
    facts.daemon_template = dra.get("resourceclaimtemplates", dns, daemon_name)
    facts.daemonset = reader.get(named(ns_path(dns, "daemonsets", "apps"), daemon_name))
    pods = reader.items(ns_path(ns, "pods"))
    facts.pods = [p for p in pods if any(
        c.get("resourceClaimTemplateName") == facts.template_name
        for c in (p.get("spec") or {}).get("resourceClaims") or ())]
    facts.claims = {md(c)["name"]: c
                    for c in dra.items("resourceclaims", ns)}
    facts.daemon_pods = reader.items(ns_path(dns, "pods"), labels=selector)
    daemon_uids = {md(p).get("uid") for p in facts.daemon_pods}
    facts.daemon_claims = {
        md(c)["name"]: c
        for c in dra.items("resourceclaims", dns)
        if any(r.get("uid") in daemon_uids for r in md(c).get("ownerReferences") or ())}
    facts.cliques = reader.items(
        ns_path(dns, names.PLURAL_CLIQUES, names.GROUP, names.VERSION), labels=selector)
    facts.events = reader.items(ns_path(ns, "events"))
    if dns != ns:
        facts.events += reader.items(ns_path(dns, "events"))
    if facts.placement == AGENT_PLACEMENT and NODE_EVENTS_NAMESPACE not in (ns, dns):
        facts.events += reader.items(ns_path(NODE_EVENTS_NAMESPACE, "events"),
                                     fields="involvedObject.kind=Node")


def _mode(facts: Facts, wanted: str) -> tuple[str, str]:
    """Which IMEX mode the driver runs in, and how we know."""
    if wanted:
        return wanted, "--mode"
    value = container_env(facts.controller, names.ENV_IMEX_MODE)
    if value:
        return value, "the controller Deployment's IMEX_MODE"
    if facts.placement == AGENT_PLACEMENT:
        return DRIVER_MANAGED, f"IMEX placement {AGENT_PLACEMENT} is driver-managed only"
    if facts.template is not None:
        if facts.daemon_template is not None or facts.daemonset is not None:
            return DRIVER_MANAGED, "the controller created a daemon DaemonSet for this domain"
        if facts.age(facts.template) > 10:
            return HOST_MANAGED, "the controller created no daemon objects for this domain"
    if facts.device_classes.get(names.DEVICE_CLASS_DAEMON) is not None:
        return DRIVER_MANAGED, f"DeviceClass {names.DEVICE_CLASS_DAEMON} is installed"
    return HOST_MANAGED, f"DeviceClass {names.DEVICE_CLASS_DAEMON} is not installed"


def _placement(facts: Facts, wanted: str) -> tuple[str, str]:
    """Where nvidia-imex runs for driver-managed domains, and how we know: the controller
    decides which daemon objects exist, so its word comes first."""
    if wanted:
        return wanted, "--placement"
    for what, workload in (("the controller Deployment", facts.controller),
                           ("the kubelet-plugin DaemonSet", facts.plugin_daemonset)):
        value = container_env(workload, names.ENV_IMEX_PLACEMENT)
        if value:
            return value, f"{what}'s {names.ENV_IMEX_PLACEMENT}"
    if facts.controller is not None or facts.plugin_daemonset is not None:
        return POD_PLACEMENT, f"{names.ENV_IMEX_PLACEMENT} is not set (the default)"
    return POD_PLACEMENT, ("the default: no controller Deployment or kubelet-plugin "
                           "DaemonSet to read it from")
