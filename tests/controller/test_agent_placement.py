"""The controller in agent placement (`--imex-placement=agent`) against the API emulator:
the node agents run nvidia-imex, so there are no daemon objects, node labels say which
nodes take part, and the domain's cliques go with the domain."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from controller_env import DRIVER_NS, Api, ControllerThread, make_config, wait_for
from kubernetes import client

from api import names
from runtime.draclient import DraApi

AGENT = ("--imex-placement", "agent")


@pytest.fixture
def controller(apiserver, api) -> Iterator[ControllerThread]:
    thread = ControllerThread(apiserver, make_config(*AGENT))
    try:
        yield thread
    finally:
        thread.close()


def node(api: Api, name: str, uid: str | None) -> None:
    labels = {names.LABEL_COMPUTE_DOMAIN: uid} if uid else {}
    api.core.create_node({"metadata": {"name": name, "labels": labels}})


def unlabel(api: Api, name: str) -> None:
    """What an agent does once it has left the domain on its node."""
    api.core.patch_node(name, {"metadata": {"labels": {names.LABEL_COMPUTE_DOMAIN: None}}})


def entry(name: str, ip: str, index: int) -> dict[str, Any]:
    return {"nodeName": name, "ipAddress": ip, "cliqueID": "c1", "index": index,
            "status": "Ready"}


def clique_reader(api: Api, uid: str) -> Callable[[], dict[str, Any] | None]:
    return lambda: api.read_clique(uid, "c1")


def daemons(read: Callable[[], dict[str, Any] | None]) -> list[str]:
    clique = read()
    return [d["nodeName"] for d in (clique or {}).get("daemons") or []]


def status_of(api: Api, name: str = "cd1") -> dict[str, Any]:
    return (api.cd(name) or {}).get("status") or {}


def test_only_the_workload_template_is_created(controller, api):
    cd = api.create_cd("cd1", mode="All")
    uid = cd["metadata"]["uid"]
    wait_for(lambda: status_of(api).get("status") == "Ready", what="status Ready")
    controller.idle()  # every reconcile the CD's events caused has run
    assert api.cd("cd1")["metadata"]["finalizers"] == [names.FINALIZER]
    workload = api.rct("cd1-rct", "default")
    assert workload["metadata"]["labels"] == {names.LABEL_COMPUTE_DOMAIN: uid,
                                              names.LABEL_TARGET: names.TARGET_WORKLOAD}
    params = workload["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["domainID"] == uid and params["allocationMode"] == "All"
    templates = api.resource.list_resource_claim_template_for_all_namespaces().items
    assert [(t.metadata.namespace, t.metadata.name) for t in templates] == [
        ("default", "cd1-rct")]
    assert api.rct(names.daemon_object_name(uid), DRIVER_NS) is None
    assert api.apps.list_daemon_set_for_all_namespaces().items == []


def test_entries_of_nodes_without_the_domain_label_are_pruned(controller, api):
    cd = api.create_cd("cd1", num_nodes=2)
    uid = cd["metadata"]["uid"]
    node(api, "n1", uid)
    node(api, "n2", uid)
    node(api, "stranger", None)  # its agent wrote an entry, but it never joined (no label)
    read = clique_reader(api, uid)
    api.clique(uid, "c1", [entry("n1", "10.0.0.1", 0), entry("n2", "10.0.0.2", 1),
                           entry("stranger", "10.0.0.9", 2)])
    wait_for(lambda: daemons(read) == ["n1", "n2"], what="the unlabeled node's entry pruned")
    wait_for(lambda: [n["name"] for n in status_of(api).get("nodes") or []] == ["n1", "n2"]
             and status_of(api).get("status") == "Ready", what="status of the two nodes")


def test_the_entry_of_a_node_that_loses_the_label_is_pruned(controller, api):
    cd = api.create_cd("cd1", num_nodes=2)
    uid = cd["metadata"]["uid"]
    node(api, "n1", uid)
    node(api, "n2", uid)
    read = clique_reader(api, uid)
    api.clique(uid, "c1", [entry("n1", "10.0.0.1", 0), entry("n2", "10.0.0.2", 1)])
    wait_for(lambda: status_of(api).get("status") == "Ready", what="both nodes Ready")
    unlabel(api, "n2")  # n2's agent left the domain for good, without removing its entry
    wait_for(lambda: daemons(read) == ["n1"], 10, what="the entry of the node that left pruned")
    got = wait_for(lambda: status_of(api).get("status") == "NotReady" and status_of(api),
                   what="one node short of numNodes")
    assert [n["name"] for n in got["nodes"]] == ["n1"]


def test_a_lagging_node_cache_never_prunes_a_labeled_node(api):
    """The node cache can miss a label the server already has (a dropped watch, a
    re-list): entries go only for nodes the server itself lists without the label."""
    from controller.events import EventRecorder
    from controller.reconcile import Reconciler

    cd = api.create_cd("cd1")
    uid = cd["metadata"]["uid"]
    node(api, "n1", uid)
    read = clique_reader(api, uid)
    api.clique(uid, "c1", [entry("n1", "10.0.0.1", 0), entry("gone", "10.0.0.9", 1)])
    name = names.clique_object_name(uid, "c1")
    lagging = SimpleNamespace(nodes=SimpleNamespace(items={}),  # knows no labeled node
                              cliques=SimpleNamespace(items={f"{DRIVER_NS}/{name}": read()}))
    reconciler = Reconciler(api.api, DraApi(api.api), make_config(*AGENT), lagging,
                            EventRecorder(api.api, "test"))
    asyncio.run(reconciler._prune_cliques(uid))
    assert daemons(read) == ["n1"]


def test_deleting_the_domain_deletes_its_cliques_and_its_finalizer(apiserver, controller, api):
    cd = api.create_cd("cd1")
    uid = cd["metadata"]["uid"]
    node(api, "n1", uid)
    read = clique_reader(api, uid)
    api.clique(uid, "c1", [entry("n1", "10.0.0.1", 0)])
    wait_for(lambda: names.FINALIZER in (api.cd("cd1")["metadata"].get("finalizers") or [])
             and status_of(api).get("nodes"), what="the domain reconciled with its node")
    seen: list[str] = []

    def record(event):
        if event.type == "DELETED":
            seen.append(event.key[1])
    apiserver.call(lambda: apiserver.server.store.add_listener(record))

    api.delete_cd("cd1")
    wait_for(lambda: api.cd("cd1") is None, what="the ComputeDomain gone")
    assert read() is None
    assert names.LABEL_COMPUTE_DOMAIN not in (api.core.read_node("n1").metadata.labels or {})
    assert api.rct("cd1-rct", "default") is None
    # The clique and the template go before the domain itself.
    assert seen[-1] == "computedomains"
    assert {"computedomaincliques", "resourceclaimtemplates"} <= set(seen[:-1])


def test_cliques_of_another_domain_are_left_alone_on_deletion(controller, api):
    one = api.create_cd("cd1")["metadata"]["uid"]
    two = api.create_cd("cd2")["metadata"]["uid"]
    node(api, "n1", one)
    node(api, "n2", two)
    api.clique(one, "c1", [entry("n1", "10.0.0.1", 0)])
    api.clique(two, "c1", [entry("n2", "10.0.0.2", 0)])
    wait_for(lambda: status_of(api, "cd2").get("nodes"), what="cd2 reconciled")
    api.delete_cd("cd1")
    wait_for(lambda: api.cd("cd1") is None, what="cd1 gone")
    assert clique_reader(api, one)() is None
    assert daemons(clique_reader(api, two)) == ["n2"]
    assert api.core.read_node("n2").metadata.labels == {names.LABEL_COMPUTE_DOMAIN: two}


# --- ComputeDomainCliques=false: the agents write status.nodes themselves ------------------


def write_nodes(api: Api, nodes: list[dict[str, Any]], name: str = "cd1") -> None:
    """An agent's read-modify-write of status.nodes, retried on a conflict as it does."""
    def attempt() -> bool:
        current = api.cd(name)
        current["status"] = {**(current.get("status") or {}), "nodes": nodes}
        try:
            api.custom.replace_namespaced_custom_object_status(
                names.GROUP, names.VERSION, "default", names.PLURAL_COMPUTE_DOMAINS, name,
                current)
        except client.ApiException as err:
            if err.status == 409:
                return False
            raise
        return True
    wait_for(attempt, what="status.nodes written")


