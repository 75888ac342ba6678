"""Boundaries 5-7, node side: node bootstrap (the IMEX daemon, or the host's), injection of
the channel into the workload, and cleanup of a domain being deleted."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from agent.diagnose.cluster_checks import PREPARE_FAILED, by_age, target_nodes
from agent.diagnose.facts import (
    CONTROLLER_DEPLOYMENT,
    PLUGIN_CONTAINER,
    Facts,
    Obj,
    labels,
    md,
    parse_time,
)
from agent.diagnose.report import BROKEN, SKIPPED, WAITING, Boundary
from api import names

EXITED = "IMEXDaemonExited"
NOT_READY = "IMEXDaemonNotReady"
CHANNEL_OWNED = re.compile(r"already allocated (?:by|to different) claim ([0-9a-fA-F-]+)")


def bootstrap(facts: Facts, grace: float) -> Boundary:
    if facts.host_managed:
        b = Boundary("bootstrap", "node bootstrap: host nvidia-imex readiness")
        for node in target_nodes(facts):
            _host_imex(facts, node, b, grace)
        return b
    if facts.agent_placement:
        b = Boundary("bootstrap", "node bootstrap: node label, node agent, clique entry")
        for node in target_nodes(facts):
            _agent_node(facts, node, b, grace)
        return b
    b = Boundary("bootstrap", "node bootstrap: node label, daemon pod, clique entry")
    for node in target_nodes(facts):
        _node(facts, node, b, grace)
    return b


@dataclass(frozen=True)
class Imex:
    """Whoever runs nvidia-imex for this domain on one node (its daemon pod, or the node
    agent), in the terms the clique entry's verdict needs."""

    who: str  # "the daemon on node-01": what joins the clique
    label: str  # "the IMEX daemon on node node-01": what is or is not ready
    age: float  # how long it has had to get there
    history: list[Obj]  # its IMEXDaemonExited / IMEXDaemonNotReady Events, newest last
    restarted: bool  # crashed before: a not-ready entry is no start-up delay
    describe: str
    logs: str


def _pods_on(facts: Facts, node: str) -> list[Obj]:
    return [p for p in facts.pods if (p.get("spec") or {}).get("nodeName") == node]


def _since_bound(facts: Facts, node: str) -> float:
    """How long this domain's first workload pod has been on `node` (its age)."""
    return max((facts.age(p) for p in _pods_on(facts, node)), default=0.0)


def _labelled(facts: Facts, node: str, b: Boundary, grace: float, blocked: str) -> bool:
    """Whether the plugin labelled `node` for this domain; says why not otherwise
    (`blocked`: what another domain's label keeps from starting there)."""
    label = labels(facts.nodes.get(node)).get(names.LABEL_COMPUTE_DOMAIN)
    if label == facts.uid:
        return True
    if label:
        b.see(f"{node}: labelled {names.LABEL_COMPUTE_DOMAIN}={label} (another domain)")
        b.fail(BROKEN, f"node {node} is labelled for another ComputeDomain ({label}): "
               f"one node serves one domain at a time, and {blocked} until that domain's "
               f"workload leaves", f"kubectl get node {node} -L {names.LABEL_COMPUTE_DOMAIN}; "
               "kubectl get computedomains -A")
    else:
        b.see(f"{node}: no {names.LABEL_COMPUTE_DOMAIN} label yet")
        first = md(_pods_on(facts, node)[0])["name"]
        b.fail(by_age(_since_bound(facts, node), grace), f"the plugin has not labelled node "
               f"{node} yet (it does when it prepares the workload's claim there)",
               f"kubectl -n {facts.namespace} describe pod {first}")
    return False


