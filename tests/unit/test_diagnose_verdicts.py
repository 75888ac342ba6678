"""`diagnose` verdicts over hand-built cluster states: bootstrap delay against stable
failure, the reference's words, and the report's order and exit statuses."""

from __future__ import annotations

import argparse
import io
import json
from datetime import UTC, datetime, timedelta

from agent.diagnose.command import evaluate, run
from agent.diagnose.facts import (
    AGENT_PLACEMENT,
    DRIVER_MANAGED,
    HOST_MANAGED,
    PLUGIN_CONTAINER,
    PLUGIN_DAEMONSET,
    POD_PLACEMENT,
    Facts,
    _mode,
    _placement,
)
from agent.diagnose.report import (
    BROKEN,
    EXIT_BROKEN,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WAITING,
    OK,
    SKIPPED,
    UNCHECKED,
    WAITING,
    Boundary,
    Report,
)
from api import names

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
UID = "11111111-2222-3333-4444-555555555555"
CLIQUE = "0f2a6e3c-1111-2222-3333-444455556666.1"
DNS = "dra-driver-nvidia-gpu"


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def obj(name: str, namespace: str = "", age: float = 300, **extra) -> dict:
    md = {"name": name, "uid": f"uid-{name}", "creationTimestamp": ago(age)}
    if namespace:
        md["namespace"] = namespace
    md.update(extra.pop("metadata", {}))
    return {"metadata": md, **extra}


