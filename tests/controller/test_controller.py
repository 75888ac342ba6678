"""The controller end to end against the API emulator, with the real kubernetes client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from controller_env import DRIVER_NS, ControllerThread, make_config, wait_for
from kubernetes import client

from api import names
from api.computedomain import StoredComputeDomain
from runtime.draclient import DraApi


@pytest.fixture
def controller(apiserver, api):
    thread = ControllerThread(apiserver, make_config())
    try:
        yield thread
    finally:
        thread.close()


def test_new_domain_gets_its_objects_finalizer_and_status(controller, api):
    cd = api.create_cd("cd1", mode="All")
    uid = cd["metadata"]["uid"]
    name = names.daemon_object_name(uid)
    wait_for(lambda: (api.cd("cd1").get("status") or {}).get("status") == "Ready",
             what="status Ready")
    got = api.cd("cd1")
    assert got["metadata"]["finalizers"] == [names.FINALIZER]
    workload = api.rct("cd1-rct", "default")
    assert workload["metadata"]["labels"] == {names.LABEL_COMPUTE_DOMAIN: uid,
                                              names.LABEL_TARGET: names.TARGET_WORKLOAD}
    assert workload["metadata"]["finalizers"] == [names.FINALIZER]
    params = workload["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params == {"apiVersion": names.API_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
                      "domainID": uid, "allocationMode": "All"}
    daemon_rct = api.rct(name, DRIVER_NS)
    assert daemon_rct["metadata"]["labels"][names.LABEL_TARGET] == names.TARGET_DAEMON
    ds = api.ds(name)
    assert ds["metadata"]["finalizers"] == [names.FINALIZER]
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {names.LABEL_COMPUTE_DOMAIN: uid}
    assert spec["containers"][0]["command"] == ["compute-domain-agent", "daemon", "run"]
    assert spec["resourceClaims"] == [{"name": "compute-domain-daemon",
                                       "resourceClaimTemplateName": name}]


def test_status_from_cliques_and_non_fabric_pods(controller, api):
    cd = api.create_cd("cd1", num_nodes=2)
    uid = cd["metadata"]["uid"]
    api.clique(uid, "c1", [{"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c1",
                            "index": 0, "status": "Ready"}])
    api.daemon_pod("d1", uid, "n1", clique_id="c1", ip="10.0.0.1")
    api.daemon_pod("d2", uid, "n2", clique_id="", ip="10.0.0.2")
    expected = [
        {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c1", "index": 0, "status": "Ready"},
        {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "", "index": -1, "status": "Ready"}]
    got = wait_for(lambda: (api.cd("cd1").get("status") or {}).get("nodes") == expected
                   and api.cd("cd1"), what="status.nodes")
    assert got["status"]["status"] == "Ready"


def _live_and_gone_entries(api) -> tuple[str, Callable[[], dict]]:
    """A CD whose clique lists n1 (its daemon pod exists) and `gone` (no pod); the CD UID
    and a reader of the clique."""
    cd = api.create_cd("cd1")
    uid = cd["metadata"]["uid"]
    api.daemon_pod("d1", uid, "n1", clique_id="c1", ip="10.0.0.1")
    api.clique(uid, "c1", [
        {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c1", "index": 0},
        {"nodeName": "gone", "ipAddress": "10.0.0.9", "cliqueID": "c1", "index": 1}])

    def read() -> dict:
        return api.custom.get_namespaced_custom_object(
            names.GROUP, names.VERSION, DRIVER_NS, names.PLURAL_CLIQUES,
            names.clique_object_name(uid, "c1"))
    return uid, read


def test_clique_entries_without_a_daemon_pod_are_pruned(controller, api):
    _, read = _live_and_gone_entries(api)

    def daemons():
        return [d["nodeName"] for d in read().get("daemons") or []]
    wait_for(lambda: daemons() == ["n1"], what="pruning")


def test_a_lagging_pod_cache_never_prunes_a_live_daemon(api):
    """The pod cache can miss a daemon pod the clique cache already lists (a dropped watch,
    a re-list): the reference then pruned live entries
    (https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/1418).
    Only entries whose pod the server itself does not have go."""
    from controller.events import EventRecorder
    from controller.reconcile import Reconciler

    uid, read = _live_and_gone_entries(api)
    name = names.clique_object_name(uid, "c1")
    lagging = SimpleNamespace(pods=SimpleNamespace(items={}),  # knows no daemon pod at all
                              cliques=SimpleNamespace(items={f"{DRIVER_NS}/{name}": read()}))
    reconciler = Reconciler(api.api, DraApi(api.api), make_config(), lagging,
                            EventRecorder(api.api, "test"))
    asyncio.run(reconciler._prune_cliques(uid))
    assert [d["nodeName"] for d in read()["daemons"]] == ["n1"]


def test_its_own_template_not_yet_in_the_cache_is_not_taken(api):
    """A second reconcile can run before the template cache has seen the template the first
    one created: the create answers 409, and only the live object tells a template of this
    ComputeDomain from someone else's (which TemplateNameTaken is for)."""
    from controller.events import EventRecorder
    from controller.reconcile import Reconciler

    cd = StoredComputeDomain.from_dict(api.create_cd("cd1"))
    lagging = SimpleNamespace(templates=SimpleNamespace(items={}))  # sees no template at all
    reconciler = Reconciler(api.api, DraApi(api.api), make_config(), lagging,
                            EventRecorder(api.api, "test"))
    asyncio.run(reconciler._ensure_workload_template(cd))
    asyncio.run(reconciler._ensure_workload_template(cd))  # 409: it is ours, no error
    assert reconciler.writes == {cd.uid: 1}
    assert api.rct("cd1-rct", "default")["metadata"]["labels"][names.LABEL_COMPUTE_DOMAIN] \
        == cd.uid