def _node(facts: Facts, node: str, b: Boundary, grace: float) -> None:
    ns, uid = facts.driver_namespace, facts.uid
    if not _labelled(facts, node, b, grace, "this domain's daemon cannot land"):
        return
    pod = facts.daemon_pod_on(node)
    if pod is None:
        b.see(f"{node}: labelled, no daemon pod")
        b.fail(by_age(_since_bound(facts, node), grace), f"the DaemonSet has no daemon pod "
               f"on node {node} yet",
               f"kubectl -n {ns} describe daemonset {names.daemon_object_name(uid)}")
        return
    _daemon_pod(facts, node, pod, b, grace)
    clique_id = facts.node_clique(node)
    if not clique_id:
        b.see(f"{node}: no NVLink clique ID: no IMEX daemon runs there, no clique entry")
        return
    name = md(pod)["name"]
    _, restarts, _ = _container_text(pod)
    _clique_entry(facts, node, Imex(
        who=f"the daemon on {node}", label=f"the IMEX daemon on node {node}",
        age=facts.age(pod), history=facts.events_for(pod, EXITED, NOT_READY),
        restarted=restarts > 0, describe=f"kubectl -n {ns} describe pod {name}",
        logs=f"kubectl -n {ns} logs {name}"), b, grace)


def _container_text(pod: Obj, container: str = names.DAEMON_CONTAINER_NAME
                    ) -> tuple[str, int, bool]:
    """(state, restarts, ready) of `container` (the daemon container by default)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") != container:
            continue
        state = cs.get("state") or {}
        if "waiting" in state:
            text = f"waiting ({(state['waiting'] or {}).get('reason') or '?'})"
        elif "terminated" in state:
            t = state["terminated"] or {}
            text = f"terminated (exit {t.get('exitCode')}, {t.get('reason') or '?'})"
        else:
            text = "running"
        return text, int(cs.get("restartCount") or 0), bool(cs.get("ready"))
    return "not started", 0, False


def _daemon_pod(facts: Facts, node: str, pod: Obj, b: Boundary, grace: float) -> None:
    ns, name = facts.driver_namespace, md(pod)["name"]
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    state, restarts, ready = _container_text(pod)
    claim = facts.pod_claim(pod, facts.daemon_claims, names.daemon_object_name(facts.uid))
    allocated = bool(((claim or {}).get("status") or {}).get("allocation"))
    b.see(f"{node}: daemon pod {ns}/{name} {phase}, container {state}, {restarts} restart(s), "
          f"{'ready' if ready else 'not ready'}; daemon claim "
          f"{'allocated' if allocated else 'not allocated'}")
    for event in facts.events_for(pod, EXITED, NOT_READY, PREPARE_FAILED)[-3:]:
        b.see(f"{node}: Event {event.get('reason')} (x{event.get('count') or 1}): "
              f"{event.get('message')}")
    if phase != "Running":
        stable = by_age(facts.age(pod), grace)
        b.fail(stable, f"the daemon pod {ns}/{name} on node {node} is {phase}"
               + ("" if allocated else " (its daemon claim is not allocated)"),
               f"kubectl -n {ns} describe pod {name}")


# --- agent placement: the node agent runs nvidia-imex --------------------------------------


def _agent_node(facts: Facts, node: str, b: Boundary, grace: float) -> None:
    """The node agent supervises this domain's nvidia-imex on `node`: its pod, its Events
    on the Node (it has no pod of its own to put them on) and its clique entry."""
    if not _labelled(facts, node, b, grace, "this domain's nvidia-imex cannot start there"):
        return
    waited = _since_bound(facts, node)
    agent = facts.plugin_pod_on(node)
    if agent is None and facts.plugin_daemonset is not None:
        b.see(f"{node}: no {md(facts.plugin_daemonset).get('name')} pod")
        b.fail(BROKEN, f"the node agent does not run on node {node}, so nothing runs this "
               "domain's nvidia-imex there",
               f"kubectl -n {facts.driver_namespace} get pods -o wide --field-selector "
               f"spec.nodeName={node}")
        return
    if agent is None:
        b.see(f"{node}: no kubelet-plugin DaemonSet: the node agent runs outside the cluster")
        running = True
    else:
        running = _agent_pod(facts, node, agent, b, grace)
    # Only since this domain's workload came: the node may have served another before.
    history = facts.node_events(node, EXITED, NOT_READY, since=waited or None)
    for event in history[-3:]:
        b.see(f"{node}: Node Event {event.get('reason')} (x{facts.event_count([event])}): "
              f"{event.get('message')}")
    if not running:
        return
    if not facts.node_clique(node):
        b.see(f"{node}: no NVLink clique ID: the node agent runs no IMEX there, no clique "
              "entry")
        return
    _clique_entry(facts, node, _agent_imex(facts, node, agent, history, waited), b, grace)


def _agent_pod(facts: Facts, node: str, pod: Obj, b: Boundary, grace: float) -> bool:
    """Is the node agent's pod on `node` Running and Ready? Says so, and why not."""
    ns, name = facts.driver_namespace, md(pod)["name"]
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    state, restarts, ready = _container_text(pod, PLUGIN_CONTAINER)
    b.see(f"{node}: node agent pod {ns}/{name} {phase}, container {PLUGIN_CONTAINER} {state}, "
          f"{restarts} restart(s), {'ready' if ready else 'not ready'}")
    if phase == "Running" and ready:
        return True
    b.fail(by_age(facts.age(pod), grace), f"the node agent pod {ns}/{name} on node {node} is "
           f"{phase if phase != 'Running' else 'not ready'}: it runs this node's nvidia-imex",
           f"kubectl -n {ns} describe pod {name}; "
           f"kubectl logs -n {ns} {name} -c {PLUGIN_CONTAINER}")
    return False