def healthy(age: float = 300) -> Facts:
    """A driver-managed domain with one workload pod Running on node-01."""
    f = Facts("default", "cd", DNS, NOW)
    f.crds = {names.CRD_COMPUTE_DOMAINS: {}, names.CRD_CLIQUES: {}}
    f.device_classes = {names.DEVICE_CLASS_DEFAULT_CHANNEL: {}, names.DEVICE_CLASS_DAEMON: {}}
    f.lease = {"spec": {"holderIdentity": "c-1", "renewTime": ago(1),
                        "leaseDurationSeconds": 15}}
    f.cd = obj("cd", "default", age, metadata={"uid": UID, "finalizers": [names.FINALIZER]},
               spec={"channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
               status={"status": "Ready"})
    f.slices = [{"spec": {"driver": names.DRIVER_NAME, "nodeName": "node-01", "devices": [
        {"name": names.DEVICE_CHANNEL_0}, {"name": names.DEVICE_DAEMON_0}]}}]
    f.nodes = {"node-01": obj("node-01", metadata={"labels": {
        names.LABEL_COMPUTE_DOMAIN: UID, names.LABEL_GPU_CLIQUE: CLIQUE}})}
    f.template = obj("cd-channel", "default", metadata={"labels": {
        names.LABEL_COMPUTE_DOMAIN: UID}})
    f.daemon_template = obj(names.daemon_object_name(UID), DNS)
    f.daemonset = obj(names.daemon_object_name(UID), DNS)
    f.pods = [obj("w0", "default", age, kind="Pod",
                  spec={"nodeName": "node-01", "resourceClaims": [
                      {"name": "ch", "resourceClaimTemplateName": "cd-channel"}]},
                  status={"phase": "Running", "resourceClaimStatuses": [
                      {"name": "ch", "resourceClaimName": "w0-ch"}]})]
    f.claims = {"w0-ch": obj("w0-ch", "default", status={
        "allocation": {"devices": {"results": [{"driver": names.DRIVER_NAME, "pool": "node-01",
                                                "device": names.DEVICE_CHANNEL_0}]}},
        "reservedFor": [{"resource": "pods", "name": "w0"}]})}
    f.daemon_pods = [obj("d0", DNS, age, kind="Pod", spec={"nodeName": "node-01"},
                         status={"phase": "Running", "containerStatuses": [
                             {"name": names.DAEMON_CONTAINER_NAME, "ready": True,
                              "restartCount": 0, "state": {"running": {}}}]})]
    f.cliques = [obj(names.clique_object_name(UID, CLIQUE), DNS, daemons=[
        {"nodeName": "node-01", "index": 0, "ipAddress": "10.0.0.1", "status": "Ready"}])]
    return f


def event(about: dict, reason: str, message: str, count: int = 1, age: float = 5) -> dict:
    return {"involvedObject": {"uid": about["metadata"]["uid"], "name": about["metadata"]["name"],
                               "kind": about.get("kind", "Pod")},
            "reason": reason, "message": message, "count": count, "lastTimestamp": ago(age)}


def test_a_healthy_domain_is_ok_everywhere_and_exits_0() -> None:
    report = evaluate(healthy(), grace=120)
    assert {b.name: b.status for b in report.boundaries} == {
        "installation": OK, "publication": OK, "reconciliation": OK, "allocation": OK,
        "bootstrap": OK, "injection": OK, "cleanup": SKIPPED}
    assert report.exit_status == EXIT_OK
    assert report.verdict()["boundary"] is None


def test_no_workload_yet_is_expected_and_exits_3() -> None:
    f = healthy()
    f.pods, f.claims = [], {}
    report = evaluate(f, grace=120)
    assert report.verdict()["status"] == WAITING
    assert report.verdict()["cause"].startswith("expected: no workload has landed on a node yet")
    assert report.exit_status == EXIT_WAITING


def _entry_not_ready(f: Facts) -> None:
    f.cliques[0]["daemons"][0]["status"] = names.STATUS_NOT_READY


def test_a_young_not_ready_daemon_is_bootstrap_delay() -> None:
    f = healthy(age=20)
    f.daemon_pods[0]["metadata"]["creationTimestamp"] = ago(10)
    f.cd["status"]["status"] = "NotReady"
    _entry_not_ready(f)
    report = evaluate(f, grace=120)
    assert (report.verdict()["boundary"], report.verdict()["status"]) == ("bootstrap", WAITING)
    assert "expected while it starts" in report.verdict()["cause"]


def test_a_crash_history_makes_it_a_stable_failure_whatever_the_age() -> None:
    f = healthy(age=20)
    f.daemon_pods[0]["metadata"]["creationTimestamp"] = ago(10)
    _entry_not_ready(f)
    f.events = [event(f.daemon_pods[0], "IMEXDaemonExited",
                      "nvidia-imex exited with code 1 after 0.2s; restart #3 in 1.6s")]
    report = evaluate(f, grace=120)
    verdict = report.verdict()
    assert (verdict["boundary"], verdict["status"]) == ("bootstrap", BROKEN)
    # The domain says Ready, this node's daemon does not.
    assert verdict["cause"].startswith("global Ready is not local readiness")
    assert "IMEXDaemonExited: nvidia-imex exited with code 1" in verdict["cause"]
    assert report.exit_status == EXIT_BROKEN


def test_the_same_delay_past_the_grace_period_is_broken() -> None:
    f = healthy()
    _entry_not_ready(f)
    assert evaluate(f, grace=120).verdict()["status"] == BROKEN
    assert evaluate(f, grace=600).verdict()["status"] == WAITING


def test_another_domains_label_on_the_node() -> None:
    f = healthy()
    f.nodes["node-01"]["metadata"]["labels"][names.LABEL_COMPUTE_DOMAIN] = "other-uid"
    verdict = evaluate(f, grace=120).verdict()
    assert verdict["boundary"] == "bootstrap"
    assert "labelled for another ComputeDomain (other-uid)" in verdict["cause"]


def test_a_lapsed_lease_means_no_controller_is_leading() -> None:
    f = healthy()
    f.lease["spec"]["renewTime"] = ago(90)
    verdict = evaluate(f, grace=120).verdict()
    assert verdict["boundary"] == "installation"
    assert "the controller is not leading" in verdict["cause"]


def test_later_boundaries_are_unchecked_but_keep_their_evidence() -> None:
    f = healthy()
    f.slices = []
    report = evaluate(f, grace=120)
    assert [b.status for b in report.boundaries] == [
        OK, BROKEN, UNCHECKED, UNCHECKED, UNCHECKED, UNCHECKED, SKIPPED]
    assert report.boundaries[3].evidence  # allocation still shows what it saw
    assert all(not b.cause for b in report.boundaries[2:])


def test_cleanup_waits_then_breaks_and_names_what_is_left() -> None:
    f = healthy()
    f.cd["metadata"]["deletionTimestamp"] = ago(10)
    f.labelled_nodes = ["node-01"]
    report = evaluate(f, grace=120)
    assert [b.status for b in report.boundaries[1:6]] == [SKIPPED] * 5
    assert (report.verdict()["boundary"], report.verdict()["status"]) == ("cleanup", WAITING)
    assert "node label resource.nvidia.com/computeDomain still on node-01" in (
        report.verdict()["cause"])
    f.cd["metadata"]["deletionTimestamp"] = ago(600)
    assert evaluate(f, grace=120).verdict()["status"] == BROKEN


def test_mode_detection_prefers_the_controller_deployment() -> None:
    f = healthy()
    f.controller = {"spec": {"template": {"spec": {"containers": [{"env": [
        {"name": names.ENV_IMEX_MODE, "value": HOST_MANAGED}]}]}}}}
    assert _mode(f, "")[0] == HOST_MANAGED
    f.controller = None
    assert _mode(f, "")[0] == DRIVER_MANAGED  # a daemon DaemonSet exists for the domain
    assert _mode(f, HOST_MANAGED) == (HOST_MANAGED, "--mode")


def test_json_document_shape() -> None:
    first = Boundary("a", "A").fail(BROKEN, "why", "do this")
    report = Report({"namespace": "n", "name": "x"}, [first, Boundary("b", "B")])
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["verdict"] == {"status": BROKEN, "boundary": "a", "cause": "why",
                              "next": "do this"}
    assert doc["boundaries"][1]["status"] == UNCHECKED


def test_bad_domain_argument_is_a_usage_error() -> None:
    err = io.StringIO()
    args = argparse.Namespace(domain="just-a-name", kubeconfig="", driver_namespace=DNS,
                              grace=120.0, mode="", placement="", json=False,
                              sim_root=None)
    assert run(args, out=io.StringIO(), err=err) == EXIT_USAGE
    assert "is not NAMESPACE/NAME" in err.getvalue()


def test_kubelet_saying_the_driver_is_not_registered_breaks_publication() -> None:
    """Slices can outlive the plugin (kubelet wipes them 30 s later): kubelet's own
    complaint on a pending pod is evidence enough, in its newer and older words."""
    for message in ("DRA driver compute-domain.nvidia.com is not registered",
                    "plugin name compute-domain.nvidia.com not found in the list of "
                    "registered DRA plugins"):
        f = healthy()
        f.pods[0]["status"]["phase"] = "Pending"
        f.events = [event(f.pods[0], "FailedPrepareDynamicResources", message)]
        verdict = evaluate(f, grace=120).verdict()
        assert verdict["boundary"] == "publication"
        assert verdict["cause"].startswith("the plugin is not registered on node node-01")


def test_events_k8s_io_series_count_as_retry_history() -> None:
    """Newer writers keep the repeat count in `series`: two observations of a scheduling
    failure are a stable answer, not a delay."""
    f = healthy(age=5)
    f.pods[0]["spec"].pop("nodeName")
    f.pods[0]["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/4 nodes are available"}]}
    f.claims["w0-ch"]["status"] = {}
    failed = event(f.pods[0], "FailedScheduling", "0/4 nodes are available")
    f.events = [failed]
    assert evaluate(f, grace=120).verdict()["status"] == WAITING
    failed.update(count=None, lastTimestamp=None,
                  series={"count": 3, "lastObservedTime": ago(1)})
    verdict = evaluate(f, grace=120).verdict()
    assert (verdict["boundary"], verdict["status"]) == ("allocation", BROKEN)


