"""Boundaries 1-4, cluster side: installation, node publication, controller reconciliation,
allocation. Each check reads `Facts` only and returns one `Boundary`.

Waiting versus broken: a step that has not happened yet is expected for `grace` seconds
after the object that should have caused it appeared (bootstrap delay); past that, or
when the component already said no (a condition, a FailedScheduling Event repeated), it
is a stable failure.
"""

from __future__ import annotations

from agent.diagnose.facts import (
    AGENT_PLACEMENT,
    CONTROLLER_DEPLOYMENT,
    CRD_PATH,
    PLUGIN_DAEMONSET,
    Facts,
    Obj,
    labels,
    md,
    parse_time,
    placement_of,
)
from agent.diagnose.reader import named
from agent.diagnose.report import BROKEN, WAITING, Boundary
from api import names
from runtime.nodematch import pod_spec_matches_node, untolerated_taint

PREPARE_FAILED = "FailedPrepareDynamicResources"
# kubelet's words for a driver it has no plugin for (newer, then older releases).
NOT_REGISTERED = ("is not registered", "not found in the list of registered DRA")


def overlay(facts: Facts) -> str:
    """The install command of the README for the cluster's IMEX mode."""
    command = (f"helm upgrade --install dra-driver-nvidia-gpu packaging/helm/dra-driver-nvidia-gpu"
               f" --namespace {facts.driver_namespace} --create-namespace")
    if facts.host_managed:
        command += (" --set resources.computeDomains.imex.mode=hostManaged"
                    " --set featureGates.HostManagedIMEXDaemon=true")
    elif facts.agent_placement:
        command += f" --set resources.computeDomains.imex.placement={AGENT_PLACEMENT}"
    return command


def by_age(age: float, grace: float) -> str:
    return WAITING if age < grace else BROKEN


def controller_logs(facts: Facts) -> str:
    return f"kubectl -n {facts.driver_namespace} logs deploy/{CONTROLLER_DEPLOYMENT}"


def installation(facts: Facts, grace: float) -> Boundary:
    b = Boundary("installation", "installation: CRDs, DeviceClasses, controller")
    for crd, obj in facts.crds.items():
        refused = facts.unreadable(named(CRD_PATH, crd))
        if refused:
            b.see(f"CRD {crd}: could not read it ({refused})")
            continue
        if obj is None:
            b.fail(BROKEN, f"CRD {crd} is not installed", overlay(facts))
        b.see(f"CRD {crd}: {'installed' if obj is not None else 'MISSING'}")
    wanted = [names.DEVICE_CLASS_DEFAULT_CHANNEL]
    if not facts.host_managed and not facts.agent_placement:
        wanted.append(names.DEVICE_CLASS_DAEMON)
    for cls in wanted:
        refused = facts.unreadable(facts.device_class_path(cls))
        if refused:
            b.see(f"DeviceClass {cls}: could not read it ({refused})")
        elif facts.device_classes.get(cls) is None:
            who = "daemon pods'" if cls == names.DEVICE_CLASS_DAEMON else "workloads' channel"
            b.see(f"DeviceClass {cls}: MISSING")
            b.fail(BROKEN, f"DeviceClass {cls} is missing: the scheduler cannot allocate the "
                   f"{who} claims", f"kubectl get deviceclasses; {overlay(facts)}")
        else:
            b.see(f"DeviceClass {cls}: installed")
    b.see(f"IMEX mode: {facts.mode} ({facts.mode_source})")
    if not facts.host_managed:
        _placement(facts, b)
    _controller(facts, b)
    return b


