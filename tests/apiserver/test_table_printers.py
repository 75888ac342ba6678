"""The table printers' corners the differential test (tests/differential/test_printers.py)
cannot reach on kube-apiserver with its controllers running: ages at each boundary of
HumanDuration, scheduling gates, Jobs, and the watch-list options `kubectl wait` sends.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sim.apiserver import errors, list_options, pod_printer, printers, table
from sim.apiserver.resources import BUILTIN_RESOURCES, ResourceInfo
from sim.apiserver.runner import ServerThread

Obj = dict[str, Any]


def _info(group: str, kind: str) -> ResourceInfo:
    return next(i for i in BUILTIN_RESOURCES if (i.group, i.kind) == (group, kind))


def _cells(group: str, kind: str, obj: Obj) -> dict[str, Any]:
    out = table.table(_info(group, kind), [obj], {})
    names = [c["name"] for c in out["columnDefinitions"]]
    return dict(zip(names, out["rows"][0]["cells"], strict=True))


# k8s.io/apimachinery/pkg/util/duration/duration_test.go's cases.
@pytest.mark.parametrize(("seconds", "text"), [
    (1, "1s"), (70, "70s"), (190, "3m10s"), (70 * 60, "70m"), (47 * 3600, "47h"),
    (49 * 3600, "2d1h"), ((8 * 24 + 2) * 3600, "8d"), (367 * 24 * 3600, "367d"),
    ((365 * 2 * 24 + 25) * 3600, "2y1d"), ((365 * 8 * 24 + 2) * 3600, "8y"),
    (-2, "<invalid>"), (-1.999, "0s"), (0, "0s"), (119.999, "119s"), (120, "2m"),
    (121, "2m1s"), (599.999, "9m59s"), (600, "10m"), (601, "10m"), (3 * 3600 - 0.001, "179m"),
    (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (8 * 3600 - 0.001, "7h59m"), (8 * 3600, "8h"),
    (8 * 3600 + 59 * 60, "8h"), (48 * 3600 - 0.001, "47h"), (48 * 3600, "2d"),
    (8 * 24 * 3600 - 0.001, "7d23h"), (8 * 24 * 3600, "8d"), (730 * 24 * 3600 - 0.001, "729d"),
    (730 * 24 * 3600, "2y"), (731 * 24 * 3600, "2y1d"), (3 * 365 * 24 * 3600, "3y"),
])  # fmt: skip
def test_human_duration(seconds: float, text: str) -> None:
    assert printers.human_duration(seconds) == text


def test_ages_read_rfc3339_and_micro_times() -> None:
    now = datetime(2026, 1, 10, tzinfo=UTC)
    assert printers.since("2026-01-07T00:00:00Z", now) == "3d"
    assert printers.since("2026-01-09T23:59:30.123456Z", now) == "29s"
    assert printers.since(None, now) == printers.since("", now) == "<unknown>"
    assert printers.since("0001-01-01T00:00:00Z", now) == "<unknown>"


def _pod(status: Obj, **spec: Any) -> Obj:
    return {"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x"}], **spec}, "status": status}


def test_a_gated_pod_and_its_nominated_node() -> None:
    pod = _pod({"phase": "Pending", "nominatedNodeName": "n2", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]},
        schedulingGates=[{"name": "example.com/wait"}])  # fmt: skip
    cells = _cells("", "Pod", pod)
    assert cells["Status"] == "SchedulingGated"
    assert (cells["Node"], cells["Nominated Node"], cells["IP"]) == ("<none>", "n2", "<none>")


def test_a_finished_pod_being_deleted_keeps_its_status() -> None:
    done = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    pod = _pod({"phase": "Succeeded", "containerStatuses": [
        {"name": "c", "ready": False, "restartCount": 2, "state": done}]})  # fmt: skip
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    out = table.table(_info("", "Pod"), [pod], {})
    assert out["rows"][0]["cells"][1:4] == ["0/1", "Completed", "2"]  # no "(... ago)"
    assert out["rows"][0]["conditions"] == [{
        "type": "Completed", "status": "True", "reason": "Succeeded",
        "message": "The pod has completed successfully."}]  # fmt: skip


def test_a_sidecar_that_has_not_started_holds_the_pod_in_init() -> None:
    pod = _pod({"phase": "Pending", "initContainerStatuses": [
        {"name": "s", "ready": False, "restartCount": 0, "started": False,
         "state": {"running": {}}}]},
        initContainers=[{"name": "s", "image": "x", "restartPolicy": "Always"}])  # fmt: skip
    summary = pod_printer.summarize(pod)
    assert (summary.reason, summary.ready, summary.total) == ("Init:0/1", 0, 2)


def test_jobs() -> None:
    now = datetime.now(UTC)
    start = (now - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    end = (now - timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    template = {"spec": {"containers": [{"name": "a", "image": "i:1"}]}}
    job = {"metadata": {"name": "j"}, "spec": {"completions": 3, "template": template,
                                               "selector": {"matchLabels": {"j": "1"}}},
           "status": {"succeeded": 3, "startTime": start, "completionTime": end,
                      "conditions": [{"type": "Complete", "status": "True"}]}}  # fmt: skip
    cells = _cells("batch", "Job", job)
    assert [cells[k] for k in ("Status", "Completions", "Duration", "Containers", "Images",
                               "Selector")] == ["Complete", "3/3", "3m", "a", "i:1", "j=1"]
    suspended = {"metadata": {"name": "s"}, "spec": {"parallelism": 4, "template": template},
                 "status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    cells = _cells("batch", "Job", suspended)
    assert [cells[k] for k in ("Status", "Completions", "Duration")] == [
        "Suspended", "0/1 of 4", ""]


def test_selectors_of_workloads() -> None:
    template: Obj = {"spec": {"containers": []}}
    ds = {"metadata": {"name": "d"}, "spec": {"template": template}}
    assert _cells("apps", "DaemonSet", ds)["Node Selector"] == "<none>"
    assert _cells("apps", "DaemonSet", ds)["Selector"] == "<none>"
    deployment = {"metadata": {"name": "d"}, "spec": {"replicas": 2, "template": template},
                  "status": {"readyReplicas": 1}}
    cells = _cells("apps", "Deployment", deployment)
    assert (cells["Ready"], cells["Selector"]) == ("1/2", "")


def test_kinds_without_a_printer_show_when_they_were_created() -> None:
    role = {"metadata": {"name": "r", "creationTimestamp": "2026-01-02T03:04:05Z"}}
    out = table.table(_info("rbac.authorization.k8s.io", "Role"), [role], {})
    assert [(c["name"], c["type"]) for c in out["columnDefinitions"]] == [
        ("Name", "string"), ("Created At", "date")]
    assert out["rows"][0]["cells"] == ["r", "2026-01-02T03:04:05Z"]


def test_include_object_and_headers() -> None:
    lease = {"kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}}
    info = _info("coordination.k8s.io", "Lease")
    assert table.table(info, [lease], {}, include="Object")["rows"][0]["object"] == lease
    assert table.table(info, [lease], {}, include="None")["rows"][0]["object"] is None
    assert table.table(info, [lease], {}, headers=False)["columnDefinitions"] is None
    with pytest.raises(errors.ApiError) as err:
        table.include_object({"includeObject": "Everything"})
    assert (err.value.code, err.value.message) == (
        400, 'unrecognized includeObject value: "Everything"')


@pytest.mark.parametrize(("query", "watch", "message"), [
    ({"sendInitialEvents": "true"}, False,
     "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"),
    ({"resourceVersionMatch": "NotOlderThan"}, False, "resourceVersionMatch: Forbidden: "
     "resourceVersionMatch is forbidden unless resourceVersion is provided"),
    ({"resourceVersionMatch": "Exact", "resourceVersion": "0"}, False,
     'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for '
     'resourceVersion "0"'),
    ({"sendInitialEvents": "true"}, True, "resourceVersionMatch: Forbidden: sendInitialEvents "
     "requires setting resourceVersionMatch to NotOlderThan"),
    ({"resourceVersionMatch": "NotOlderThan"}, True, "resourceVersionMatch: Forbidden: "
     "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"),
])  # fmt: skip
def test_list_options_refused(query: dict[str, str], watch: bool, message: str) -> None:
    with pytest.raises(errors.ApiError) as err:
        list_options.validate(query, watch=watch)
    assert err.value.code == 422
    assert err.value.message == f'ListOptions.meta.k8s.io "" is invalid: {message}'


def _watch(server: ServerThread, query: str) -> list[Obj]:
    url = f"{server.url}/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1&{query}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return [json.loads(line) for line in response.read().splitlines() if line.strip()]


def test_a_watch_list_ends_its_initial_events_with_a_bookmark(apiserver: ServerThread) -> None:
    body = json.dumps({"metadata": {"name": "cm"}}).encode()
    request = urllib.request.Request(f"{apiserver.url}/api/v1/namespaces/default/configmaps",
                                     body, {"Content-Type": "application/json"})  # fmt: skip
    urllib.request.urlopen(request, timeout=10).close()
    base = ("fieldSelector=metadata.name%3Dcm&sendInitialEvents=true"
            "&resourceVersionMatch=NotOlderThan")
    events = _watch(apiserver, f"{base}&allowWatchBookmarks=true")
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    assert {e["type"] for e in events[2:]} <= {"BOOKMARK"}  # the periodic ones, if any
    bookmark = events[1]["object"]
    assert bookmark["kind"] == "ConfigMap"
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"])
    assert [e["type"] for e in _watch(apiserver, base)] == ["ADDED"]  # no bookmarks asked for
    later = base.replace("=true", "=false")
    assert _watch(apiserver, later) == []
    too_new = _watch(apiserver, f"{base}&resourceVersion=999999")
    assert [(e["type"], e["object"]["code"]) for e in too_new] == [("ERROR", 504)]
    with pytest.raises(urllib.error.HTTPError) as refused:
        _watch(apiserver, "sendInitialEvents=true")
    assert refused.value.code == 422