def _agent_imex(facts: Facts, node: str, agent: Obj | None, history: list[Obj],
                waited: float) -> Imex:
    """The node agent as the runner of `node`'s nvidia-imex: it has had since the workload
    came, or since its container (and nvidia-imex with it) last started, if later."""
    age = waited
    logs = f"the node agent's log on {node}"
    if agent is not None:
        age = min(age, _running_for(facts, agent, PLUGIN_CONTAINER))
        logs = (f"kubectl logs -n {facts.driver_namespace} {md(agent)['name']} "
                f"-c {PLUGIN_CONTAINER}")
    # A restart of the agent's container says nothing about nvidia-imex: only its Events do.
    return Imex(who=f"the node agent on {node}",
                label=f"the IMEX daemon on node {node} (supervised by the node agent)",
                age=age, history=history, restarted=False,
                describe=f"kubectl describe node {node}", logs=logs)


def _running_for(facts: Facts, pod: Obj, container: str) -> float:
    """Seconds since `container` of `pod` last started (the pod's age when unknown)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") == container:
            started = parse_time(((cs.get("state") or {}).get("running") or {}).get("startedAt"))
            if started is not None:
                return max(0.0, (facts.now - started).total_seconds())
    return facts.age(pod)


# --- the clique entry, whoever runs nvidia-imex -------------------------------------------


def _clique_entry(facts: Facts, node: str, imex: Imex, b: Boundary, grace: float) -> None:
    ns = facts.driver_namespace
    clique, entry = facts.clique_entry(node)
    clique_name = md(clique).get("name") or names.clique_object_name(
        facts.uid, facts.node_clique(node))
    if entry is None:
        listed = list((clique or {}).get("daemons") or ())
        limit = facts.max_nodes()
        if len(listed) >= limit:
            b.see(f"{node}: not in ComputeDomainClique {ns}/{clique_name}, which lists "
                  f"{len(listed)} daemon(s) (maxNodesPerIMEXDomain {limit})")
            b.fail(BROKEN, f"clique full: {imex.who} cannot add more nodes, "
                   f"ComputeDomainClique {clique_name} is already at maximum ({limit})",
                   f"{imex.logs}; keep one domain's workload within {limit} nodes per clique "
                   f"or raise {names.ENV_MAX_NODES_PER_IMEX_DOMAIN} on the controller")
            return
        b.see(f"{node}: no entry in ComputeDomainClique {ns}/{clique_name} yet")
        joining = BROKEN if imex.history else by_age(imex.age, grace)
        b.fail(joining, f"{imex.who} has not joined its clique yet" + _last(imex.history),
               f"{imex.describe}; {imex.logs}" if imex.history else imex.logs)
        return
    status = entry.get("status") or names.STATUS_NOT_READY
    b.see(f"{node}: clique entry in {clique_name}: index {entry.get('index')}, "
          f"IP {entry.get('ipAddress')}, {status}")
    if status == names.STATUS_READY:
        return
    stable = bool(imex.history) or imex.restarted or imex.age >= grace
    cause = f"{imex.label} is not ready"
    if imex.history:
        cause += _last(imex.history)
    else:
        cause += f" for {imex.age:.0f}s (expected while it starts and meets its peers)"
    if ((facts.cd or {}).get("status") or {}).get("status") == names.STATUS_READY:
        cause = "global Ready is not local readiness: the ComputeDomain says Ready, but " + cause
    b.fail(BROKEN if stable else WAITING, cause, f"{imex.describe}; {imex.logs}")


def _last(history: list[Obj]) -> str:
    """' (reason: message)' of the newest IMEX Event, '' for none."""
    if not history:
        return ""
    return f" ({history[-1].get('reason')}: {history[-1].get('message')})"


def _host_imex(facts: Facts, node: str, b: Boundary, grace: float) -> None:
    pods = _pods_on(facts, node)
    events = sorted((e for p in pods for e in facts.events_for(p, names.EVENT_HOST_IMEX_NOT_READY)),
                    key=lambda e: facts.event_time(e) or facts.now)
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if running:
        b.see(f"{node}: host nvidia-imex answered READY (pod {md(running[0])['name']} runs)")
        return
    if not events:
        b.see(f"{node}: no host nvidia-imex probe result recorded yet")
        return
    last = events[-1]
    count = facts.event_count(events)
    b.see(f"{node}: host nvidia-imex probe (x{count}, {facts.event_age(last):.0f}s ago): "
          f"{last.get('message')}")
    stable = count >= 2 or _since_bound(facts, node) >= grace
    b.fail(BROKEN if stable else WAITING, f"host nvidia-imex on node {node} is not ready: "
           f"{last.get('message')}",
           f"kubectl -n {facts.namespace} describe pod {md(pods[0])['name']}; on the node: "
           "systemctl status nvidia-imex; nvidia-imex-ctl -q")


# --- injection ----------------------------------------------------------------------------


def injection(facts: Facts, grace: float, sim_root: Path | None = None) -> Boundary:
    b = Boundary("injection", "injection: CDI devices in the workload containers")
    for pod in facts.pods:
        if (pod.get("spec") or {}).get("nodeName"):
            _inject(facts, pod, b, grace, sim_root)
    return b


def _expected_ids(claim: Obj) -> list[str]:
    uid = md(claim).get("uid") or ""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}) \
        .get("results") or ()
    return [f"{names.CDI_KIND_CLAIM}={names.cdi_claim_device_name(uid, r.get('device'))}"
            for r in results if r.get("driver") == names.DRIVER_NAME]


def _inject(facts: Facts, pod: Obj, b: Boundary, grace: float, sim_root: Path | None) -> None:
    ns, name = facts.namespace, md(pod)["name"]
    node = str((pod.get("spec") or {}).get("nodeName"))
    describe = f"kubectl -n {ns} describe pod {name}"
    claim = facts.pod_claim(pod, facts.claims, facts.template_name) or {}
    ids = _expected_ids(claim)
    prepared = facts.events_for(pod, names.EVENT_CHANNEL_PREPARED)
    if prepared:
        b.see(f"pod {name}: {prepared[-1].get('message')}")
    if (pod.get("status") or {}).get("phase") == "Running":
        if not facts.node_clique(node):
            b.see(f"pod {name}: Running on {node}, which has no NVLink clique ID")
            b.fail(BROKEN, f"false success: pod {name} is Running on node {node}, which has "
                   "no NVLink clique ID, so it got no IMEX channel device",
                   f"kubectl get node {node} -L {names.LABEL_GPU_CLIQUE}; pin the workload "
                   f"to MNNVL nodes with node affinity on {names.LABEL_GPU_CLIQUE}")
            return
        b.see(f"pod {name}: Running on {node}, CDI {', '.join(ids) or '(none)'}")
        if sim_root is not None:
            _sim_view(facts, pod, node, b, sim_root)
        return
    failures = facts.events_for(pod, PREPARE_FAILED, names.EVENT_PREPARE_FAILED,
                                names.EVENT_CHANNEL_WAITING)
    if not failures:
        b.see(f"pod {name}: not running yet on {node}, no prepare failure recorded")
        b.fail(by_age(facts.age(pod), grace), f"pod {name} is not running yet", describe)
        return
    last = failures[-1]
    message = str(last.get("message"))
    b.see(f"pod {name}: {last.get('reason')} (x{facts.event_count(failures)}): {message}")
    owned = CHANNEL_OWNED.search(message)
    if owned:
        owner = owned.group(1)
        known = [md(c)["name"] for c in facts.claims.values() if md(c).get("uid") == owner]
        b.see(f"claim {owner}: " + (f"{ns}/{known[0]}" if known else
                                    f"not in {ns} (deleted without Unprepare, or elsewhere)"))
        b.fail(BROKEN, f"another claim owns channel 0 on this node ({node}): {message}",
               "kubectl get resourceclaims -A -o jsonpath='{range .items[?(@.metadata.uid==\""
               + owner + "\")]}{.metadata.namespace}/{.metadata.name}{end}'")
        return
    stable = facts.event_count(failures) >= 2 or facts.age(pod) >= grace
    b.fail(BROKEN if stable else WAITING, f"preparing pod {name}'s channel on node {node} "
           f"fails: {message}", describe)


def _sim_view(facts: Facts, pod: Obj, node: str, b: Boundary, sim_root: Path) -> None:
    """In the simulated cluster: the container view the node's kubelet published."""
    pod_dir = sim_root / "nodes" / node / "pods" / f"{facts.namespace}_{md(pod)['name']}"
    for container in (pod.get("spec") or {}).get("containers") or ():
        path = pod_dir / f"{container.get('name')}.json"
        try:
            view = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            b.see(f"container {container.get('name')}: no view at {path} ({err})")
            continue
        channels = [d.get("path") for d in view.get("deviceNodes") or ()
                    if str(d.get("path", "")).startswith("/dev/nvidia-caps-imex-channels/")]
        b.see(f"container {md(pod)['name']}/{container.get('name')}: "
              f"{len(channels)} IMEX channel device(s)"
              + (f", e.g. {channels[0]}" if channels else ""))
        if not channels:
            b.fail(BROKEN, f"container {container.get('name')} of pod {md(pod)['name']} has "
                   "no IMEX channel device", f"cat {path}")