def _placement(facts: Facts, b: Boundary) -> None:
    """The controller decides whether daemon objects exist, the agents whether they run
    nvidia-imex: when the two disagree, either no one runs it or two do."""
    b.see(f"IMEX placement: {facts.placement} ({facts.placement_source})")
    controller, plugin = placement_of(facts.controller), placement_of(facts.plugin_daemonset)
    if controller and plugin and controller != plugin:
        ns = facts.driver_namespace
        b.fail(BROKEN, f"the controller runs IMEX placement {controller!r} but the kubelet "
               f"plugin {plugin!r}: both must be installed with the same "
               "resources.computeDomains.imex.placement",
               f"kubectl -n {ns} get deploy/{CONTROLLER_DEPLOYMENT} ds/{PLUGIN_DAEMONSET} -o "
               f"yaml | grep -A1 {names.ENV_IMEX_PLACEMENT}; {overlay(facts)}")


def _controller(facts: Facts, b: Boundary) -> None:
    lease = facts.lease
    ns = facts.driver_namespace
    where = f"Lease {ns}/{names.DEFAULT_LEADER_ELECTION_LEASE_NAME}"
    if lease is not None:
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = parse_time(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or 15)
        ago = (facts.now - renewed).total_seconds() if renewed else None
        if holder and ago is not None and ago <= duration:
            b.see(f"controller leading: {where} held by {holder}, renewed {ago:.0f}s ago")
            return
        b.see(f"{where}: holder {holder or '(none)'}, renewed "
              f"{'never' if ago is None else f'{ago:.0f}s ago'} (lease {duration:.0f}s)")
        b.fail(BROKEN, "the controller is not leading: its lease has lapsed, so no replica "
               "reconciles ComputeDomains", f"kubectl -n {ns} get pods -o wide; "
               + controller_logs(facts))
        return
    deployment = facts.controller
    if deployment is not None:
        ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
        b.see(f"Deployment {ns}/{md(deployment)['name']}: {ready} ready replica(s), "
              f"no leader Lease")
        if ready == 0:
            b.fail(BROKEN, "the controller is not running (0 ready replicas)",
                   f"kubectl -n {ns} describe deploy/{md(deployment)['name']}")
        return
    reason = facts.errors.get(next((p for p in facts.errors if "/leases/" in p), ""), "")
    if reason:
        b.see(f"{where}: could not read it ({reason})")
        return
    b.see(f"{where}: MISSING; no Deployment {ns}/{CONTROLLER_DEPLOYMENT}")
    b.fail(BROKEN, "no controller is running (no leader Lease, no Deployment)",
           f"kubectl -n {ns} get deploy,pods; {overlay(facts)}")


def publication(facts: Facts, grace: float) -> Boundary:
    b = Boundary("publication", "node publication: ResourceSlices, plugin registered")
    by_node: dict[str, list[str]] = {}
    for s in facts.slices:
        node = (s.get("spec") or {}).get("nodeName") or ""
        by_node.setdefault(node, []).extend(
            str(d.get("name")) for d in (s.get("spec") or {}).get("devices") or ())
    b.see(f"{len(by_node)} node(s) publish {names.DRIVER_NAME} ResourceSlices")
    if not by_node:
        return b.fail(BROKEN, f"no node publishes {names.DRIVER_NAME} devices: the kubelet "
                      "plugin is not running anywhere",
                      f"kubectl get resourceslices; kubectl -n {facts.driver_namespace} get "
                      "pods -o wide")
    targets = target_nodes(facts)
    _unbound_candidates(facts, by_node, b)
    if not targets:
        b.see("no workload pod is bound to a node yet")
    wanted = [names.DEVICE_CHANNEL_0]
    if not facts.host_managed and not facts.agent_placement:
        wanted.append(names.DEVICE_DAEMON_0)  # the daemon pods' device
    for node in targets:
        devices = by_node.get(node)
        unregistered = _kubelet_says_unregistered(facts, node)
        if devices is None or unregistered:
            why = (f"kubelet: {unregistered}" if unregistered
                   else f"no ResourceSlice of {names.DRIVER_NAME} for this node")
            b.see(f"{node}: {why}")
            b.fail(BROKEN, f"the plugin is not registered on node {node}: driver "
                   f"{names.DRIVER_NAME} is not running there ({why})",
                   _plugin_pod_command(facts, node))
            continue
        missing = [d for d in wanted if d not in devices]
        b.see(f"{node}: publishes {', '.join(sorted(devices)) or 'no devices'}")
        if missing:
            b.fail(BROKEN, f"node {node} does not publish {', '.join(missing)}: the plugin "
                   "runs in the other IMEX mode than the controller",
                   f"kubectl get resourceslices -o yaml --field-selector spec.nodeName={node}")
        _plugin_pod(facts, node, b)
    return b


