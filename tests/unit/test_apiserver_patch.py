"""The three patch types, on the bodies `kubectl patch`, `kubectl apply` and client-go send.

Strategic merge patch is where a simulator most easily lies: merging a list a real cluster
replaces (or the reverse) makes a controller's patch look right here and wrong in production.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sim.apiserver.patch import PatchError, apply_json_patch, apply_merge_patch
from sim.apiserver.strategic_patch import (
    MERGE_KEYS,
    STRATEGIC_MERGE_KINDS,
    apply_strategic_merge_patch,
)

UID_A = "0e6c5b8a-0000-4000-8000-00000000000a"
UID_B = "0e6c5b8a-0000-4000-8000-00000000000b"


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "worker",
            "namespace": "drv",
            "labels": {"app": "worker", "tier": "node"},
            "annotations": {"note": "x"},
            "finalizers": ["a.example.com/f"],
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": UID_A},
            ],
        },
        "spec": {
            "nodeName": "node-a",
            "containers": [
                {
                    "name": "main",
                    "image": "main:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "volumeMounts": [{"name": "cdi", "mountPath": "/var/run/cdi"}],
                },
                {"name": "sidecar", "image": "sidecar:1"},
            ],
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "volumes": [{"name": "cdi", "hostPath": {"path": "/var/run/cdi"}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [{"name": "main", "ready": False}],
        },
    }


def smp(target: dict[str, Any], patch: dict[str, Any], kind: str = "Pod", group: str = ""):
    return apply_strategic_merge_patch(target, patch, kind, group)


def names(items: list[dict[str, Any]], key: str = "name") -> list[Any]:
    return [item[key] for item in items]


# --- strategic merge patch: lists that merge ------------------------------------------------


def test_adding_an_env_var_to_one_container_keeps_everything_else():
    out = smp(
        pod(), {"spec": {"containers": [{"name": "main", "env": [{"name": "C", "value": "3"}]}]}}
    )
    main, sidecar = out["spec"]["containers"]
    # Items new to the live list go first: mergeSortedSlice only interleaves items it can
    # place by the live order, and a new item has none.
    assert names(main["env"]) == ["C", "A", "B"]
    assert main["image"] == "main:1"
    assert main["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert sidecar == {"name": "sidecar", "image": "sidecar:1"}


def test_kubernetes_docs_patch_demo():
    """The "Update API Objects in Place Using kubectl patch" task on kubernetes.io: the new
    container lands first, and tolerations (no patch strategy) are replaced."""
    deployment_template = {
        "spec": {
            "containers": [{"name": "patch-demo-ctr", "image": "nginx"}],
            "tolerations": [{"effect": "NoSchedule", "key": "dedicated", "value": "test-team"}],
        }
    }
    job = {"kind": "Job", "spec": {"template": deployment_template}}
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "patch-demo-ctr-2", "image": "redis"}],
                    "tolerations": [{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}],
                }
            }
        }
    }
    spec = smp(job, patch, "Job", "batch")["spec"]["template"]["spec"]
    assert [(c["name"], c["image"]) for c in spec["containers"]] == [
        ("patch-demo-ctr-2", "redis"),
        ("patch-demo-ctr", "nginx"),
    ]
    assert spec["tolerations"] == [{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]


def test_changing_an_env_var_by_name():
    patch = {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "20"}]}]}}
    main = smp(pod(), patch)["spec"]["containers"][0]
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "20"}]


def test_kubectl_set_image():
    patch = {"spec": {"containers": [{"name": "sidecar", "image": "sidecar:2"}]}}
    out = smp(pod(), patch)
    assert [c["image"] for c in out["spec"]["containers"]] == ["main:1", "sidecar:2"]


def test_patch_delete_removes_a_container():
    out = smp(pod(), {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}})
    assert names(out["spec"]["containers"]) == ["main"]


def test_patch_replace_item_makes_the_patch_list_the_whole_list():
    patch = {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o:1"}]}}
    assert smp(pod(), patch)["spec"]["containers"] == [{"name": "only", "image": "o:1"}]


def test_new_container_is_appended():
    patch = {"spec": {"containers": [{"name": "debug", "image": "busybox"}]}}
    assert names(smp(pod(), patch)["spec"]["containers"]) == ["debug", "main", "sidecar"]


def test_ports_merge_by_container_port_and_volume_mounts_by_mount_path():
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "ports": [{"containerPort": 9090}],
                    "volumeMounts": [{"name": "cdi2", "mountPath": "/var/run/cdi"}],
                }
            ]
        }
    }
    main = smp(pod(), patch)["spec"]["containers"][0]
    assert names(main["ports"], "containerPort") == [9090, 8080]
    assert main["volumeMounts"] == [{"name": "cdi2", "mountPath": "/var/run/cdi"}]


def test_volumes_merge_by_name():
    patch = {"spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]}}
    assert names(smp(pod(), patch)["spec"]["volumes"]) == ["scratch", "cdi"]


def test_finalizers_are_a_set():
    out = smp(pod(), {"metadata": {"finalizers": ["a.example.com/f", "b.example.com/f"]}})
    assert out["metadata"]["finalizers"] == ["a.example.com/f", "b.example.com/f"]
    out = smp(pod(), {"metadata": {"finalizers": ["b.example.com/f"]}})
    assert out["metadata"]["finalizers"] == ["b.example.com/f", "a.example.com/f"]
    out = smp(pod(), {"metadata": {"finalizers": ["a.example.com/f"]}})
    assert out["metadata"]["finalizers"] == ["a.example.com/f"]


def test_delete_from_primitive_list_removes_a_finalizer():
    target = pod()
    target["metadata"]["finalizers"].append("b.example.com/f")
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/f"]}}
    assert smp(target, patch)["metadata"]["finalizers"] == ["b.example.com/f"]


def test_delete_from_an_absent_list_is_a_no_op():
    target = pod()
    del target["metadata"]["finalizers"]
    out = smp(target, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}})
    assert "finalizers" not in out["metadata"]


def test_owner_references_merge_by_uid():
    ref_b = {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": UID_B}
    out = smp(pod(), {"metadata": {"ownerReferences": [ref_b]}})
    assert names(out["metadata"]["ownerReferences"], "uid") == [UID_B, UID_A]
    out = smp(pod(), {"metadata": {"ownerReferences": [{"uid": UID_A, "$patch": "delete"}]}})
    assert out["metadata"]["ownerReferences"] == []


def test_status_conditions_merge_by_type():
    patch = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    out = smp(pod(), patch)
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]


def test_pod_template_lists_merge_in_daemonsets_and_jobs():
    template = {"metadata": {"labels": {"app": "d"}}, "spec": pod()["spec"]}
    for group, kind in (("apps", "DaemonSet"), ("batch", "Job")):
        target = {
            "kind": kind,
            "metadata": {"name": "x"},
            "spec": {"template": copy.deepcopy(template)},
        }
        patch = {
            "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "main:2"}]}}}
        }
        containers = smp(target, patch, kind, group)["spec"]["template"]["spec"]["containers"]
        assert [(c["name"], c["image"]) for c in containers] == [
            ("main", "main:2"),
            ("sidecar", "sidecar:1"),
        ]


def test_resource_claim_reserved_for_merges_by_uid():
    claim = {
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "status": {"reservedFor": [{"resource": "pods", "name": "p1", "uid": UID_A}]},
    }
    patch = {"status": {"reservedFor": [{"resource": "pods", "name": "p2", "uid": UID_B}]}}
    out = smp(claim, patch, "ResourceClaim", "resource.k8s.io")
    assert sorted(names(out["status"]["reservedFor"], "uid")) == [UID_A, UID_B]


def test_node_conditions_and_addresses_merge_by_type():
    node = {
        "kind": "Node",
        "metadata": {"name": "n"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }
    patch = {"status": {"addresses": [{"type": "Hostname", "address": "n"}]}}
    out = smp(node, patch, "Node")
    assert names(out["status"]["addresses"], "type") == ["Hostname", "InternalIP"]
    assert out["status"]["conditions"] == node["status"]["conditions"]


# --- strategic merge patch: lists that are replaced ------------------------------------------


def test_tolerations_are_replaced():
    patch = {"spec": {"tolerations": [{"key": "other", "operator": "Exists"}]}}
    assert smp(pod(), patch)["spec"]["tolerations"] == [{"key": "other", "operator": "Exists"}]


def test_container_statuses_are_replaced():
    patch = {"status": {"containerStatuses": [{"name": "sidecar", "ready": True}]}}
    assert smp(pod(), patch)["status"]["containerStatuses"] == [{"name": "sidecar", "ready": True}]


def test_node_taints_are_replaced_as_the_go_type_has_no_patch_strategy():
    node = {"kind": "Node", "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    patch = {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}
    assert smp(node, patch, "Node")["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]


def test_role_rules_are_replaced():
    role = {"kind": "Role", "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}
    patch = {"rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]}
    out = smp(role, patch, "Role", "rbac.authorization.k8s.io")
    assert out["rules"] == patch["rules"]


# --- strategic merge patch: maps and directives ----------------------------------------------


def test_null_deletes_and_maps_merge():
    patch = {"metadata": {"labels": {"tier": None, "new": "y"}, "annotations": None}}
    out = smp(pod(), patch)
    assert out["metadata"]["labels"] == {"app": "worker", "new": "y"}
    assert "annotations" not in out["metadata"]


def test_nulls_inside_new_values_are_dropped():
    target = pod()
    del target["metadata"]["annotations"]
    out = smp(target, {"metadata": {"annotations": {"a": "1", "b": None}}})
    assert out["metadata"]["annotations"] == {"a": "1"}


def test_patch_replace_in_a_map():
    out = smp(pod(), {"metadata": {"labels": {"$patch": "replace", "only": "this"}}})
    assert out["metadata"]["labels"] == {"only": "this"}


def test_patch_delete_in_a_map_empties_it():
    out = smp(pod(), {"metadata": {"labels": {"$patch": "delete"}}})
    assert out["metadata"]["labels"] == {}


def test_whole_object_replace():
    out = smp(pod(), {"$patch": "replace", "kind": "Pod", "metadata": {"name": "w"}})
    assert out == {"kind": "Pod", "metadata": {"name": "w"}}


def test_retain_keys_clears_other_fields():
    target = pod()
    target["spec"]["volumes"][0] = {"name": "cdi", "emptyDir": {}, "hostPath": {"path": "/x"}}
    patch = {
        "spec": {
            "volumes": [
                {"name": "cdi", "$retainKeys": ["hostPath", "name"], "hostPath": {"path": "/y"}}
            ]
        }
    }
    assert smp(target, patch)["spec"]["volumes"] == [{"name": "cdi", "hostPath": {"path": "/y"}}]


def test_set_element_order_reorders_as_kubectl_apply_asks():
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "main"}],
            "containers": [{"name": "main", "image": "main:2"}],
        }
    }
    containers = smp(pod(), patch)["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [
        ("sidecar", "sidecar:1"),
        ("main", "main:2"),
    ]


def test_set_element_order_for_a_primitive_list():
    target = pod()
    target["metadata"]["finalizers"] = ["a", "b"]
    patch = {"metadata": {"$setElementOrder/finalizers": ["c", "b", "a"], "finalizers": ["c"]}}
    assert smp(target, patch)["metadata"]["finalizers"] == ["c", "b", "a"]


def test_kubectl_apply_style_patch_that_adds_and_deletes():
    """What `kubectl apply` sends after a container is renamed in the manifest."""
    patch = {
        "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {
            "$setElementOrder/containers": [{"name": "main"}, {"name": "proxy"}],
            "containers": [
                {"name": "proxy", "image": "proxy:1"},
                {"name": "sidecar", "$patch": "delete"},
            ],
        },
    }
    out = smp(pod(), patch)
    assert names(out["spec"]["containers"]) == ["main", "proxy"]
    assert out["metadata"]["annotations"]["note"] == "x"


# --- strategic merge patch: apimachinery's own raw test cases ---------------------------------
# From k8s.io/apimachinery pkg/util/strategicpatch/patch_test.go, whose fake `mergingList`
# (merge key `name`) and `mergingIntList` (a merged set of primitives) stand here for a Pod's
# spec.containers and metadata.finalizers; list order matters in these cases.

_FIELDS = {"mergingList": ("spec", "containers"), "mergingIntList": ("metadata", "finalizers")}


def _on_pod(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        prefix, _, name = key.rpartition("/")
        parent, field = _FIELDS[name]
        out.setdefault(parent, {})[f"{prefix}/{field}" if prefix else field] = value
    return out


RAW_CASES = [
    ("setElementOrder names an item that is in neither list",
     "mergingList: [{name: 1}, {name: 3}]",
     "{$setElementOrder/mergingList: [{name: 3}, {name: 2}, {name: 1}],"
     " mergingList: [{name: 3, value: 3}, {name: 1, value: 1}]}",
     "mergingList: [{name: 3, value: 3}, {name: 1, value: 1}]"),
    ("setElementOrder alone reorders a primitive list",
     "mergingIntList: [1, 3]",
     "{$setElementOrder/mergingIntList: [3, 2, 1]}",
     "mergingIntList: [3, 1]"),
    ("deleting an absent primitive adds nothing",
     "mergingIntList: [1, 2]", "{$deleteFromPrimitiveList/mergingIntList: [3]}",
     "mergingIntList: [1, 2]"),
    ("deleting from a null list leaves it null",
     "mergingIntList: null", "{$deleteFromPrimitiveList/mergingIntList: [3]}",
     "mergingIntList: null"),
    ("deleting from a merged primitive list",
     "mergingIntList: [1, 2, 3]", "{$deleteFromPrimitiveList/mergingIntList: [2]}",
     "mergingIntList: [1, 3]"),
    ("add an item in a list of primitives and preserve order",
     "mergingIntList: [1, 4, 2]",
     "{$setElementOrder/mergingIntList: [3, 1, 2], mergingIntList: [3]}",
     "mergingIntList: [3, 1, 4, 2]"),
    ("delete an item in a list of primitives and preserve order",
     "mergingIntList: [1, 2, 3]",
     "{$setElementOrder/mergingIntList: [2, 1], $deleteFromPrimitiveList/mergingIntList: [3]}",
     "mergingIntList: [2, 1]"),
    ("add an item in a list and preserve order",
     "mergingList: [{name: 1, other: a}, {name: 2, value: 2, other: b}]",
     "{$setElementOrder/mergingList: [{name: 3}, {name: 1}, {name: 2}],"
     " mergingList: [{name: 3, value: 3}]}",
     "mergingList: [{name: 3, value: 3}, {name: 1, other: a}, {name: 2, value: 2, other: b}]"),
    ("add multiple items in a list and preserve order",
     "mergingList: [{name: 1, other: a}, {name: 2, value: 2, other: b}]",
     "{$setElementOrder/mergingList: [{name: 1}, {name: 4}, {name: 2}, {name: 3}],"
     " mergingList: [{name: 4, value: 4}, {name: 3, value: 3}]}",
     "mergingList: [{name: 1, other: a}, {name: 4, value: 4}, {name: 2, value: 2, other: b},"
     " {name: 3, value: 3}]"),
    ("set elements order in a list with server-only items",
     "mergingList: [{name: 1, other: a}, {name: 3}, {name: 4}, {name: 2}, {name: 9}]",
     "{$setElementOrder/mergingList: [{name: 4}, {name: 2}, {name: 3}, {name: 1}]}",
     "mergingList: [{name: 4}, {name: 2}, {name: 3}, {name: 1, other: a}, {name: 9}]"),
    ("set elements order in a list with server-only items 2",
     "mergingList: [{name: 1}, {name: 2}, {name: 9}, {name: 3}, {name: 4}]",
     "{$setElementOrder/mergingList: [{name: 2}, {name: 1}, {name: 4}, {name: 3}]}",
     "mergingList: [{name: 2}, {name: 1}, {name: 9}, {name: 4}, {name: 3}]"),
    ("set elements order in a list with server-only items 3",
     "mergingList: [{name: 1}, {name: 2}, {name: 7}, {name: 9}, {name: 8}, {name: 3}, {name: 4}]",
     "{$setElementOrder/mergingList: [{name: 2}, {name: 1}, {name: 4}, {name: 3}]}",
     "mergingList: [{name: 2}, {name: 1}, {name: 7}, {name: 9}, {name: 8}, {name: 4}, {name: 3}]"),
    ("preserve the order from the patch in a merging list 2",
     "mergingList: [{name: 1}, {name: 2, value: b}, {name: 3}]",
     "mergingList: [{name: 3, value: c}, {name: 1, value: a}]",
     "mergingList: [{name: 2, value: b}, {name: 3, value: c}, {name: 1, value: a}]"),
    ("preserve the order from the patch in a merging int list",
     "mergingIntList: [1, 2, 3]", "mergingIntList: [3, 1]", "mergingIntList: [2, 3, 1]"),
    ("unique scalars when merging lists",
     "mergingIntList: [1, 2]", "mergingIntList: [2, 3]", "mergingIntList: [1, 2, 3]"),
    ("delete all duplicate entries in a merging list",
     "mergingList: [{name: 1}, {name: 1}, {name: 2, value: a}, {name: 3}, {name: 3}]",
     "mergingList: [{name: 1, $patch: delete}, {name: 3, $patch: delete}]",
     "mergingList: [{name: 2, value: a}]"),
    ("delete all items from merging list",
     "mergingList: [{name: 1}, {name: 2}]", "mergingList: [{$patch: replace}]", "mergingList: []"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("original", "patch", "result"), [c[1:] for c in RAW_CASES], ids=[c[0] for c in RAW_CASES]
)
def test_apimachinery_raw_cases(original, patch, result):
    out = smp(_on_pod(yaml.safe_load(original)), _on_pod(yaml.safe_load(patch)))
    assert out == _on_pod(yaml.safe_load(result))


@pytest.mark.parametrize(
    ("original", "patch", "message"),
    [
        ("mergingList: [{name: 1}, {name: 3}, {name: 2}]",
         "{$setElementOrder/mergingList: [{name: 1}, {name: 2}, {name: 3}],"
         " mergingList: [{name: 3, value: 3}, {name: 1, value: 1}]}",
         "doesn't match $setElementOrder list"),
        ("mergingIntList: [1, 3, 2]",
         "{$setElementOrder/mergingIntList: [1, 2, 3], mergingIntList: [3, 1]}",
         "doesn't match $setElementOrder list"),
        ("mergingList: [{name: 1, value: a}]", "mergingList: [{value: b}]",
         "map: map[value:b] does not contain declared merge key: name"),
    ],
)  # fmt: skip
def test_apimachinery_raw_error_cases(original, patch, message):
    with pytest.raises(PatchError) as err:
        smp(_on_pod(yaml.safe_load(original)), _on_pod(yaml.safe_load(patch)))
    assert message in str(err.value)
    assert err.value.code == 500


def test_delete_from_a_list_without_merge_strategy():
    target = {"spec": {"containers": [{"name": "main", "args": ["1", "2", "3"]}]}}
    patch = {"spec": {"containers": [{"name": "main", "$deleteFromPrimitiveList/args": ["2"]}]}}
    assert smp(target, patch)["spec"]["containers"][0]["args"] == ["1", "3"]


# --- strategic merge patch: errors as the real server gives them -------------------------------


@pytest.mark.parametrize(
    ("patch", "code", "message"),
    [
        (
            {"spec": {"containers": [{"image": "x"}]}},
            500,
            "map: map[image:x] does not contain declared merge key: name",
        ),
        (
            {"spec": {"containers": [{"name": "main", "$patch": "merge"}]}},
            500,
            "merging lists cannot yet be specified in the patch",
        ),
        (
            {"metadata": {"labels": {"$patch": "merge", "a": "b"}}},
            500,
            "unknown patch type: merge in map: map[$patch:merge a:b]",
        ),
        ({"metadata": {"$retainKeys": "name"}}, 400, "invalid patch format of retainKeys"),
        ({"metadata": {"$retainKeys": ["name"], "labels": {}}}, 400,
         "invalid patch format of retainKeys"),
        ({"metadata": {"$deleteFromPrimitiveListX": []}}, 400,
         "invalid patch format of primitive list"),
        ({"metadata": {"$setElementOrder": []}}, 400,
         "invalid patch format of setElementOrder list"),
        ({"metadata": {"$frobnicate": 1}}, 400,
         "unknown strategic merge patch directive: $frobnicate"),
        ({"metadata": {"finalizers": [1]}}, 500,
         "list element types are not identical: [[a.example.com/f] [1]]"),
    ],
)  # fmt: skip
def test_strategic_patch_errors(patch, code, message):
    with pytest.raises(PatchError) as err:
        smp(pod(), patch)
    assert (err.value.code, str(err.value)) == (code, message)


def test_lists_of_lists_are_a_422():
    target = pod()
    target["metadata"]["finalizers"] = []
    with pytest.raises(PatchError) as err:
        smp(target, {"metadata": {"finalizers": [["nested"]]}})
    assert (err.value.code, str(err.value)) == (422, "lists of lists are not supported")


def test_custom_resources_do_not_take_strategic_patches():
    assert ("resource.nvidia.com", "ComputeDomain") not in STRATEGIC_MERGE_KINDS
    with pytest.raises(PatchError) as err:
        smp({"kind": "ComputeDomain"}, {"spec": {}}, "ComputeDomain", "resource.nvidia.com")
    assert err.value.code == 415


def test_served_builtin_kinds_take_strategic_patches():
    expected = {
        ("", k)
        for k in (
            "Namespace", "Node", "Pod", "Event", "Service", "ServiceAccount", "ConfigMap", "Secret"
        )
    } | {
        ("apps", "DaemonSet"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("batch", "Job"),
        ("coordination.k8s.io", "Lease"),
        *(("rbac.authorization.k8s.io", k)
          for k in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")),
        *(("resource.k8s.io", k)
          for k in ("ResourceClaim", "ResourceClaimTemplate", "ResourceSlice", "DeviceClass")),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
    }  # fmt: skip
    assert expected == STRATEGIC_MERGE_KINDS
    assert MERGE_KEYS["", "Pod"]["spec", "containers", "env"] == "name"


# --- JSON merge patch -------------------------------------------------------------------------


def test_merge_patch_replaces_lists_whole():
    patch = {"spec": {"containers": [{"name": "main", "image": "main:2"}]}}
    assert apply_merge_patch(pod(), patch)["spec"]["containers"] == [
        {"name": "main", "image": "main:2"}
    ]


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [  # RFC 7386 appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_rfc_examples(target, patch, expected):
    assert apply_merge_patch(target, patch) == expected


# --- JSON patch -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "check"),
    [
        ([{"op": "add", "path": "/metadata/labels/new", "value": "y"}],
         lambda o: o["metadata"]["labels"]["new"] == "y"),
        ([{"op": "add", "path": "/metadata/finalizers/-", "value": "b"}],
         lambda o: o["metadata"]["finalizers"] == ["a.example.com/f", "b"]),
        ([{"op": "remove", "path": "/spec/containers/1"}],
         lambda o: names(o["spec"]["containers"]) == ["main"]),
        ([{"op": "replace", "path": "/spec/containers/0/image", "value": "main:2"}],
         lambda o: o["spec"]["containers"][0]["image"] == "main:2"),
        ([{"op": "test", "path": "/metadata/name", "value": "worker"},
          {"op": "replace", "path": "/status/phase", "value": "Succeeded"}],
         lambda o: o["status"]["phase"] == "Succeeded"),
        ([{"op": "move", "from": "/metadata/annotations/note", "path": "/metadata/labels/note"}],
         lambda o: o["metadata"]["labels"]["note"] == "x" and o["metadata"]["annotations"] == {}),
        ([{"op": "copy", "from": "/spec/nodeName", "path": "/metadata/labels/node"}],
         lambda o: o["metadata"]["labels"]["node"] == o["spec"]["nodeName"] == "node-a"),
        ([{"op": "remove", "path": "/metadata/labels/resource.nvidia.com~1computeDomain"}]
         if False else [{"op": "add", "path": "/metadata/labels/a~1b", "value": "1"}],
         lambda o: o["metadata"]["labels"]["a/b"] == "1"),
        ([], lambda o: o == pod()),
    ],
)  # fmt: skip
def test_json_patch_operations(ops, check):
    assert check(apply_json_patch(pod(), ops))


@pytest.mark.parametrize(
    ("ops", "code", "message"),
    [
        ([{"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
          {"op": "replace", "path": "/status/phase", "value": "Failed"}],
         422, "testing value /metadata/resourceVersion failed: test failed"),
        ([{"op": "test", "path": "/status/phase", "value": "Pending"}],
         422, "testing value /status/phase failed: test failed"),
        ([{"op": "remove", "path": "/metadata/labels/missing"}], 422, None),
        ([{"op": "replace", "path": "/spec/missing/x", "value": 1}], 422, None),
        ([{"op": "add", "path": "/spec/containers/9", "value": {}}], 422, None),
        ([{"op": "frobnicate", "path": "/a"}], 422, "Unexpected kind: frobnicate"),
        ([{"path": "/a"}], 422, "Unexpected kind: unknown"),
        ([{"op": "add", "path": "/a"}], 422, "add operation: missing 'value' member"),
        ([{"op": "move", "path": "/a"}], 422, "move operation: missing or invalid 'from' member"),
        ({"op": "add", "path": "/a", "value": 1}, 400, None),
        (["add"], 400, None),
    ],
)  # fmt: skip
def test_json_patch_errors(ops, code, message):
    target = pod()
    with pytest.raises(PatchError) as err:
        apply_json_patch(target, ops)
    assert err.value.code == code
    if message is not None:
        assert str(err.value) == message
    assert target == pod()  # a failing patch leaves nothing half-applied


def test_json_patch_result_does_not_alias_the_ops():
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "1"}}]
    out = apply_json_patch(pod(), ops)
    out["metadata"]["labels"]["b"] = "2"
    assert ops[0]["value"] == {"a": "1"}


# --- properties -----------------------------------------------------------------------------

_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3)
_keys = st.sampled_from(["a", "b", "c", "name", "env", "labels"])
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=12,
)
_objects = st.dictionaries(_keys, _json, max_size=4)
# Patches without lists or `$` keys: where strategic merge must agree with JSON merge patch.
_list_free = st.recursive(
    _scalars, lambda inner: st.dictionaries(_keys, inner, max_size=3), max_leaves=10
)


@given(_objects)
def test_empty_merge_patch_is_identity(obj):
    assert apply_merge_patch(obj, {}) == obj


@given(_objects, _objects)
def test_merge_patch_is_idempotent_and_pure(target, patch):
    before_t, before_p = copy.deepcopy(target), copy.deepcopy(patch)
    once = apply_merge_patch(target, patch)
    assert apply_merge_patch(once, patch) == once
    assert (target, patch) == (before_t, before_p)


@given(_objects, st.dictionaries(_keys, _list_free, max_size=4))
def test_strategic_patch_without_lists_is_a_merge_patch(target, patch):
    before_t, before_p = copy.deepcopy(target), copy.deepcopy(patch)
    assert smp(target, patch, "ConfigMap") == apply_merge_patch(target, patch)
    assert (target, patch) == (before_t, before_p)


_env = st.lists(
    st.fixed_dictionaries({"name": st.sampled_from("ABCD"), "value": st.text(max_size=2)}),
    max_size=4,
    unique_by=lambda e: e["name"],
)


@given(_env, _env)
def test_env_merge_keeps_unpatched_vars_and_takes_patched_values(live, patched):
    target = {"spec": {"containers": [{"name": "main", "env": live}]}}
    before = copy.deepcopy(target)
    out = smp(target, {"spec": {"containers": [{"name": "main", "env": patched}]}})
    env = {e["name"]: e["value"] for e in out["spec"]["containers"][0]["env"]}
    assert env == {e["name"]: e["value"] for e in live} | {e["name"]: e["value"] for e in patched}
    assert target == before


_add_ops = st.lists(
    st.fixed_dictionaries(
        {"op": st.just("add"), "path": st.sampled_from(["/a", "/b", "/zz"]), "value": _json}
    ),
    max_size=3,
)


@given(_objects, _add_ops)
def test_json_patch_never_mutates_its_inputs(target, ops):
    before_t, before_o = copy.deepcopy(target), copy.deepcopy(ops)
    out = apply_json_patch(target, ops)
    assert (target, ops) == (before_t, before_o)
    for op in ops:
        assert out[op["path"][1:]] is not op["value"] or not isinstance(op["value"], dict | list)
