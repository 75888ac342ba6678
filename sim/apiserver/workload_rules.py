"""Hand-written rules of workloads: DaemonSets, Deployments, ReplicaSets, StatefulSets, Jobs.

The selector must be valid and match the pod template's labels, the template must be a
valid pod template with the restart policy its controller needs, and counts non-negative.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import (
    child,
    forbidden,
    index,
    invalid_each,
    invalid_value,
    not_supported,
    required,
)
from sim.apiserver.go_format import GoRepr, string_map_repr
from sim.apiserver.json_values import as_list, as_str, get_in
from sim.apiserver.names_validation import label_value_problems, qualified_name_problems
from sim.apiserver.object_meta import validate_annotations, validate_labels
from sim.apiserver.pod_rules import validate_pod_spec


def _label_selector(selector: Any, path: str) -> list[Cause]:
    """`ValidateLabelSelector`."""
    if not isinstance(selector, Mapping):
        return []
    out = validate_labels(selector.get("matchLabels"), child(path, "matchLabels"))
    for i, expr in enumerate(as_list(selector.get("matchExpressions"))):
        epath = index(child(path, "matchExpressions"), i)
        if not isinstance(expr, Mapping):
            continue
        op = expr.get("operator")
        values = as_list(expr.get("values"))
        if op in ("In", "NotIn"):
            if not values:
                out.append(
                    required(
                        child(epath, "values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    )
                )
        elif op in ("Exists", "DoesNotExist"):
            if values:
                out.append(
                    forbidden(
                        child(epath, "values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            out.append(
                invalid_value(child(epath, "operator"), op or "", "not a valid selector operator")
            )
        key = as_str(expr.get("key"))
        out += invalid_each(child(epath, "key"), key, qualified_name_problems(key))
        for value in values:
            if isinstance(value, str):
                out += invalid_each(
                    index(child(epath, "values"), 0), value, label_value_problems(value)
                )
    return out


def selector_matches(selector: Any, labels: Mapping[str, str] | None) -> bool:
    """`metav1.LabelSelectorAsSelector(selector).Matches(labels)`; nil matches nothing."""
    if not isinstance(selector, Mapping):
        return False
    labels = labels if isinstance(labels, Mapping) else {}
    match_labels = selector.get("matchLabels")
    for key, value in match_labels.items() if isinstance(match_labels, Mapping) else ():
        if labels.get(key) != value:
            return False
    for expr in as_list(selector.get("matchExpressions")):
        if not isinstance(expr, Mapping):
            continue
        key, op = as_str(expr.get("key")), expr.get("operator")
        values = as_list(expr.get("values"))
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def workload_check(kind: str) -> Callable[[Mapping[str, Any]], list[Cause]]:
    """DaemonSet/Deployment/ReplicaSet/StatefulSet: selector vs template, restartPolicy."""

    def check(obj: Mapping[str, Any]) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            return []
        out: list[Cause] = []
        selector = spec.get("selector")
        template = spec.get("template") if isinstance(spec.get("template"), Mapping) else {}
        labels = get_in(template, "metadata", "labels")
        if isinstance(selector, Mapping):
            out += _label_selector(selector, "spec.selector")
            if not selector.get("matchLabels") and not selector.get("matchExpressions"):
                out.append(
                    invalid_value(
                        "spec.selector",
                        GoRepr(
                            "v1.LabelSelector{MatchLabels:map[string]string(nil), "
                            "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"
                        ),
                        f"empty selector is invalid for {kind.lower()}",
                    )
                )
            elif not selector_matches(selector, labels if isinstance(labels, Mapping) else None):
                out.append(
                    invalid_value(
                        "spec.template.metadata.labels",
                        string_map_repr(labels),
                        "`selector` does not match template `labels`",
                    )
                )
        elif selector is None and kind == "DaemonSet":
            # A nil selector matches nothing; only DaemonSet validation reports it this way.
            out.append(
                invalid_value(
                    "spec.template.metadata.labels",
                    string_map_repr(labels),
                    "`selector` does not match template `labels`",
                )
            )
        out += validate_labels(labels, "spec.template.metadata.labels")
        out += validate_annotations(
            get_in(template, "metadata", "annotations"), "spec.template.metadata.annotations"
        )
        out += validate_pod_spec(template.get("spec"), "spec.template.spec", template=True)
        policy = get_in(template, "spec", "restartPolicy")
        if policy is not None and policy != "Always":
            out.append(not_supported("spec.template.spec.restartPolicy", policy, ["Always"]))
        if get_in(template, "spec", "activeDeadlineSeconds") is not None and kind == "DaemonSet":
            out.append(
                invalid_value(
                    "spec.template.spec.activeDeadlineSeconds",
                    get_in(template, "spec", "activeDeadlineSeconds"),
                    "activeDeadlineSeconds in DaemonSet is not Supported",
                )
            )
        for key in ("minReadySeconds", "revisionHistoryLimit", "replicas"):
            value = spec.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                out.append(
                    invalid_value(f"spec.{key}", value, "must be greater than or equal to 0")
                )
        return out

    return check


def check_job(obj: Mapping[str, Any]) -> list[Cause]:
    """A Job: its pod template, which must not restart `Always`."""
    template = get_in(obj, "spec", "template")
    out = validate_pod_spec(get_in(template, "spec"), "spec.template.spec", template=True)
    policy = get_in(template, "spec", "restartPolicy")
    if policy not in ("OnFailure", "Never"):
        out.append(
            not_supported("spec.template.spec.restartPolicy", policy or "", ["OnFailure", "Never"])
        )
    return out