def test_deletion_order_and_the_cd_goes_last(apiserver, controller, api):
    cd = api.create_cd("cd1")
    uid = cd["metadata"]["uid"]
    name = names.daemon_object_name(uid)
    wait_for(lambda: api.ds(name) and api.rct("cd1-rct", "default"), what="objects")
    api.core.create_node({"metadata": {"name": "n1", "labels": {
        names.LABEL_COMPUTE_DOMAIN: uid}}})
    seen: list[tuple[str, str]] = []

    def record(event):
        if event.type == "DELETED":
            seen.append((event.key[1], event.obj["metadata"]["name"]))
    apiserver.call(lambda: apiserver.server.store.add_listener(record))
    api.delete_cd("cd1")
    wait_for(lambda: api.cd("cd1") is None, what="CD gone")
    order = [kind for kind, _ in seen]
    assert order[-1] == "computedomains"
    assert {"resourceclaimtemplates", "daemonsets"} <= set(order[:-1])
    assert order.index("resourceclaimtemplates") < order.index("computedomains")
    node = api.core.read_node("n1")
    assert names.LABEL_COMPUTE_DOMAIN not in (node.metadata.labels or {})


def test_host_managed_creates_only_the_workload_template(apiserver, api):
    config = make_config("--imex-mode", "hostManaged",
                         "--feature-gates", "HostManagedIMEXDaemon=true")
    thread = ControllerThread(apiserver, config)
    try:
        cd = api.create_cd("cd1", mode="All", num_nodes=4)
        wait_for(lambda: (api.cd("cd1").get("status") or {}).get("status") == "Ready",
                 what="Ready once admitted")
        params = api.rct("cd1-rct", "default")["spec"]["spec"]["devices"]["config"][0][
            "opaque"]["parameters"]
        assert params["allocationMode"] == "Single"
        assert api.ds(names.daemon_object_name(cd["metadata"]["uid"])) is None
    finally:
        thread.close()


