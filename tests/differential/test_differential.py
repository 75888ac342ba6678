"""The emulator held to kube-apiserver: the requests the driver and kubectl make, sent to
both, with the same status codes, reasons, messages and returned objects.

Every difference found is either fixed in the emulator or listed in `ACCEPTED` with the
reason it does not matter to the driver or to an admin; a listed difference that has gone
fails too, so the list stays true.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harness import Pair

from api import names

Obj = dict[str, Any]
CDS = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{{ns}}/{names.PLURAL_COMPUTE_DOMAINS}"
CLIQUES = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{{ns}}/computedomaincliques"
CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"
PODS = "/api/v1/namespaces/{ns}/pods"

# case -> why the difference is acceptable.
ACCEPTED: dict[str, str] = {}


def cd(name: str, **spec: Any) -> Obj:
    body: Obj = {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }
    body["spec"].update(spec)
    return body


def namespace(pair: Pair, name: str) -> str:
    pair.same(f"namespace {name}", "POST", "/api/v1/namespaces",
              {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
              pick=lambda v: v["code"])
    return name


def check(pair: Pair, prefix: str) -> None:
    """Every difference of the cases under `prefix` is accepted, every accepted one seen."""
    found = [d for d in pair.differences if d.case.startswith(prefix)]
    unexplained = [d for d in found if d.case not in ACCEPTED]
    assert not unexplained, "\n".join(map(str, unexplained))
    seen = {d.case for d in found}
    stale = [c for c in ACCEPTED if c.startswith(prefix) and c not in seen]
    assert not stale, f"accepted differences no longer differ: {stale}"


def test_custom_resource_crud(pair: Pair) -> None:
    ns = namespace(pair, "diff-crud")
    path = CDS.format(ns=ns)
    pair.same("crud: create", "POST", path, cd("a"))
    pair.same("crud: create again", "POST", path, cd("a"))
    pair.same("crud: get", "GET", f"{path}/a")
    pair.same("crud: get missing", "GET", f"{path}/missing")
    pair.same("crud: list", "GET", path)
    # An update from a stale read: 409 with the real message.
    stale = [s.send("GET", f"{path}/a").body for s in pair.servers()]
    for server, obj in zip(pair.servers(), stale, strict=True):
        obj["metadata"].setdefault("labels", {})["x"] = "1"
        server.send("PUT", f"{path}/a", obj)
    answers = tuple(
        server.send("PUT", f"{path}/a", obj | {"metadata": {**obj["metadata"], "labels": {"x": "2"}}})
        for server, obj in zip(pair.servers(), stale, strict=True)
    )
    pair.compare("crud: update with a stale resourceVersion", answers)  # type: ignore[arg-type]
    # The spec is immutable (the CRD's CEL rule).
    fresh = [s.send("GET", f"{path}/a").body for s in pair.servers()]
    answers = tuple(
        server.send("PUT", f"{path}/a", obj | {"spec": {**obj["spec"], "numNodes": 3}})
        for server, obj in zip(pair.servers(), fresh, strict=True)
    )
    pair.compare("crud: spec change refused", answers)  # type: ignore[arg-type]
    pair.same("crud: merge patch of a label", "PATCH", f"{path}/a",
              {"metadata": {"labels": {"team": "ml"}}},
              content_type="application/merge-patch+json")
    pair.same("crud: JSON patch", "PATCH", f"{path}/a",
              [{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}],
              content_type="application/json-patch+json")
    pair.same("crud: strategic merge patch of a custom resource", "PATCH", f"{path}/a",
              {"metadata": {"labels": {"team": "x"}}},
              content_type="application/strategic-merge-patch+json")
    pair.same("crud: delete", "DELETE", f"{path}/a")
    pair.same("crud: delete missing", "DELETE", f"{path}/a")
    check(pair, "crud:")


def test_status_subresource(pair: Pair) -> None:
    ns = namespace(pair, "diff-status")
    path = CDS.format(ns=ns)
    pair.same("status: create", "POST", path, cd("s"))
    current = [s.send("GET", f"{path}/s").body for s in pair.servers()]
    answers = tuple(
        server.send("PUT", f"{path}/s/status",
                    obj | {"status": {"status": "Ready", "nodes": []},
                           "spec": {**obj["spec"], "numNodes": 7}})
        for server, obj in zip(pair.servers(), current, strict=True)
    )
    pair.compare("status: PUT status ignores the spec", answers)  # type: ignore[arg-type]
    pair.same("status: merge patch", "PATCH", f"{path}/s/status",
              {"status": {"status": "NotReady"}}, content_type="application/merge-patch+json")
    current = [s.send("GET", f"{path}/s").body for s in pair.servers()]
    answers = tuple(
        server.send("PUT", f"{path}/s", obj | {"status": {"status": "Ready"}})
        for server, obj in zip(pair.servers(), current, strict=True)
    )
    pair.compare("status: PUT of the object ignores the status", answers)  # type: ignore[arg-type]
    pair.same("status: get", "GET", f"{path}/s")
    check(pair, "status:")


@pytest.mark.parametrize(
    ("case", "mutate"),
    [
        ("enum", lambda b: b["spec"]["channel"].update(allocationMode="Some")),
        ("type", lambda b: b["spec"].update(numNodes="three")),
        ("minimum", lambda b: b["spec"].update(numNodes=-1)),
        ("required", lambda b: b["spec"].pop("channel")),
        ("required nested", lambda b: b["spec"]["channel"].pop("resourceClaimTemplate")),
        ("two errors", lambda b: (b["spec"].update(numNodes=-1),
                                  b["spec"]["channel"].update(allocationMode="Some"))),
        ("bad name", lambda b: b["metadata"].update(name="Not_A_Name")),
    ],
)
def test_crd_validation_errors(pair: Pair, case: str, mutate: Any) -> None:
    ns = namespace(pair, "diff-valid")
    body = cd("v")
    mutate(body)
    # kube-openapi visits an object's properties in Go map order (random): errors of
    # sibling properties come in any order, in the causes and in the message.
    unordered = lambda v: v if v["code"] < 300 or len(v["details"]["causes"]) < 3 else {  # noqa: E731
        "code": v["code"], "reason": v["reason"],
        "causes": sorted(map(str, v["details"]["causes"]))}
    pair.same(f"validation: {case}", "POST", CDS.format(ns=ns), body, pick=unordered)
    check(pair, f"validation: {case}")


def test_field_validation_of_unknown_fields(pair: Pair) -> None:
    ns = namespace(pair, "diff-fields")
    path = CDS.format(ns=ns)
    extra = cd("u")
    extra["spec"]["colour"] = "blue"
    pair.same("fields: Strict", "POST", path, extra, query={"fieldValidation": "Strict"})
    answers = pair.same("fields: Warn", "POST", path, extra, query={"fieldValidation": "Warn"})
    pair.compare("fields: Warn warnings", answers, pick=lambda v: v["code"])
    ours, theirs = (a.warnings for a in answers)
    if ours != theirs:
        from harness import Difference

        pair.differences.append(Difference("fields: Warn warnings", ours, theirs))
    pair.same("fields: Ignore", "POST", path, cd("i") | {"spec": extra["spec"]},
              query={"fieldValidation": "Ignore"})
    check(pair, "fields:")


def test_generate_name_and_finalizers(pair: Pair) -> None:
    ns = namespace(pair, "diff-final")
    pair.same("finalizers: generateName", "POST", CONFIGMAPS.format(ns=ns),
              {"metadata": {"generateName": "cfg-"}, "data": {"a": "1"}})
    path = CDS.format(ns=ns)
    held = cd("held")
    held["metadata"]["finalizers"] = [names.FINALIZER]
    pair.same("finalizers: create", "POST", path, held)
    pair.same("finalizers: delete marks it", "DELETE", f"{path}/held")
    pair.same("finalizers: still there", "GET", f"{path}/held")
    pair.same("finalizers: delete again", "DELETE", f"{path}/held")
    pair.same("finalizers: a new finalizer is refused while deleting", "PATCH", f"{path}/held",
              {"metadata": {"finalizers": [names.FINALIZER, "example.com/other"]}},
              content_type="application/merge-patch+json")
    pair.same("finalizers: removing the last one deletes", "PATCH", f"{path}/held",
              {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json",
              pick=lambda v: v["code"])
    pair.same("finalizers: gone", "GET", f"{path}/held")
    check(pair, "finalizers:")


def _pod_spec_and_status(v: Any) -> Any:
    """A pod as stored, less the ServiceAccount admission's token volume (its name is random
    and the emulator does not add it: sim/apiserver/defaults.py)."""
    if v["code"] >= 300:
        return v
    spec = copy.deepcopy(v["body"]["spec"])
    token = [vol["name"] for vol in spec.get("volumes") or ()
             if vol["name"].startswith("kube-api-access-")]
    spec["volumes"] = [vol for vol in spec.get("volumes") or () if vol["name"] not in token]
    for container in spec["containers"]:
        container["volumeMounts"] = [m for m in container.get("volumeMounts") or ()
                                     if m["name"] not in token]
    return {"code": v["code"], "spec": spec, "status": v["body"].get("status")}


def test_graceful_pod_deletion(pair: Pair) -> None:
    ns = namespace(pair, "diff-pods")
    pair.same("pods: node", "POST", "/api/v1/nodes",
              {"metadata": {"name": "diff-node"}}, pick=lambda v: v["code"])
    pod = {
        "metadata": {"name": "p"},
        "spec": {"nodeName": "diff-node", "terminationGracePeriodSeconds": 45,
                 "containers": [{"name": "c", "image": "busybox"}]},
    }
    pair.same("pods: create", "POST", PODS.format(ns=ns), pod, pick=_pod_spec_and_status)
    meta = lambda v: v if v["code"] >= 300 else {"code": v["code"], "metadata": v["body"]["metadata"]}  # noqa: E731
    pair.same("pods: graceful delete", "DELETE", f"{PODS.format(ns=ns)}/p", pick=meta)
    pair.same("pods: grace 0 removes it", "DELETE", f"{PODS.format(ns=ns)}/p",
              {"gracePeriodSeconds": 0}, pick=lambda v: v["code"])
    pair.same("pods: gone", "GET", f"{PODS.format(ns=ns)}/p")
    unbound = copy.deepcopy(pod)
    unbound["metadata"]["name"] = "q"
    del unbound["spec"]["nodeName"]
    pair.same("pods: create unbound", "POST", PODS.format(ns=ns), unbound, pick=lambda v: v["code"])
    pair.same("pods: an unbound pod goes at once", "DELETE", f"{PODS.format(ns=ns)}/q", pick=meta)
    pair.same("pods: unbound gone", "GET", f"{PODS.format(ns=ns)}/q")
    check(pair, "pods:")


def test_list_selectors(pair: Pair) -> None:
    ns = namespace(pair, "diff-list")
    path = CDS.format(ns=ns)
    for name, labels in (("l1", {"app": "a", "tier": "1"}), ("l2", {"app": "b"}), ("l3", {})):
        body = cd(name)
        body["metadata"]["labels"] = labels
        pair.same(f"list: create {name}", "POST", path, body, pick=lambda v: v["code"])
    names_of = lambda v: v if v["code"] >= 300 else {  # noqa: E731
        "code": v["code"], "kind": v["body"]["kind"],
        "names": sorted(i["metadata"]["name"] for i in v["body"]["items"])}
    for selector in ("app=a", "app!=a", "app in (a,b)", "!app", "tier", "app=a,tier=1"):
        pair.same(f"list: labelSelector {selector}", "GET", path,
                  query={"labelSelector": selector}, pick=names_of)
    pair.same("list: fieldSelector metadata.name", "GET", path,
              query={"fieldSelector": "metadata.name=l2"}, pick=names_of)
    pair.same("list: fieldSelector metadata.namespace", "GET",
              f"/apis/{names.GROUP}/{names.VERSION}/{names.PLURAL_COMPUTE_DOMAINS}",
              query={"fieldSelector": f"metadata.namespace={ns}"}, pick=names_of)
    pair.same("list: bad label selector", "GET", path, query={"labelSelector": "app=="})
    pair.same("list: unsupported field selector", "GET", path,
              query={"fieldSelector": "spec.numNodes=0"})
    pair.same("list: pods by spec.nodeName", "GET", "/api/v1/pods",
              query={"fieldSelector": "spec.nodeName=nowhere"}, pick=names_of)
    pair.same("list: limit", "GET", path, query={"limit": "2"},
              pick=lambda v: {"n": len(v["body"]["items"])})
    check(pair, "list:")


def test_rbac_denials(pair: Pair) -> None:
    ns = namespace(pair, "diff-rbac")
    role = {
        "metadata": {"name": "cd-reader", "namespace": ns},
        "rules": [{"apiGroups": [names.GROUP], "resources": [names.PLURAL_COMPUTE_DOMAINS],
                   "verbs": ["get", "list"]}],
    }
    pair.same("rbac: role", "POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
              role, pick=lambda v: v["code"])
    binding = {
        "metadata": {"name": "alice", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cd-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }
    pair.same("rbac: binding", "POST",
              f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", binding,
              pick=lambda v: v["code"])
    path = CDS.format(ns=ns)
    pair.same("rbac: admin creates", "POST", path, cd("r"), pick=lambda v: v["code"])
    pair.same("rbac: allowed get", "GET", f"{path}/r", user="alice", pick=lambda v: v["code"])
    pair.same("rbac: denied create", "POST", path, cd("r2"), user="alice")
    pair.same("rbac: denied delete", "DELETE", f"{path}/r", user="alice")
    pair.same("rbac: denied in another namespace", "GET", CDS.format(ns="default"), user="alice")
    pair.same("rbac: denied at cluster scope", "GET",
              f"/apis/{names.GROUP}/{names.VERSION}/{names.PLURAL_COMPUTE_DOMAINS}", user="alice")
    pair.same("rbac: denied status update", "PATCH", f"{path}/r/status", {"status": {}},
              user="alice", content_type="application/merge-patch+json")
    pair.same("rbac: denied core resource", "GET", "/api/v1/nodes", user="alice")
    check(pair, "rbac:")


def test_watch_with_selectors(pair: Pair) -> None:
    ns = namespace(pair, "diff-watch")
    path = CDS.format(ns=ns)
    events: dict[str, list[tuple[str, str]]] = {}
    import threading

    def collect(server: Any, key: str) -> None:
        seen = []
        for event in server.watch(path, query={"labelSelector": "w=yes", "timeoutSeconds": "4"}):
            if event["type"] != "BOOKMARK":
                seen.append((event["type"], event["object"]["metadata"]["name"]))
        events[key] = seen

    threads = [threading.Thread(target=collect, args=(s, s.name)) for s in pair.servers()]
    for t in threads:
        t.start()
    import time

    time.sleep(1.0)  # both watches are open (they run for 4 s)
    for name, labels in (("w1", {"w": "yes"}), ("w2", {"w": "no"})):
        body = cd(name)
        body["metadata"]["labels"] = labels
        pair.same(f"watch: create {name}", "POST", path, body, pick=lambda v: v["code"])
    pair.same("watch: relabel", "PATCH", f"{path}/w2", {"metadata": {"labels": {"w": "yes"}}},
              content_type="application/merge-patch+json", pick=lambda v: v["code"])
    pair.same("watch: delete", "DELETE", f"{path}/w1", pick=lambda v: v["code"])
    for t in threads:
        t.join(20)
    if events["emulator"] != events["kubernetes"]:
        from harness import Difference

        pair.differences.append(
            Difference("watch: events", events["emulator"], events["kubernetes"]))
    # A watch from a resourceVersion long compacted away: an ERROR event with 410. (The
    # emulator keeps the last 10,000 events, kube-apiserver's watch cache a window of its
    # own: compact the emulator's history first, so that version 1 is gone from both.)
    pair.emulator.send("POST", "/_sim/compact")
    gone = {}
    for server in pair.servers():
        first = next(server.watch(path, query={"resourceVersion": "1", "timeoutSeconds": "2"}),
                     None)
        gone[server.name] = first and {"type": first["type"],
                                       "code": first["object"].get("code"),
                                       "reason": first["object"].get("reason")}
    if gone["emulator"] != gone["kubernetes"]:
        from harness import Difference

        pair.differences.append(Difference("watch: too old", gone["emulator"], gone["kubernetes"]))
    check(pair, "watch:")


def test_list_map_and_nested_errors(pair: Pair) -> None:
    """The clique's `daemons` list-map (keyed by nodeName): a duplicate key, an item of the
    wrong type, a missing required field; values printed as the server prints them."""
    ns = namespace(pair, "diff-cliques")
    path = CLIQUES.format(ns=ns)
    entry = {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0}

    def clique(name: str, daemons: list[Any]) -> Obj:
        return {"apiVersion": f"{names.GROUP}/{names.VERSION}", "kind": "ComputeDomainClique",
                "metadata": {"name": name}, "daemons": daemons}

    pair.same("cliques: create", "POST", path, clique("ok", [entry]))
    pair.same("cliques: duplicate key", "POST", path, clique("dup", [entry, dict(entry)]))
    pair.same("cliques: item not an object", "POST", path, clique("str", ["n1"]))
    pair.same("cliques: missing key", "POST", path,
              clique("nokey", [{k: v for k, v in entry.items() if k != "nodeName"}]))
    pair.same("cliques: bad status enum", "POST", path,
              clique("enum", [entry | {"status": "Maybe"}]))
    pair.same("cliques: daemons not a list", "POST", path, clique("obj", {"n1": entry}))  # type: ignore[arg-type]
    pair.same("cliques: null daemons", "POST", path, clique("null", None))  # type: ignore[arg-type]
    check(pair, "cliques:")