# --- agent placement: the node agents run nvidia-imex, no daemon objects --------------------

PLUGIN_POD = "dra-driver-nvidia-gpu-kubelet-plugin-x7k2p"


def placed(value: str) -> dict:
    """A Deployment or DaemonSet whose container says IMEX_PLACEMENT=value."""
    return {"spec": {"template": {"spec": {"containers": [{"name": PLUGIN_CONTAINER, "env": [
        {"name": names.ENV_IMEX_PLACEMENT, "value": value}]}]}}}}


def agent_healthy(age: float = 300) -> Facts:
    """`healthy()` with IMEX in the node agent: no daemon DeviceClass, template, DaemonSet
    or pods; node-01's agent pod (up for an hour) holds the clique entry."""
    f = healthy(age)
    f.placement, f.placement_source = AGENT_PLACEMENT, "test"
    del f.device_classes[names.DEVICE_CLASS_DAEMON]
    f.daemon_template = f.daemonset = None
    f.daemon_pods = []
    f.controller = placed(AGENT_PLACEMENT)
    f.plugin_daemonset = {**obj(PLUGIN_DAEMONSET, DNS), **placed(AGENT_PLACEMENT)}
    f.plugin_pods = [obj(PLUGIN_POD, DNS, 3600, spec={"nodeName": "node-01"}, status={
        "phase": "Running", "podIP": "10.0.0.1",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": PLUGIN_CONTAINER, "ready": True, "restartCount": 2,
                               "state": {"running": {"startedAt": ago(3000)}}}]})]
    return f


def node_event(node: str, reason: str, message: str, age: float = 5) -> dict:
    """As the node agent writes them: about the Node, by kind and name (no UID)."""
    return {"involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
            "reason": reason, "message": message, "count": 1, "lastTimestamp": ago(age)}


def evidence(report: Report, boundary: str) -> str:
    return "\n".join(next(b for b in report.boundaries if b.name == boundary).evidence)


def test_agent_placement_healthy_needs_no_daemon_objects() -> None:
    report = evaluate(agent_healthy(), grace=120)
    assert report.exit_status == EXIT_OK, report.render()
    assert "IMEX placement: agent" in evidence(report, "installation")
    assert ("no daemon DaemonSet or ResourceClaimTemplate expected: IMEX runs in the node "
            "agents") in evidence(report, "reconciliation")
    bootstrap = evidence(report, "bootstrap")
    assert (f"node-01: node agent pod {DNS}/{PLUGIN_POD} Running, container "
            f"{PLUGIN_CONTAINER} running, 2 restart(s), ready") in bootstrap
    assert "clique entry in" in bootstrap and "IP 10.0.0.1, Ready" in bootstrap
    assert report.domain["placement"] == AGENT_PLACEMENT
    assert "IMEX in the agent" in report.render()