# --- cleanup ------------------------------------------------------------------------------


def cleanup(facts: Facts, grace: float) -> Boundary:
    b = Boundary("cleanup", "cleanup: finalizers and labels of a deleted domain")
    cd = facts.cd or {}
    deleted = parse_time(md(cd).get("deletionTimestamp"))
    if deleted is None:
        b.see("the ComputeDomain is not being deleted")
        b.status = SKIPPED
        return b
    ago = max(0.0, (facts.now - deleted).total_seconds())
    finalizers = list(md(cd).get("finalizers") or [])
    b.see(f"deletion requested {ago:.0f}s ago; finalizers: {', '.join(finalizers) or '(none)'}")
    left = _leftovers(facts)
    for line in left:
        b.see(line)
    foreign = [f for f in finalizers if f != names.FINALIZER]
    if foreign:
        return b.fail(BROKEN, "deletion is blocked by finalizer(s) the driver does not own: "
                      f"{', '.join(foreign)}; whoever added them must remove them",
                      f"kubectl -n {facts.namespace} get computedomain {facts.name} -o "
                      "jsonpath='{.metadata.finalizers}'")
    if finalizers or left:
        b.fail(by_age(ago, grace), "the controller has not finished cleaning up: "
               + "; ".join(left or [f"finalizer {names.FINALIZER} still set"]),
               f"kubectl -n {facts.driver_namespace} logs deploy/{CONTROLLER_DEPLOYMENT}")
    return b


def _leftovers(facts: Facts) -> list[str]:
    out = []
    for kind, obj in (("workload ResourceClaimTemplate", facts.template),
                      ("daemon ResourceClaimTemplate", facts.daemon_template),
                      ("daemon DaemonSet", facts.daemonset)):
        if obj is not None and labels(obj).get(names.LABEL_COMPUTE_DOMAIN) == facts.uid:
            fin = md(obj).get("finalizers") or []
            out.append(f"{kind} {md(obj).get('name')} still exists"
                       + (f" (finalizers {', '.join(fin)})" if fin else ""))
    if facts.daemon_pods:
        out.append(f"{len(facts.daemon_pods)} daemon pod(s) still exist")
    if facts.cliques:
        out.append(f"{len(facts.cliques)} ComputeDomainClique(s) still exist")
    if facts.labelled_nodes:
        out.append(f"node label {names.LABEL_COMPUTE_DOMAIN} still on "
                   f"{', '.join(facts.labelled_nodes)}")
    return out