def _unbound_candidates(facts: Facts, by_node: dict[str, list[str]], b: Boundary) -> None:
    """A pending pod whose candidate nodes all lack our slices waits on the plugin there,
    not on the scheduler: say so here rather than as an allocation problem."""
    for pod in facts.pods:
        spec = pod.get("spec") or {}
        if spec.get("nodeName"):
            continue
        candidates = sorted(n for n, node in facts.nodes.items()
                            if pod_spec_matches_node(spec, node)
                            and untolerated_taint(spec.get("tolerations") or (), node) is None)
        if candidates and not any(n in by_node for n in candidates):
            shown = ", ".join(candidates[:5]) + (" ..." if len(candidates) > 5 else "")
            b.see(f"pod {md(pod)['name']} may only go to {shown}: none publishes a "
                  f"{names.DRIVER_NAME} ResourceSlice")
            b.fail(BROKEN, f"the plugin is not registered on node {candidates[0]}: driver "
                   f"{names.DRIVER_NAME} publishes no devices on the nodes pod "
                   f"{md(pod)['name']} may run on", _plugin_pod_command(facts, candidates[0]))


def _plugin_pod_command(facts: Facts, node: str) -> str:
    return (f"kubectl -n {facts.driver_namespace} get pods -o wide --field-selector "
            f"spec.nodeName={node}; kubectl get resourceslices --field-selector "
            f"spec.nodeName={node}")


def _plugin_pod(facts: Facts, node: str, b: Boundary) -> None:
    """With the agent as a DaemonSet: is its pod on `node` Ready?"""
    if facts.plugin_daemonset is None:
        return
    pods = [p for p in facts.plugin_pods if (p.get("spec") or {}).get("nodeName") == node]
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for p in pods for c in (p.get("status") or {}).get("conditions") or ())
    if not ready:
        b.see(f"{node}: no Ready {facts.plugin_daemonset['metadata']['name']} pod")
        b.fail(BROKEN, f"the plugin is not running on node {node} (its pod is not Ready)",
               _plugin_pod_command(facts, node))


def _kubelet_says_unregistered(facts: Facts, node: str) -> str:
    """kubelet's latest prepare failure for a not-running workload pod on `node`, if it says
    the driver is not registered there."""
    for pod in facts.pods:
        if (pod.get("spec") or {}).get("nodeName") != node or _running(pod):
            continue
        failures = facts.events_for(pod, PREPARE_FAILED)
        if failures and any(w in str(failures[-1].get("message")) for w in NOT_REGISTERED):
            return str(failures[-1].get("message"))
    return ""


