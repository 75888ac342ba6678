"""Boundaries 5-7, node side: node bootstrap (the IMEX daemon, or the host's), injection of
the channel into the workload, and cleanup of a domain being deleted."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent.diagnose.cluster_checks import PREPARE_FAILED, by_age, target_nodes
from agent.diagnose.facts import CONTROLLER_DEPLOYMENT, Facts, Obj, labels, md, parse_time
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
    b = Boundary("bootstrap", "node bootstrap: node label, daemon pod, clique entry")
    for node in target_nodes(facts):
        _node(facts, node, b, grace)
    return b


def _pods_on(facts: Facts, node: str) -> list[Obj]:
    return [p for p in facts.pods if (p.get("spec") or {}).get("nodeName") == node]


def _since_bound(facts: Facts, node: str) -> float:
    """How long this domain's first workload pod has been on `node` (its age)."""
    return max((facts.age(p) for p in _pods_on(facts, node)), default=0.0)


def _node(facts: Facts, node: str, b: Boundary, grace: float) -> None:
    ns, uid = facts.driver_namespace, facts.uid
    label = labels(facts.nodes.get(node)).get(names.LABEL_COMPUTE_DOMAIN)
    waited = _since_bound(facts, node)
    if label != uid:
        if label:
            b.see(f"{node}: labelled {names.LABEL_COMPUTE_DOMAIN}={label} (another domain)")
            b.fail(BROKEN, f"node {node} is labelled for another ComputeDomain ({label}): "
                   "one node serves one domain at a time, and this domain's daemon cannot "
                   "land until that domain's workload leaves", f"kubectl get node {node} "
                   f"-L {names.LABEL_COMPUTE_DOMAIN}; kubectl get computedomains -A")
        else:
            b.see(f"{node}: no {names.LABEL_COMPUTE_DOMAIN} label yet")
            first = md(_pods_on(facts, node)[0])["name"]
            b.fail(by_age(waited, grace), f"the plugin has not labelled node {node} yet "
                   "(it does when it prepares the workload's claim there)",
                   f"kubectl -n {facts.namespace} describe pod {first}")
        return
    pod = facts.daemon_pod_on(node)
    if pod is None:
        b.see(f"{node}: labelled, no daemon pod")
        b.fail(by_age(waited, grace), f"the DaemonSet has no daemon pod on node {node} yet",
               f"kubectl -n {ns} describe daemonset {names.daemon_object_name(uid)}")
        return
    _daemon_pod(facts, node, pod, b, grace)
    clique_id = facts.node_clique(node)
    if not clique_id:
        b.see(f"{node}: no NVLink clique ID: no IMEX daemon runs there, no clique entry")
        return
    _clique_entry(facts, node, pod, b, grace)


def _container_text(pod: Obj) -> tuple[str, int, bool]:
    """(state, restarts, ready) of the daemon container."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") != names.DAEMON_CONTAINER_NAME:
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


def _clique_entry(facts: Facts, node: str, pod: Obj, b: Boundary, grace: float) -> None:
    ns, name = facts.driver_namespace, md(pod)["name"]
    clique, entry = facts.clique_entry(node)
    clique_name = md(clique).get("name") or names.clique_object_name(
        facts.uid, facts.node_clique(node))
    logs = f"kubectl -n {ns} logs {name}"
    if entry is None:
        listed = list((clique or {}).get("daemons") or ())
        limit = facts.max_nodes()
        if len(listed) >= limit:
            b.see(f"{node}: not in ComputeDomainClique {ns}/{clique_name}, which lists "
                  f"{len(listed)} daemon(s) (maxNodesPerIMEXDomain {limit})")
            b.fail(BROKEN, f"clique full: the daemon on {node} cannot add more nodes, "
                   f"ComputeDomainClique {clique_name} is already at maximum ({limit})",
                   f"{logs}; keep one domain's workload within {limit} nodes per clique or "
                   f"raise {names.ENV_MAX_NODES_PER_IMEX_DOMAIN} on the controller")
            return
        b.see(f"{node}: no entry in ComputeDomainClique {ns}/{clique_name} yet")
        b.fail(by_age(facts.age(pod), grace), f"the daemon on {node} has not joined its "
               "clique yet", logs)
        return
    status = entry.get("status") or names.STATUS_NOT_READY
    b.see(f"{node}: clique entry in {clique_name}: index {entry.get('index')}, "
          f"IP {entry.get('ipAddress')}, {status}")
    if status == names.STATUS_READY:
        return
    history = facts.events_for(pod, EXITED, NOT_READY)
    _, restarts, _ = _container_text(pod)
    stable = bool(history) or restarts > 0 or facts.age(pod) >= grace
    cause = f"the IMEX daemon on node {node} is not ready"
    if history:
        cause += f" ({history[-1].get('reason')}: {history[-1].get('message')})"
    else:
        cause += f" for {facts.age(pod):.0f}s (expected while it starts and meets its peers)"
    if ((facts.cd or {}).get("status") or {}).get("status") == names.STATUS_READY:
        cause = "global Ready is not local readiness: the ComputeDomain says Ready, but " + cause
    b.fail(BROKEN if stable else WAITING, cause, f"kubectl -n {ns} describe pod {name}; {logs}")


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
