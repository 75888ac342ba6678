"""Which hand-written rules each built-in kind gets, on create and on update.

The JSON schemas cannot express name formats, cross-field rules or immutability; the
tables here map (API group, kind) to the checks that do, and hold the rules of kinds
too small for a module of their own (Lease, Node).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from sim.apiserver.dra_rules import (
    allocation_immutable,
    check_device_class,
    check_resource_claim,
    check_resource_claim_template,
    check_resource_slice,
)
from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import (
    DUPLICATE,
    child,
    index,
    invalid_each,
    invalid_value,
    not_supported,
    required,
)
from sim.apiserver.go_format import GoRepr, go_repr
from sim.apiserver.json_values import as_list, as_str, get_in, json_equal
from sim.apiserver.names_validation import label_value_problems, qualified_name_problems
from sim.apiserver.object_meta import validate_object_meta
from sim.apiserver.pod_rules import TAINT_EFFECTS, check_pod, pod_spec_immutable
from sim.apiserver.rbac_rules import (
    RBAC_GROUP,
    binding_check,
    check_policy_rules,
    role_ref_immutable,
)
from sim.apiserver.workload_rules import check_job, workload_check

Check = Callable[[Mapping[str, Any]], list[Cause]]
"""A rule on a new object: its causes, empty when it holds."""
UpdateCheck = Callable[[Mapping[str, Any], Mapping[str, Any]], list[Cause]]
"""A rule on an update, given the new and the old object."""


def _meta_check(name_rule: str) -> Check:
    """`ValidateObjectMeta` with the kind's name rule (one of NAME_RULES)."""

    def check(obj: Mapping[str, Any]) -> list[Cause]:
        return validate_object_meta(obj.get("metadata"), name_rule=name_rule)

    return check