def _running(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def target_nodes(facts: Facts) -> list[str]:
    """The nodes the workload pods are bound to."""
    return sorted({str((p.get("spec") or {}).get("nodeName")) for p in facts.pods
                   if (p.get("spec") or {}).get("nodeName")})


def reconciliation(facts: Facts, grace: float) -> Boundary:
    b = Boundary("reconciliation",
                 "controller reconciliation: finalizer, templates, DaemonSet, status")
    cd = facts.cd or {}
    age = facts.age(cd)
    finalizers = md(cd).get("finalizers") or []
    deleting = bool(md(cd).get("deletionTimestamp"))
    b.see(f"finalizers: {', '.join(finalizers) or '(none)'}")
    # The objects first: their own evidence names a taken template more precisely than
    # the condition the controller wrote about it.
    _template(facts, b, age, grace)
    for cond in (cd.get("status") or {}).get("conditions") or ():
        b.see(f"condition {cond.get('type')}={cond.get('status')} ({cond.get('reason')}): "
              f"{cond.get('message')}")
        if cond.get("type") == "Reconciled" and cond.get("status") == "False":
            b.fail(BROKEN, _condition_cause(facts, cond),
                   f"kubectl -n {facts.namespace} describe computedomain {facts.name}")
    for event in facts.events_for(cd)[-3:]:
        if event.get("type") == "Warning":
            b.see(f"Event {event.get('reason')}: {event.get('message')}")
    if names.FINALIZER not in finalizers and not deleting:
        b.fail(by_age(age, grace), "the controller has not reconciled this ComputeDomain "
               f"yet (no {names.FINALIZER} finalizer, {age:.0f}s after creation)",
               controller_logs(facts))
    if facts.agent_placement:
        _no_daemon_objects(facts, b)
    elif not facts.host_managed:
        _daemon_objects(facts, b, age, grace)
    status = cd.get("status") or {}
    b.see(f"status.status={status.get('status') or '(unset)'}, "
          f"{len(status.get('nodes') or [])} node(s) in status.nodes")
    return b


def _condition_cause(facts: Facts, cond: Obj) -> str:
    if cond.get("reason") == "TemplateNameTaken":
        return (f"the ResourceClaimTemplate name {facts.template_name!r} is taken by another "
                f"object: {cond.get('message')}")
    return f"the controller is blocked ({cond.get('reason')}): {cond.get('message')}"


def _template(facts: Facts, b: Boundary, age: float, grace: float) -> None:
    name, ns = facts.template_name, facts.namespace
    template = facts.template
    if template is None:
        b.see(f"workload ResourceClaimTemplate {ns}/{name}: MISSING")
        b.fail(by_age(age, grace), f"the workload ResourceClaimTemplate {ns}/{name} does not "
               "exist yet", controller_logs(facts))
        return
    owner = labels(template).get(names.LABEL_COMPUTE_DOMAIN)
    if owner != facts.uid:
        who = _owner_text(template)
        b.see(f"workload ResourceClaimTemplate {ns}/{name}: exists, {who}")
        b.fail(BROKEN, f"the ResourceClaimTemplate name {name!r} is taken by another object "
               f"({who}), so this ComputeDomain's workloads get no channel",
               f"kubectl -n {ns} get resourceclaimtemplate {name} -o yaml")
        return
    b.see(f"workload ResourceClaimTemplate {ns}/{name}: created for this domain")


def _owner_text(obj: Obj) -> str:
    owner = labels(obj).get(names.LABEL_COMPUTE_DOMAIN)
    if owner:
        return f"labelled for ComputeDomain {owner}"
    refs = md(obj).get("ownerReferences") or []
    if refs:
        return "owned by " + ", ".join(f"{r.get('kind')} {r.get('name')}" for r in refs)
    managers = {m.get("manager") for m in md(obj).get("managedFields") or () if m.get("manager")}
    if managers:
        return "written by " + ", ".join(sorted(managers))
    return "not created by the ComputeDomain controller"


def _daemon_objects(facts: Facts, b: Boundary, age: float, grace: float) -> None:
    ns, name = facts.driver_namespace, names.daemon_object_name(facts.uid)
    for kind, obj in (("ResourceClaimTemplate", facts.daemon_template),
                      ("DaemonSet", facts.daemonset)):
        if obj is None:
            b.see(f"daemon {kind} {ns}/{name}: MISSING")
            b.fail(by_age(age, grace), f"the daemon {kind} {ns}/{name} does not exist yet",
                   controller_logs(facts))
        elif kind == "DaemonSet":
            st = obj.get("status") or {}
            b.see(f"daemon DaemonSet {ns}/{name}: {st.get('desiredNumberScheduled', 0)} "
                  f"desired, {st.get('numberReady', 0)} ready")
        else:
            b.see(f"daemon ResourceClaimTemplate {ns}/{name}: present")


def _no_daemon_objects(facts: Facts, b: Boundary) -> None:
    """Agent placement: the node agents run nvidia-imex, so the controller must not have
    made daemon objects; if it did, a controller of the other placement reconciles."""
    ns, name = facts.driver_namespace, names.daemon_object_name(facts.uid)
    found = [f"{kind} {ns}/{name}" for kind, obj in (
        ("ResourceClaimTemplate", facts.daemon_template), ("DaemonSet", facts.daemonset))
        if obj is not None]
    if facts.daemon_pods:
        found.append(f"{len(facts.daemon_pods)} daemon pod(s)")
    if not found:
        b.see("no daemon DaemonSet or ResourceClaimTemplate expected: IMEX runs in the node "
              "agents (agent placement)")
        return
    b.see(f"daemon objects of this domain exist in agent placement: {', '.join(found)}")
    b.fail(BROKEN, "the controller and the node agents disagree about the IMEX placement: "
           f"the agents run nvidia-imex themselves, yet {', '.join(found)} exist for this "
           "domain (left from a pod-placement install, or a controller of placement pod "
           "reconciles it)",
           f"kubectl -n {ns} get deploy,daemonsets -o wide; {controller_logs(facts)}")


def allocation(facts: Facts, grace: float) -> Boundary:
    b = Boundary("allocation", "allocation: workload claims, devices, reservations")
    ns = facts.namespace
    if not facts.pods:
        b.see(f"no pod in {ns} references ResourceClaimTemplate {facts.template_name}")
        return b.fail(WAITING, "expected: no workload has landed on a node yet (no pod uses "
                      "this domain's ResourceClaimTemplate)",
                      f"kubectl -n {ns} get pods; reference the template from a pod's "
                      f"spec.resourceClaims[].resourceClaimTemplateName: {facts.template_name}")
    for pod in facts.pods:
        _pod_allocation(facts, pod, b, grace)
    return b


def _pod_allocation(facts: Facts, pod: Obj, b: Boundary, grace: float) -> None:
    ns, name = facts.namespace, md(pod)["name"]
    age = facts.age(pod)
    describe = f"kubectl -n {ns} describe pod {name}"
    claim = facts.pod_claim(pod, facts.claims, facts.template_name)
    unschedulable = next((c for c in (pod.get("status") or {}).get("conditions") or ()
                          if c.get("type") == "PodScheduled" and c.get("status") == "False"),
                         None)
    if claim is None and unschedulable is None:
        b.see(f"pod {name}: no ResourceClaim generated yet")
        b.fail(by_age(age, grace), f"pod {name} has no ResourceClaim from template "
               f"{facts.template_name} yet", describe)
        return
    claim = claim or {"metadata": {"name": "(none yet)"}}
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    reserved = [r.get("name") for r in status.get("reservedFor") or ()]
    node = (pod.get("spec") or {}).get("nodeName")
    if results:
        where = ", ".join(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
                          for r in results)
        b.see(f"pod {name}: claim {md(claim)['name']} allocated {where}, reserved for "
              f"{', '.join(map(str, reserved)) or '(nobody)'}, node {node or '(unbound)'}")
        return
    if unschedulable is not None:
        tries = facts.event_count(facts.events_for(pod, "FailedScheduling"))
        message = unschedulable.get("message") or "(no message)"
        b.see(f"pod {name}: unschedulable ({tries} FailedScheduling event(s)): {message}")
        stable = tries >= 2 or age >= grace
        b.fail(BROKEN if stable else WAITING,
               f"pod {name} cannot be scheduled: {message}",
               describe + "; kubectl get nodes -L " + names.LABEL_GPU_CLIQUE)
        return
    b.see(f"pod {name}: claim {md(claim)['name']} not allocated yet")
    b.fail(by_age(age, grace), f"the claim of pod {name} is not allocated yet", describe)

