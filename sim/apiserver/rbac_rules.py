"""Hand-written rules of RBAC objects: policy rules, role references, subjects.

What the project's Roles, ClusterRoles and bindings must satisfy, including that a
binding's roleRef can never change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import (
    child,
    index,
    invalid_each,
    invalid_value,
    not_supported,
    required,
)
from sim.apiserver.go_format import GoRepr, go_quote, go_repr
from sim.apiserver.json_values import as_list, as_str, json_equal
from sim.apiserver.names_validation import dns1123_subdomain_problems, path_segment_problems

RBAC_GROUP: Final = "rbac.authorization.k8s.io"


def check_policy_rules(obj: Mapping[str, Any], *, namespaced: bool) -> list[Cause]:
    """A (Cluster)Role's rules: verbs, and resources or (cluster-wide only) URLs."""
    out: list[Cause] = []
    if not namespaced and obj.get("aggregationRule") is not None:
        return out
    for i, rule in enumerate(as_list(obj.get("rules"))):
        rpath = index("rules", i)
        if not isinstance(rule, Mapping):
            continue
        if not as_list(rule.get("verbs")):
            out.append(required(child(rpath, "verbs"), "verbs must contain at least one value"))
        urls = as_list(rule.get("nonResourceURLs"))
        if urls:
            if namespaced:
                out.append(
                    invalid_value(
                        child(rpath, "nonResourceURLs"),
                        GoRepr(go_repr(urls)),
                        "namespaced rules cannot apply to non-resource URLs",
                    )
                )
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                out.append(
                    invalid_value(
                        child(rpath, "nonResourceURLs"),
                        GoRepr(go_repr(urls)),
                        "rules cannot apply to both regular resources and non-resource URLs",
                    )
                )
            continue
        if not as_list(rule.get("apiGroups")):
            out.append(
                required(
                    child(rpath, "apiGroups"), "resource rules must supply at least one api group"
                )
            )
        if not as_list(rule.get("resources")):
            out.append(
                required(
                    child(rpath, "resources"), "resource rules must supply at least one resource"
                )
            )
    return out


def binding_check(
    kinds: tuple[str, ...], *, namespaced: bool
) -> Callable[[Mapping[str, Any]], list[Cause]]:
    """A (Cluster)RoleBinding's check: roleRef to one of `kinds`, valid subjects."""

    def check(obj: Mapping[str, Any]) -> list[Cause]:
        out: list[Cause] = []
        ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), Mapping) else {}
        if ref.get("apiGroup") != RBAC_GROUP:
            out.append(not_supported("roleRef.apiGroup", as_str(ref.get("apiGroup")), [RBAC_GROUP]))
        if ref.get("kind") not in kinds:
            out.append(not_supported("roleRef.kind", as_str(ref.get("kind")), kinds))
        name = as_str(ref.get("name"))
        if not name:
            out.append(required("roleRef.name"))
        else:
            out += invalid_each("roleRef.name", name, path_segment_problems(name))
        for i, subject in enumerate(as_list(obj.get("subjects"))):
            spath = index("subjects", i)
            if not isinstance(subject, Mapping):
                continue
            sname = as_str(subject.get("name"))
            if not sname:
                out.append(required(child(spath, "name")))
            skind = subject.get("kind")
            group = subject.get("apiGroup")
            if skind == "ServiceAccount":
                if sname:
                    out += invalid_each(
                        child(spath, "name"), sname, dns1123_subdomain_problems(sname)
                    )
                if group:
                    out.append(not_supported(child(spath, "apiGroup"), group, [""]))
                if not namespaced and not subject.get("namespace"):
                    out.append(required(child(spath, "namespace")))
            elif skind in ("User", "Group"):
                if group not in (None, "", RBAC_GROUP):  # "" and absent are defaulted to rbac
                    out.append(not_supported(child(spath, "apiGroup"), group, [RBAC_GROUP]))
            else:
                out.append(
                    not_supported(
                        child(spath, "kind"), as_str(skind), ["ServiceAccount", "User", "Group"]
                    )
                )
        return out

    return check


def role_ref_immutable(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """A binding's roleRef can never change (delete and recreate it instead)."""
    a, b = new.get("roleRef"), old.get("roleRef")
    if json_equal(a, b):
        return []
    ref = a if isinstance(a, Mapping) else {}
    shown = GoRepr(
        f"rbac.RoleRef{{APIGroup:{go_quote(as_str(ref.get('apiGroup')))}, "
        f"Kind:{go_quote(as_str(ref.get('kind')))}, "
        f"Name:{go_quote(as_str(ref.get('name')))}}}"
    )
    return [invalid_value("roleRef", shown, "cannot change roleRef")]