def _immutable(*path: str) -> UpdateCheck:
    """`ValidateImmutableField` at one path (absent and null count as equal)."""

    def check(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
        a, b = get_in(new, *path), get_in(old, *path)
        if json_equal(a, b):
            return []
        return [
            invalid_value(
                ".".join(path), GoRepr(go_repr(a)) if a is not None else None, "field is immutable"
            )
        ]

    return check


def _event_namespace(obj: Mapping[str, Any]) -> list[Cause]:
    """`legacyValidateEvent`'s namespace rule: an Event lives in its object's namespace
    (without an eventTime, one about a cluster-scoped object in "" or "default"; with
    one, also "kube-system")."""
    namespace = as_str(get_in(obj, "metadata", "namespace"))
    involved = as_str(get_in(obj, "involvedObject", "namespace"))
    if not namespace:  # over HTTP the request's path always sets it
        return []
    if not obj.get("eventTime"):
        bad = namespace not in ("", "default") if not involved else namespace != involved
    else:
        bad = not involved and namespace not in ("default", "kube-system")
    if not bad:
        return []
    return [invalid_value("involvedObject.namespace", involved, "does not match event.namespace")]


def _lease(obj: Mapping[str, Any]) -> list[Cause]:
    """`ValidateLeaseSpec`: a positive duration, non-negative transitions."""
    out: list[Cause] = []
    duration = get_in(obj, "spec", "leaseDurationSeconds")
    if isinstance(duration, int) and duration <= 0:
        out.append(invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = get_in(obj, "spec", "leaseTransitions")
    if isinstance(transitions, int) and transitions < 0:
        out.append(
            invalid_value(
                "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
            )
        )
    return out


def _node_object(obj: Mapping[str, Any]) -> list[Cause]:
    """A Node's taints: valid key and value, a known effect, unique by key and effect."""
    out: list[Cause] = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(as_list(get_in(obj, "spec", "taints"))):
        tpath = index("spec.taints", i)
        key = as_str(get_in(taint, "key"))
        out += invalid_each(child(tpath, "key"), key, qualified_name_problems(key))
        value = as_str(get_in(taint, "value"))
        if problems := label_value_problems(value):
            out.append(invalid_value(child(tpath, "value"), value, ";".join(problems)))
        effect = as_str(get_in(taint, "effect"))
        if not effect:
            out.append(required(child(tpath, "effect")))
        elif effect not in TAINT_EFFECTS:
            out.append(not_supported(child(tpath, "effect"), effect, TAINT_EFFECTS))
        if (key, effect) in seen:
            out.append(
                Cause(
                    tpath,
                    DUPLICATE,
                    f"Duplicate value: {go_repr(taint)}: taints must "
                    "be unique by key and effect pair",
                )
            )
        seen.add((key, effect))
    return out


_SUBDOMAIN_META = _meta_check("dns-subdomain")
_PATH_META = _meta_check("path-segment")

EXTRA_CHECKS: Final[Mapping[tuple[str, str], tuple[Check, ...]]] = MappingProxyType(
    {
        ("", "Pod"): (_SUBDOMAIN_META, check_pod),
        ("", "Node"): (_SUBDOMAIN_META, _node_object),
        ("", "Namespace"): (_meta_check("dns-label"),),
        ("", "Service"): (_meta_check("dns1035-label"),),
        ("", "ServiceAccount"): (_SUBDOMAIN_META,),
        ("", "ConfigMap"): (_SUBDOMAIN_META,),
        ("", "Secret"): (_SUBDOMAIN_META,),
        ("", "Event"): (_SUBDOMAIN_META, _event_namespace),
        ("events.k8s.io", "Event"): (_SUBDOMAIN_META,),
        ("apps", "DaemonSet"): (_SUBDOMAIN_META, workload_check("DaemonSet")),
        ("apps", "Deployment"): (_SUBDOMAIN_META, workload_check("Deployment")),
        ("apps", "ReplicaSet"): (_SUBDOMAIN_META, workload_check("ReplicaSet")),
        ("apps", "StatefulSet"): (_SUBDOMAIN_META, workload_check("StatefulSet")),
        ("batch", "Job"): (_SUBDOMAIN_META, check_job),
        ("coordination.k8s.io", "Lease"): (_SUBDOMAIN_META, _lease),
        ("scheduling.k8s.io", "PriorityClass"): (_SUBDOMAIN_META,),
        ("resource.k8s.io", "ResourceClaim"): (_SUBDOMAIN_META, check_resource_claim),
        ("resource.k8s.io", "ResourceClaimTemplate"): (
            _SUBDOMAIN_META,
            check_resource_claim_template,
        ),
        ("resource.k8s.io", "DeviceClass"): (_SUBDOMAIN_META, check_device_class),
        ("resource.k8s.io", "ResourceSlice"): (_SUBDOMAIN_META, check_resource_slice),
        (RBAC_GROUP, "Role"): (_PATH_META, lambda o: check_policy_rules(o, namespaced=True)),
        (RBAC_GROUP, "ClusterRole"): (
            _PATH_META,
            lambda o: check_policy_rules(o, namespaced=False),
        ),
        (RBAC_GROUP, "RoleBinding"): (
            _PATH_META,
            binding_check(("Role", "ClusterRole"), namespaced=True),
        ),
        (RBAC_GROUP, "ClusterRoleBinding"): (
            _PATH_META,
            binding_check(("ClusterRole",), namespaced=False),
        ),
        ("apiextensions.k8s.io", "CustomResourceDefinition"): (_SUBDOMAIN_META,),
    }
)
"""The hand-written rules of each (API group, kind), on create and update."""


UPDATE_CHECKS: Final[Mapping[tuple[str, str], tuple[UpdateCheck, ...]]] = MappingProxyType(
    {
        ("", "Pod"): (pod_spec_immutable,),
        ("apps", "DaemonSet"): (_immutable("spec", "selector"),),
        ("apps", "Deployment"): (_immutable("spec", "selector"),),
        ("apps", "ReplicaSet"): (_immutable("spec", "selector"),),
        ("apps", "StatefulSet"): (_immutable("spec", "selector"),),
        ("resource.k8s.io", "ResourceClaim"): (_immutable("spec"), allocation_immutable),
        ("resource.k8s.io", "ResourceClaimTemplate"): (_immutable("spec"),),
        ("resource.k8s.io", "ResourceSlice"): (
            _immutable("spec", "driver"),
            _immutable("spec", "pool", "name"),
            _immutable("spec", "nodeName"),
        ),
        (RBAC_GROUP, "RoleBinding"): (role_ref_immutable,),
        (RBAC_GROUP, "ClusterRoleBinding"): (role_ref_immutable,),
    }
)
"""The update strategies' immutability rules of each (API group, kind)."""
