"""`kubectl get`'s columns and cells from the emulator held to kube-apiserver's: the same
objects (tests/differential/printed_objects.py) on both servers, read as Tables (what
kubectl asks for) and through the pinned kubectl, default and `-o wide`.

Values that differ between any two servers are normalized: creation ages (the objects are
made a moment apart on each server), UIDs, times, resourceVersions. Column widths of
kubectl's text follow the widest cell, so runs of spaces are compared as one separator;
the cells themselves are compared exactly. Every other difference is fixed or listed in
`ACCEPTED` with its reason; a listed one that has gone fails too.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import printed_objects as objs
import pytest
from harness import Answer, Difference, Pair, Server, scrub_text

from api import names

Obj = dict[str, Any]
NS = "diff-print"
MERGE = "application/merge-patch+json"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
# The accept header kubectl get sends (k8s.io/kubectl/pkg/cmd/get/get.go).
KUBECTL_ACCEPT = f"{TABLE},application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
RESOURCE = "/apis/resource.k8s.io/v1"
PRINTING = {"labelSelector": "printing=yes"}

# case -> why the difference is acceptable.
ACCEPTED: dict[str, str] = {}

# Ages of objects made in this test (seconds to minutes): they differ by the moment
# between the two servers' writes. Older ages (`3d`, `20h`) are compared as they are.
_YOUNG_AGE = re.compile(r"^(\d+m)?\d+s$|^\d+m$")
_YOUNG_AGE_TEXT = re.compile(r"(?<![\w(])(\d+m)?\d+s(?!\w)|(?<![\w(])\d{1,2}m(?!\w)")


def _send(server: Server, method: str, path: str, body: Any = None, **kwargs: Any) -> Answer:
    answer = server.send(method, path, body, **kwargs)
    assert answer.code < 300, (server.name, method, path, answer.body)
    return answer


def _seed(server: Server, now: datetime) -> None:
    """Create every printed object on one server."""
    _send(server, "POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    for node, status in objs.nodes(now):
        _send(server, "POST", "/api/v1/nodes", node)
        if status is not None:
            _send(server, "PATCH", f"/api/v1/nodes/{node['metadata']['name']}/status",
                  {"status": status}, content_type=MERGE)
    pods = f"/api/v1/namespaces/{NS}/pods"
    uids = {}
    for name, spec, status in objs.pods(now):
        body = {"metadata": {"name": name, "labels": {"printing": "yes"}},
                "spec": {"nodeName": objs.NODE, **copy.deepcopy(spec)}}
        uids[name] = _send(server, "POST", pods, body).body["metadata"]["uid"]
        if status is not None:
            _send(server, "PATCH", f"{pods}/{name}/status", {"status": status},
                  content_type=MERGE)
    for name in objs.DELETED_PODS:
        _send(server, "DELETE", f"{pods}/{name}", {"gracePeriodSeconds": 3600})
    for event in objs.events(now, NS):
        namespace = event["metadata"].get("namespace", NS)
        _send(server, "POST", f"/api/v1/namespaces/{namespace}/events", event)
    _seed_dra(server, uids["running"])
    _seed_others(server)


def _claim(name: str) -> Obj:
    return {"metadata": {"name": name, "labels": {"printing": "yes"},
                         "finalizers": ["example.com/hold"]},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": "print-class"}}]}}}  # fmt: skip


def _seed_dra(server: Server, running_uid: str) -> None:
    _send(server, "POST", f"{RESOURCE}/deviceclasses",
          {"metadata": {"name": "print-class", "labels": {"printing": "yes"}}})
    for name, node in (("print-slice-a", {"nodeName": objs.NODE}),
                       ("print-slice-all", {"allNodes": True})):
        _send(server, "POST", f"{RESOURCE}/resourceslices", {
            "metadata": {"name": name, "labels": {"printing": "yes"}},
            "spec": {"driver": "compute-domain.nvidia.com", **node,
                     "pool": {"name": f"pool-{name}", "generation": 1,
                              "resourceSliceCount": 1},
                     "devices": [{"name": "channel-0"}]}})  # fmt: skip
    claims = f"{RESOURCE}/namespaces/{NS}/resourceclaims"
    allocation = {"devices": {"results": [{"request": "r", "driver": "compute-domain.nvidia.com",
                                           "pool": "pool-print-slice-a", "device": "channel-0"}]}}
    reserved = [{"resource": "pods", "name": "running", "uid": running_uid}]
    for name, status in (("pending", None), ("allocated", {"allocation": allocation}),
                         ("reserved", {"allocation": allocation, "reservedFor": reserved}),
                         ("deleted", {"allocation": allocation, "reservedFor": reserved}),
                         ("deleted-pending", None)):  # fmt: skip
        _send(server, "POST", claims, _claim(name))
        if status is not None:
            _send(server, "PATCH", f"{claims}/{name}/status", {"status": status},
                  content_type=MERGE)
    for name in ("deleted", "deleted-pending"):
        _send(server, "DELETE", f"{claims}/{name}")


def _seed_others(server: Server) -> None:
    labels = {"printing": "yes"}
    core = f"/api/v1/namespaces/{NS}"
    _send(server, "POST", f"{core}/configmaps", {
        "metadata": {"name": "cm", "labels": labels}, "data": {"a": "1", "b": "2"},
        "binaryData": {"c": "AA=="}})  # fmt: skip
    _send(server, "POST", f"{core}/secrets", {
        "metadata": {"name": "opaque", "labels": labels}, "data": {"k": "dg=="}})
    _send(server, "POST", f"{core}/secrets", {
        "metadata": {"name": "tls", "labels": labels}, "type": "kubernetes.io/tls",
        "data": {"tls.crt": "", "tls.key": ""}})  # fmt: skip
    _send(server, "POST", f"{core}/serviceaccounts",
          {"metadata": {"name": "sa", "labels": labels}})
    _send(server, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
          {"metadata": {"name": "held", "labels": labels},
           "spec": {"holderIdentity": "controller-0", "leaseDurationSeconds": 15}})
    _send(server, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
          {"metadata": {"name": "free", "labels": labels}, "spec": {}})
    template = {"metadata": {"labels": {"app": "imex"}}, "spec": {
        "nodeSelector": {"printing": "none", "gpu": "yes"},
        "containers": [{"name": "imex", "image": "example.com/imex:1"},
                       {"name": "sidecar", "image": "busybox:1.36"}]}}  # fmt: skip
    _send(server, "POST", f"/apis/apps/v1/namespaces/{NS}/daemonsets", {
        "metadata": {"name": "imex", "labels": labels},
        "spec": {"selector": {"matchLabels": {"app": "imex"}, "matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["b", "a"]}]},
            "template": template | {"metadata": {"labels": {"app": "imex", "tier": "c"}}}}})
    _send(server, "POST", f"/apis/apps/v1/namespaces/{NS}/deployments", {
        "metadata": {"name": "controller", "labels": labels},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "imex"}},
                 "template": template}})  # fmt: skip
    _send(server, "POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
          {"metadata": {"name": "print-high", "labels": labels}, "value": 1000000,
           "description": "for the IMEX daemons"})  # fmt: skip
    _seed_admission(server)
    _send(server, "POST", f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{NS}/"
          f"{names.PLURAL_COMPUTE_DOMAINS}", {
              "apiVersion": f"{names.GROUP}/{names.VERSION}", "kind": names.KIND_COMPUTE_DOMAIN,
              "metadata": {"name": "cd"}, "spec": {"numNodes": 2, "channel": {
                  "resourceClaimTemplate": {"name": "cd-channel"}}}})  # fmt: skip
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}"
    _send(server, "POST", f"{rbac}/roles", {"metadata": {"name": "viewer", "labels": labels},
                                            "rules": []})
    _send(server, "POST", f"{rbac}/rolebindings", {
        "metadata": {"name": "readers", "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "viewer"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
                     {"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"},
                     {"kind": "Group", "name": "ops", "apiGroup": "rbac.authorization.k8s.io"},
                     {"kind": "ServiceAccount", "name": "sa", "namespace": NS}]})  # fmt: skip


def _seed_admission(server: Server) -> None:
    """A policy that matches nothing (its rule names a resource no one has) and two
    bindings: one to a named param, one selecting params by labels."""
    admission = "/apis/admissionregistration.k8s.io/v1"
    _send(server, "POST", f"{admission}/validatingadmissionpolicies", {
        "metadata": {"name": "print-policy", "labels": {"printing": "yes"}},
        "spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": ["example.com"], "apiVersions": ["v1"],
                     "operations": ["CREATE"], "resources": ["nothings"]}]},
                 "validations": [{"expression": "true"}, {"expression": "1 == 1"}]}})
    for name, ref in (
        ("print-named", {"name": "limits", "namespace": NS,
                         "parameterNotFoundAction": "Allow"}),
        ("print-any-ns", {"name": "limits", "parameterNotFoundAction": "Allow"}),
        ("print-selected", {"selector": {"matchLabels": {"b": "2", "a": "1"},
                                         "matchExpressions": [{"key": "tier", "operator": "In",
                                                               "values": ["x", "y"]}]},
                            "parameterNotFoundAction": "Allow"}),
    ):
        _send(server, "POST", f"{admission}/validatingadmissionpolicybindings", {
            "metadata": {"name": name, "labels": {"printing": "yes"}},
            "spec": {"policyName": "print-policy", "paramRef": ref,
                     "validationActions": ["Audit"]}})  # fmt: skip


@pytest.fixture(scope="module")
def printed(pair: Pair) -> Iterator[Pair]:
    now = datetime.now(UTC).replace(microsecond=0)
    for server in pair.servers():
        _seed(server, now)
    yield pair


def _cells(columns: list[Obj], cells: list[Any]) -> list[Any]:
    out = []
    for column, cell in zip(columns, cells, strict=False):
        young = isinstance(cell, str) and _YOUNG_AGE.match(cell)
        out.append("<age>" if column["name"] in ("Age", "Created At") and young else cell)
    return out


def _row_object(obj: Any) -> Any:
    """Which object a row carries, and in what form: how each server stores objects (the
    metadata the row's object holds) is what tests/differential/test_differential.py holds
    to kube-apiserver, not what this test is about."""
    if not isinstance(obj, dict):
        return obj
    md = obj.get("metadata") or {}
    return {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion"),
            "name": md.get("name"), "namespace": md.get("namespace"),
            "fields": sorted(k for k in obj if k != "metadata")}  # fmt: skip


def _table(v: Any) -> Any:
    """A Table's columns and rows, creation ages normalized."""
    if v["code"] >= 300 or not isinstance(v["body"], dict):
        return v
    body = v["body"]
    columns = body.get("columnDefinitions") or []
    rows = [{"cells": _cells(columns, r["cells"]), "conditions": r.get("conditions"),
             "object": _row_object(r.get("object"))} for r in body.get("rows") or ()]  # fmt: skip
    return {"code": v["code"], "kind": body.get("kind"),
            "columns": [_column(c) for c in columns], "rows": rows}  # fmt: skip


def _column(definition: Obj) -> str:
    """A column definition in one line; the (long) description by its digest."""
    digest = hashlib.sha256(str(definition.get("description")).encode()).hexdigest()[:10]
    return "|".join(str(definition.get(k)) for k in ("name", "type", "format", "priority")) + (
        f"|{digest}")


TABLES = [
    ("pods", f"/api/v1/namespaces/{NS}/pods", {}),
    ("one pod", f"/api/v1/namespaces/{NS}/pods/crashloop", {}),
    ("nodes", "/api/v1/nodes", PRINTING),
    ("events", f"/api/v1/namespaces/{NS}/events", {}),
    ("claims", f"{RESOURCE}/namespaces/{NS}/resourceclaims", {}),
    ("slices", f"{RESOURCE}/resourceslices", PRINTING),
    ("device classes", f"{RESOURCE}/deviceclasses", PRINTING),
    ("daemonsets", f"/apis/apps/v1/namespaces/{NS}/daemonsets", {}),
    ("deployments", f"/apis/apps/v1/namespaces/{NS}/deployments", {}),
    ("leases", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases", {}),
    ("configmaps", f"/api/v1/namespaces/{NS}/configmaps", PRINTING),
    ("secrets", f"/api/v1/namespaces/{NS}/secrets", PRINTING),
    ("serviceaccounts", f"/api/v1/namespaces/{NS}/serviceaccounts", PRINTING),
    ("namespaces", f"/api/v1/namespaces/{NS}", {}),
    ("rolebindings", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings", {}),
    ("roles", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles", {}),
    ("priority classes", "/apis/scheduling.k8s.io/v1/priorityclasses", PRINTING),
    ("admission policies", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
     PRINTING),
    ("admission bindings",
     "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", PRINTING),
    ("crds", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {}),
    ("custom resources", f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{NS}/"
     f"{names.PLURAL_COMPUTE_DOMAINS}", {}),
    ("no object", f"/api/v1/namespaces/{NS}/configmaps", PRINTING | {"includeObject": "None"}),
    ("whole object", f"/api/v1/namespaces/{NS}/leases/held", {"includeObject": "Object"}),
    ("bad includeObject", f"/api/v1/namespaces/{NS}/leases", {"includeObject": "All"}),
]


@pytest.mark.parametrize(("case", "path", "query"), TABLES, ids=[c for c, _, _ in TABLES])
def test_tables(printed: Pair, case: str, path: str, query: dict[str, str]) -> None:
    answers = tuple(_table_answer(s, path, query) for s in printed.servers())
    printed.compare(f"table: {case}", answers, pick=_table)  # type: ignore[arg-type]
    _check(printed, f"table: {case}")


def _table_answer(server: Server, path: str, query: dict[str, str]) -> Answer:
    """A GET with kubectl's Accept header (the harness sends plain JSON)."""
    pool, headers = server._pool("admin")
    url = server.admin.server + path
    response = pool.request("GET", url, fields=query or None,
                            headers=headers | {"Accept": KUBECTL_ACCEPT})  # fmt: skip
    return Answer(response.status, json.loads(response.data))


def _text(text: str) -> str:
    """kubectl's text less what differs between two servers (see the module docstring)."""
    text = scrub_text(text)
    text = _YOUNG_AGE_TEXT.sub("<age>", text)
    return re.sub(r"(?m) {2,}", "   ", re.sub(r"(?m) +$", "", text))


KUBECTL = [
    ("pods", ("get", "pods", "-n", NS)),
    ("pods wide", ("get", "pods", "-n", NS, "-o", "wide")),
    ("pods -A", ("get", "pods", "-A", "-l", "printing=yes")),
    ("pod by name", ("get", "pod", "crashloop", "sidecar", "-n", NS)),
    ("nodes", ("get", "nodes", "-l", "printing=yes")),
    ("nodes wide", ("get", "nodes", "-l", "printing=yes", "-o", "wide")),
    ("events", ("get", "events", "-n", NS)),
    ("events -A", ("get", "events", "-A", "--field-selector", f"metadata.namespace={NS}")),
    # kube-controller-manager's node controller adds a RegisteredNode event of its own.
    ("node events", ("get", "events", "-A", "--field-selector",
                     f"involvedObject.name={objs.NODE},reason=NodeReady", "-o", "wide")),
    ("events wide", ("get", "events", "-n", NS, "-o", "wide")),
    ("events sorted", ("get", "events", "-n", NS, "--sort-by=.metadata.name")),
    ("claims", ("get", "resourceclaims", "-n", NS)),
    ("slices", ("get", "resourceslices", "-l", "printing=yes")),
    ("device classes", ("get", "deviceclasses", "-l", "printing=yes")),
    ("daemonsets wide", ("get", "daemonsets", "-n", NS, "-o", "wide")),
    ("deployments wide", ("get", "deployments", "-n", NS, "-o", "wide")),
    ("leases", ("get", "leases", "-n", NS)),
    ("configmaps", ("get", "configmaps", "-n", NS, "-l", "printing=yes")),
    ("secrets", ("get", "secrets", "-n", NS)),
    ("serviceaccounts", ("get", "serviceaccounts", "-n", NS, "-l", "printing=yes")),
    ("namespaces", ("get", "namespace", NS)),
    ("rolebindings wide", ("get", "rolebindings", "-n", NS, "-o", "wide")),
    ("roles", ("get", "roles", "-n", NS)),
    ("crds wide", ("get", "crds", "-o", "wide")),
    ("computedomains wide", ("get", "computedomains", "-n", NS, "-o", "wide")),
    ("show labels", ("get", "pods", "pending", "-n", NS, "--show-labels")),
]


@pytest.mark.parametrize(("case", "args"), KUBECTL, ids=[c for c, _ in KUBECTL])
def test_kubectl_get(printed: Pair, kubectl_bin: Path, tmp_path: Path, case: str,
                     args: tuple[str, ...]) -> None:  # fmt: skip
    outputs = []
    for server in printed.servers():
        config = server.admin.write_kubeconfig(tmp_path / f"{server.name}.kubeconfig")
        done = subprocess.run(
            [str(kubectl_bin), "--kubeconfig", str(config), *args], capture_output=True,
            text=True, timeout=60, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        outputs.append({"code": done.returncode, "stdout": _text(done.stdout),
                        "stderr": _text(done.stderr)})  # fmt: skip
    if outputs[0] != outputs[1]:
        printed.differences.append(Difference(f"kubectl get: {case}", *outputs))
    _check(printed, f"kubectl get: {case}")


def _check(pair: Pair, case: str) -> None:
    found = [d for d in pair.differences if d.case == case]
    unexplained = [d for d in found if d.case not in ACCEPTED]
    assert not unexplained, "\n".join(map(str, unexplained))
    if case in ACCEPTED:
        assert found, f"accepted difference no longer differs: {case}"



def _table_watch(server: Server, path: str, query: dict[str, str]) -> list[Any]:
    """A watch's events as Tables, read until the server ends it."""
    pool, headers = server._pool("admin")
    response = pool.request("GET", server.admin.server + path, fields=query,
                            headers=headers | {"Accept": TABLE}, preload_content=False)  # fmt: skip
    events = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    response.release_conn()
    return [{"type": e["type"], "object": _table({"code": 200, "body": e["object"]})
             if e["type"] != "BOOKMARK" else "<bookmark>"} for e in events]  # fmt: skip


def test_watch_tables(printed: Pair) -> None:
    """`kubectl get -w`: each event a one-row Table, the column definitions in the first."""
    path = f"/api/v1/namespaces/{NS}/pods"
    query = {"watch": "1", "labelSelector": "printing=yes", "timeoutSeconds": "1"}
    seen = [_table_watch(server, path, query) for server in printed.servers()]
    if seen[0] != seen[1]:
        printed.differences.append(Difference("watch: tables", *seen))
    _check(printed, "watch: tables")