def test_agent_placement_missing_entry_waits_then_node_events_break_it() -> None:
    f = agent_healthy(age=20)
    for p in f.pods:
        p["metadata"]["creationTimestamp"] = ago(20)
    f.cliques[0]["daemons"] = []
    f.cd["status"]["status"] = "NotReady"
    # The agent pod has run for an hour: its age is no reason to call a young domain broken.
    verdict = evaluate(f, grace=120).verdict()
    assert (verdict["boundary"], verdict["status"]) == ("bootstrap", WAITING)
    assert verdict["cause"] == "the node agent on node-01 has not joined its clique yet"
    f.events = [node_event("node-01", "IMEXDaemonExited",
                           "nvidia-imex exited with code 1 after 0.2s; restart #3 in 1.6s")]
    report = evaluate(f, grace=120)
    verdict = report.verdict()
    assert (verdict["boundary"], verdict["status"]) == ("bootstrap", BROKEN)
    assert verdict["cause"].endswith("(IMEXDaemonExited: nvidia-imex exited with code 1 after "
                                     "0.2s; restart #3 in 1.6s)")
    assert verdict["next"] == (f"kubectl describe node node-01; kubectl logs -n {DNS} "
                               f"{PLUGIN_POD} -c {PLUGIN_CONTAINER}")
    assert "node-01: Node Event IMEXDaemonExited (x1)" in evidence(report, "bootstrap")


def test_agent_placement_not_ready_entry_with_node_events() -> None:
    f = agent_healthy(age=20)
    for p in f.pods:
        p["metadata"]["creationTimestamp"] = ago(20)
    _entry_not_ready(f)
    # An Event from before this domain's workload came is about another domain.
    f.events = [node_event("node-01", "IMEXDaemonNotReady", "old", age=900)]
    verdict = evaluate(f, grace=120).verdict()
    assert (verdict["boundary"], verdict["status"]) == ("bootstrap", WAITING)
    assert "expected while it starts" in verdict["cause"]
    f.events.append(node_event("node-01", "IMEXDaemonNotReady",
                               "nvidia-imex is INIT_GPU, not READY, 61s after it started"))
    f.events.append(node_event("node-02", "IMEXDaemonExited", "another node"))
    verdict = evaluate(f, grace=120).verdict()
    assert (verdict["boundary"], verdict["status"]) == ("bootstrap", BROKEN)
    assert verdict["cause"] == (
        "global Ready is not local readiness: the ComputeDomain says Ready, but the IMEX "
        "daemon on node node-01 (supervised by the node agent) is not ready "
        "(IMEXDaemonNotReady: nvidia-imex is INIT_GPU, not READY, 61s after it started)")
    assert verdict["next"].startswith("kubectl describe node node-01; kubectl logs -n ")


def test_daemon_objects_in_agent_placement_mean_the_components_disagree() -> None:
    for leftover in ("daemonset", "daemon_template", "daemon_pods"):
        f = agent_healthy()
        whole = healthy()
        setattr(f, leftover, getattr(whole, leftover))
        report = evaluate(f, grace=120)
        verdict = report.verdict()
        assert (verdict["boundary"], verdict["status"]) == ("reconciliation", BROKEN), leftover
        assert verdict["cause"].startswith("the controller and the node agents disagree about "
                                           "the IMEX placement")


def test_placement_detection_and_a_controller_plugin_mismatch() -> None:
    f = agent_healthy()
    assert _placement(f, "")[0] == AGENT_PLACEMENT  # the controller's env
    f.controller = None
    assert _placement(f, "") == (AGENT_PLACEMENT,
                                 f"the kubelet-plugin DaemonSet's {names.ENV_IMEX_PLACEMENT}")
    assert _mode(f, "")[0] == DRIVER_MANAGED  # no daemon objects, yet not host-managed
    f.plugin_daemonset = None
    assert _placement(f, "")[0] == POD_PLACEMENT
    assert _placement(f, AGENT_PLACEMENT) == (AGENT_PLACEMENT, "--placement")
    # The controller without IMEX_PLACEMENT runs pod placement; the plugin says agent.
    f = agent_healthy()
    f.controller = {"spec": {"template": {"spec": {"containers": [{"env": []}]}}}}
    verdict = evaluate(f, grace=120).verdict()
    assert (verdict["boundary"], verdict["status"]) == ("installation", BROKEN)
    assert verdict["cause"].startswith("the controller runs IMEX placement 'pod' but the "
                                       "kubelet plugin 'agent'")