def legacy_node(name: str, ip: str, index: int) -> dict[str, Any]:
    return {"name": name, "ipAddress": ip, "cliqueID": "c1", "index": index, "status": "Ready"}


def test_legacy_status_keeps_the_entries_of_labeled_nodes_only(apiserver, api):
    thread = ControllerThread(apiserver, make_config(
        *AGENT, "--feature-gates", "ComputeDomainCliques=false"))
    try:
        cd = api.create_cd("cd1", num_nodes=1)
        uid = cd["metadata"]["uid"]
        wait_for(lambda: status_of(api).get("status") == "NotReady", what="the first status")
        node(api, "n1", uid)
        node(api, "n2", None)
        n1, n2 = legacy_node("n1", "10.0.0.1", 0), legacy_node("n2", "10.0.0.2", 1)
        write_nodes(api, [n1, n2])
        wait_for(lambda: status_of(api).get("nodes") == [n1], what="n2's entry dropped")
        assert status_of(api)["status"] == "Ready"
        thread.idle()
        # No daemon objects in this mode either.
        assert api.apps.list_daemon_set_for_all_namespaces().items == []
        assert api.rct(names.daemon_object_name(uid), DRIVER_NS) is None
    finally:
        thread.close()


def test_legacy_status_drops_the_entry_of_a_node_that_loses_the_label(apiserver, api):
    thread = ControllerThread(apiserver, make_config(
        *AGENT, "--feature-gates", "ComputeDomainCliques=false"))
    try:
        cd = api.create_cd("cd1", num_nodes=1)
        uid = cd["metadata"]["uid"]
        node(api, "n1", uid)
        n1 = legacy_node("n1", "10.0.0.1", 0)
        write_nodes(api, [n1])
        wait_for(lambda: status_of(api).get("status") == "Ready", what="Ready with n1")
        unlabel(api, "n1")
        wait_for(lambda: status_of(api).get("status") == "NotReady"
                 and not status_of(api).get("nodes"), 10, what="n1's entry dropped")
    finally:
        thread.close()