def test_a_taken_template_name_is_an_event_and_a_condition(controller, api):
    api.resource.create_namespaced_resource_claim_template("default", {
        "metadata": {"name": "taken"}, "spec": {"spec": {"devices": {"requests": [
            {"name": "x", "exactly": {"deviceClassName": "other"}}]}}}})
    api.create_cd("cd1", template="taken")

    def condition():
        conds = (api.cd("cd1").get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Reconciled"), None)
    cond = wait_for(condition, what="condition")
    assert cond["status"] == "False" and cond["reason"] == "TemplateNameTaken"
    # Its workloads get no channel: STATUS says so, whatever the daemons report.
    assert api.cd("cd1")["status"]["status"] == names.STATUS_NOT_READY
    events = api.core.list_namespaced_event("default").items
    assert any(e.reason == "TemplateNameTaken" and e.involved_object.name == "cd1"
               for e in events)
    api.resource.delete_namespaced_resource_claim_template("taken", "default")
    wait_for(lambda: condition() is None, 30, what="condition cleared after recovery")


@pytest.mark.parametrize(("template", "why"), [
    ("a/b", "lower case letters, digits, '-' and '.'"),
    ("ABC", "lower case letters, digits, '-' and '.'"),
    ("a" * 254, "it has 254 characters, at most 253 are allowed"),
])
def test_an_invalid_template_name_is_a_condition_an_event_and_not_ready(
    controller, api, template, why
):
    """The CRD takes any string; the API server would refuse the template with 422 on
    every retry. The controller says what is wrong instead, once."""
    api.create_cd("bad", template=template)

    def condition():
        conds = (api.cd("bad").get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Reconciled"), None)
    cond = wait_for(condition, what="condition")
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert why in cond["message"] and "recreate the ComputeDomain" in cond["message"]
    assert api.cd("bad")["status"]["status"] == names.STATUS_NOT_READY
    events = [e for e in api.core.list_namespaced_event("default").items
              if e.involved_object.name == "bad"]
    assert [(e.reason, e.type) for e in events] == [("InvalidSpec", "Warning")]


def test_a_spec_less_computedomain_is_an_event_not_a_crash(controller, api):
    """The CRD does not require `spec`: such a CD gets InvalidSpec, nothing else breaks."""
    api.custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, "default", names.PLURAL_COMPUTE_DOMAINS,
        {"apiVersion": names.API_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
         "metadata": {"name": "bare"}, "spec": None})

    def condition():
        conds = (api.cd("bare").get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Reconciled"), None)
    cond = wait_for(condition, what="condition")
    assert cond["status"] == "False" and cond["reason"] == "InvalidSpec"
    assert "spec.channel.resourceClaimTemplate.name is missing" in cond["message"]
    api.create_cd("cd2")
    wait_for(lambda: api.rct("cd2-rct", "default"), what="the next CD still reconciled")


def test_stale_objects_of_a_vanished_domain_are_cleaned_up(apiserver, api):
    ghost = "00000000-0000-4000-8000-000000000000"
    api.resource.create_namespaced_resource_claim_template("default", {
        "metadata": {"name": "ghost", "finalizers": [names.FINALIZER], "labels": {
            names.LABEL_COMPUTE_DOMAIN: ghost, names.LABEL_TARGET: names.TARGET_WORKLOAD}},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "channel", "exactly": {"deviceClassName": "x"}}]}}}})
    api.core.create_node({"metadata": {"name": "n9", "labels": {
        names.LABEL_COMPUTE_DOMAIN: ghost}}})
    thread = ControllerThread(apiserver, make_config())
    try:
        wait_for(lambda: api.rct("ghost", "default") is None, what="stale template gone")
        wait_for(lambda: names.LABEL_COMPUTE_DOMAIN not in (
            api.core.read_node("n9").metadata.labels or {}), what="stale label gone")
    finally:
        thread.close()


def test_controller_restart_mid_deletion_finishes_it(apiserver, api):
    first = ControllerThread(apiserver, make_config())
    cd = api.create_cd("cd1")
    name = names.daemon_object_name(cd["metadata"]["uid"])
    wait_for(lambda: api.ds(name), what="DaemonSet")
    first.close()
    # A user finalizer on the DS keeps the deletion half-done while no controller runs.
    api.delete_cd("cd1")
    second = ControllerThread(apiserver, make_config())
    try:
        wait_for(lambda: api.cd("cd1") is None, what="deletion finished by the new controller")
        assert api.ds(name) is None and api.rct("cd1-rct", "default") is None
    finally:
        second.close()


def test_watch_410_is_survived(apiserver, controller, api):
    api.create_cd("before")
    wait_for(lambda: api.rct("before-rct", "default"), what="first CD reconciled")
    apiserver.call(apiserver.server.store.close_watches)
    apiserver.call(apiserver.server.store.compact)
    api.create_cd("after")
    wait_for(lambda: api.rct("after-rct", "default"), what="CD after a 410 reconciled")


def test_many_domains_at_once(controller, api):
    count = 200
    for i in range(count):
        api.create_cd(f"cd{i:03d}")
    wait_for(lambda: sum(1 for item in api.custom.list_namespaced_custom_object(
        names.GROUP, names.VERSION, "default", names.PLURAL_COMPUTE_DOMAINS)["items"]
        if (item.get("status") or {}).get("status") == "Ready") == count, 120,
        what="all Ready")
    controller.idle()
    writes = controller.call(lambda: dict(controller.app.reconciler.writes))
    per_cd = sorted(writes.values())
    # finalizer, daemon template, DaemonSet, workload template, status: 5 writes each.
    assert per_cd[len(per_cd) // 2] == 5, per_cd
    assert max(per_cd) <= 8, per_cd


def test_unknown_template_objects_are_not_touched(controller, api):
    api.resource.create_namespaced_resource_claim_template("default", {
        "metadata": {"name": "mine"}, "spec": {"spec": {"devices": {"requests": [
            {"name": "x", "exactly": {"deviceClassName": "other"}}]}}}})
    api.create_cd("cd1")
    wait_for(lambda: api.rct("cd1-rct", "default"), what="objects")
    controller.idle()
    assert api.rct("mine", "default")["metadata"].get("finalizers") is None
    assert client.ResourceV1Api  # the client type is what the controller writes with


def test_leader_election_one_writer_and_fast_takeover(apiserver, api):
    election = ("--leader-election-enabled", "true", "--leader-election-lease-lock-namespace",
                DRIVER_NS, "--leader-election-lease-duration", "2s",
                "--leader-election-renew-deadline", "1.5s",
                "--leader-election-retry-period", "0.2s")
    first = ControllerThread(apiserver, make_config(*election), leader=True)
    second = ControllerThread(apiserver, make_config(*election), leader=True)
    try:
        wait_for(lambda: first.app.leading.is_set() or second.app.leading.is_set(), 10,
                 what="a leader")
        leader, standby = (first, second) if first.app.leading.is_set() else (second, first)
        assert not standby.app.leading.is_set()
        api.create_cd("cd1")
        wait_for(lambda: api.rct("cd1-rct", "default"), what="leader reconciles")
        assert standby.app.reconciler is None, "the standby never built a reconciler"
        leader.close()  # graceful stop releases the Lease
        wait_for(lambda: standby.app.leading.is_set(), 5, what="takeover")
        api.create_cd("cd2")
        wait_for(lambda: api.rct("cd2-rct", "default"), what="new leader reconciles")
    finally:
        first.close()
        second.close()


def test_metrics_and_health_endpoints(apiserver, api):
    import urllib.request

    thread = ControllerThread(apiserver, make_config("--http-endpoint", "127.0.0.1:0"),
                              leader=True)
    try:
        wait_for(lambda: thread.app.leading.is_set(), 10, what="running")
        api.create_cd("cd1")
        wait_for(lambda: (api.cd("cd1").get("status") or {}).get("status") == "Ready",
                 what="Ready")
        base = f"http://127.0.0.1:{thread.app.http_port}"
        assert urllib.request.urlopen(base + "/healthz", timeout=5).read() == b"ok"
        assert urllib.request.urlopen(base + "/readyz", timeout=5).read() == b"ok"
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        assert 'nvidia_dra_compute_domain_info{status="Ready"} 1.0' in text
        assert "compute_domain_reconciles_total" in text
        assert "compute_domain_workqueue_depth" in text
    finally:
        thread.close()


def test_status_writes_are_coalesced_while_daemons_join(apiserver, api):
    """Twelve daemons joining one by one change the status twelve times; with a 10 s write
    interval it is written at most once at once, then with everything at the interval's
    end (once more should the burst outlast an interval), not once per join."""
    thread = ControllerThread(apiserver, make_config("--status-write-interval", "10"))
    try:
        cd = api.create_cd("cd1", num_nodes=12)
        uid = cd["metadata"]["uid"]
        wait_for(lambda: (api.cd("cd1").get("status") or {}).get("status") == "NotReady",
                 what="the first status")
        thread.idle()
        first = thread.call(lambda: dict(thread.app.reconciler.writes))[uid]
        entries = []
        for i in range(12):
            api.daemon_pod(f"d{i}", uid, f"n{i}", clique_id="c1", ip=f"10.0.0.{i + 1}")
            entries.append({"nodeName": f"n{i}", "ipAddress": f"10.0.0.{i + 1}",
                            "cliqueID": "c1", "index": i, "status": "Ready"})
            if i == 0:
                api.clique(uid, "c1", list(entries))
            else:
                name = names.clique_object_name(uid, "c1")
                current = api.custom.get_namespaced_custom_object(
                    names.GROUP, names.VERSION, DRIVER_NS, names.PLURAL_CLIQUES, name)
                current["daemons"] = list(entries)
                api.custom.replace_namespaced_custom_object(
                    names.GROUP, names.VERSION, DRIVER_NS, names.PLURAL_CLIQUES, name, current)
        thread.idle()  # includes the reconcile queued for the end of the interval
        assert thread.call(lambda: dict(thread.app.reconciler.writes))[uid] <= first + 3
        got = api.cd("cd1")["status"]
        assert got["status"] == "Ready" and len(got["nodes"]) == 12
    finally:
        thread.close()


def test_status_is_written_with_everything_at_the_end_of_the_interval(apiserver, api):
    thread = ControllerThread(apiserver, make_config("--status-write-interval", "1"))
    try:
        cd = api.create_cd("cd1", num_nodes=3)
        uid = cd["metadata"]["uid"]
        entries = []
        for i in range(3):
            api.daemon_pod(f"d{i}", uid, f"n{i}", clique_id="c1", ip=f"10.0.0.{i + 1}")
            entries.append({"nodeName": f"n{i}", "ipAddress": f"10.0.0.{i + 1}",
                            "cliqueID": "c1", "index": i, "status": "Ready"})
        api.clique(uid, "c1", entries)
        got = wait_for(lambda: (api.cd("cd1").get("status") or {}).get("status") == "Ready"
                       and api.cd("cd1"), what="Ready with every node")
        assert [n["name"] for n in got["status"]["nodes"]] == ["n0", "n1", "n2"]
    finally:
        thread.close()
