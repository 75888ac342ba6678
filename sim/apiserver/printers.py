"""kube-apiserver's table printers, the columns `kubectl get` shows: what they share (the
column definitions, ages, selectors) and the printers of the simpler kinds.

Each printer is a list of columns, a column its definition and a function of the object
giving the cell, after
https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/printers/internalversion/printers.go.
The server prints every column (`GenerateOptions{Wide: true}`); `kubectl get` drops the
priority-1 ones unless `-o wide`. Pods, nodes, events and workloads have modules of their
own (sim/apiserver/pod_printer.py, node_printers.py, workload_printers.py); the
CustomResourceDefinitions' printer is apiextensions-apiserver's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from sim.apiserver.label_selectors import SelectorError, label_selector_from_dict
from sim.apiserver.printer_docs import CREATION_TIMESTAMP, DESCRIPTIONS
from sim.apiserver.printer_docs import NAME as NAME_DOC

Obj = dict[str, Any]
Cell = Callable[[Obj], Any]
Column = tuple[dict[str, Any], Cell]
NONE: Final = "<none>"
UNKNOWN: Final = "<unknown>"


def definition(
    name: str, description: str, *, type_: str = "string", priority: int = 0, fmt: str = ""
) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": fmt, "description": description,
            "priority": priority}  # fmt: skip


def column(resource: str, name: str, cell: Cell, *, type_: str = "string",
           priority: int = 0) -> Column:  # fmt: skip
    """A column whose description is the one upstream gives `resource`'s `name` column."""
    return definition(name, DESCRIPTIONS[resource][name], type_=type_, priority=priority), cell


def name_column(priority: int = 0) -> Column:
    return definition("Name", NAME_DOC, fmt="name", priority=priority), _name


def _name(obj: Obj) -> str:
    return str(meta(obj).get("name", ""))


def age_column() -> Column:
    return definition("Age", CREATION_TIMESTAMP), age


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def status(obj: Obj) -> Obj:
    return obj.get("status") or {}


# --- times -------------------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time (metav1.Time or MicroTime); None when absent, zero or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return None if parsed.year <= 1 else parsed


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration: two or three significant figures
    (`90s`, `5m3s`, `42m`, `3h20m`, `20h`, `3d4h`, `40d`, `2y30d`, `9y`)."""
    whole = int(seconds)  # Go's int() of a Duration's Seconds() truncates toward zero
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


def since(value: Any, now: datetime | None = None) -> str:
    """translateTimestampSince: how long ago `value` was; `<unknown>` without one."""
    then = parse_time(value)
    if then is None:
        return UNKNOWN
    return human_duration(((now or datetime.now(UTC)) - then).total_seconds())


def age(obj: Obj) -> str:
    return since(meta(obj).get("creationTimestamp"))


def created_at(obj: Obj) -> str:
    """The creation time in RFC 3339, the `Created At` cell of kinds without a printer."""
    created = parse_time(meta(obj).get("creationTimestamp"))
    return created.strftime("%Y-%m-%dT%H:%M:%SZ") if created else "0001-01-01T00:00:00Z"


# --- shared cells --------------------------------------------------------------------------


def format_label_selector(selector: Any) -> str:
    """metav1.FormatLabelSelector: `app=x,tier in (a,b)`; `<none>` when it selects all or
    nothing, `<error>` when it does not parse."""
    try:
        text = str(label_selector_from_dict(selector))
    except SelectorError:
        return "<error>"
    return text or NONE


def format_labels(labels: Mapping[str, Any] | None) -> str:
    """labels.FormatLabels: `k=v` pairs sorted by key; `<none>` when there are none."""
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or NONE


# --- the simpler kinds -----------------------------------------------------------------------


def name_and_age() -> list[Column]:
    """Device classes, claim templates and service accounts print only these."""
    return [name_column(), age_column()]


def _claim_state(claim: Obj) -> str:
    """resourceClaimState: `deleted`, `pending`, `allocated`, `reserved`, comma-joined."""
    states = []
    deleting = bool(meta(claim).get("deletionTimestamp"))
    if deleting:
        states.append("deleted")
    if status(claim).get("allocation") is None:
        if not deleting:
            states.append("pending")
    else:
        states.append("allocated")
        if status(claim).get("reservedFor"):
            states.append("reserved")
    return ",".join(states)


def claim_columns() -> list[Column]:
    return [name_column(), column("resourceclaims", "State", _claim_state), age_column()]


def slice_columns() -> list[Column]:
    return [
        name_column(),
        column("resourceslices", "Node", lambda o: spec(o).get("nodeName") or ""),
        column("resourceslices", "Driver", lambda o: spec(o).get("driver") or ""),
        column("resourceslices", "Pool", lambda o: (spec(o).get("pool") or {}).get("name") or ""),
        age_column(),
    ]


def configmap_columns() -> list[Column]:
    count = lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})  # noqa: E731
    return [name_column(), column("configmaps", "Data", count), age_column()]


def secret_columns() -> list[Column]:
    return [
        name_column(),
        column("secrets", "Type", lambda o: o.get("type") or ""),
        column("secrets", "Data", lambda o: len(o.get("data") or {})),
        age_column(),
    ]


def namespace_columns() -> list[Column]:
    phase = lambda o: status(o).get("phase") or ""  # noqa: E731
    return [name_column(), column("namespaces", "Status", phase), age_column()]


def lease_columns() -> list[Column]:
    holder = lambda o: spec(o).get("holderIdentity") or ""  # noqa: E731
    return [name_column(), column("leases", "Holder", holder), age_column()]


def priority_class_columns() -> list[Column]:
    res = "priorityclasses"
    return [
        name_column(),
        column(res, "Value", lambda o: int(o.get("value") or 0), type_="integer"),
        column(res, "Global-Default", lambda o: bool(o.get("globalDefault")), type_="boolean"),
        age_column(),
        column(res, "PreemptionPolicy", lambda o: o.get("preemptionPolicy") or ""),
    ]


def _subjects(kind: str) -> Cell:
    """rbac.SubjectsStrings: users and groups by name, service accounts `namespace/name`."""

    def cell(binding: Obj) -> str:
        picked = [s for s in binding.get("subjects") or () if s.get("kind") == kind]
        if kind == "ServiceAccount":
            return ", ".join(f"{s.get('namespace', '')}/{s.get('name', '')}" for s in picked)
        return ", ".join(str(s.get("name", "")) for s in picked)

    return cell


def _role_ref(binding: Obj) -> str:
    ref = binding.get("roleRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


def role_binding_columns(resource: str) -> Callable[[], list[Column]]:
    """RoleBindings' and ClusterRoleBindings' (`resource`) columns: the role and subjects."""

    def columns() -> list[Column]:
        return [
            name_column(),
            column(resource, "Role", _role_ref),
            age_column(),
            column(resource, "Users", _subjects("User"), priority=1),
            column(resource, "Groups", _subjects("Group"), priority=1),
            column(resource, "ServiceAccounts", _subjects("ServiceAccount"), priority=1),
        ]

    return columns


def _param_kind(policy: Obj) -> str:
    kind = spec(policy).get("paramKind")
    if not kind:
        return "<unset>"
    return f"{kind.get('apiVersion', '')}/{kind.get('kind', '')}"


def _param_ref(binding: Obj) -> str:
    """printValidatingAdmissionPolicyBinding's ParamRef: `ns/name`, `*/name` or a selector."""
    ref = spec(binding).get("paramRef")
    if not ref:
        return "<unset>"
    if ref.get("name"):
        return f"{ref.get('namespace') or '*'}/{ref['name']}"
    if ref.get("selector") is not None:
        return _selector_string(ref["selector"])
    return "<unset>"


def _selector_string(selector: Obj) -> str:
    """metav1.LabelSelector's generated String() (generated.pb.go), as Go prints the struct."""
    labels = "".join(f"{k}: {v}," for k, v in sorted((selector.get("matchLabels") or {}).items()))
    exprs = "".join(
        f"LabelSelectorRequirement{{Key:{e.get('key', '')},Operator:{e.get('operator', '')},"
        f"Values:[{' '.join(e.get('values') or ())}],}},"
        for e in selector.get("matchExpressions") or ()
    )
    return (f"&LabelSelector{{MatchLabels:map[string]string{{{labels}}},"
            f"MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}")  # fmt: skip


def admission_policy_columns() -> list[Column]:
    res = "validatingadmissionpolicies"
    validations = lambda o: len(spec(o).get("validations") or ())  # noqa: E731
    return [
        name_column(),
        column(res, "Validations", validations, type_="integer"),
        column(res, "ParamKind", _param_kind),
        age_column(),
    ]


def admission_binding_columns() -> list[Column]:
    res = "validatingadmissionpolicybindings"
    return [
        name_column(),
        column(res, "PolicyName", lambda o: spec(o).get("policyName") or ""),
        column(res, "ParamRef", _param_ref),
        age_column(),
    ]


def _served_versions(crd: Obj) -> str:
    served = [f"{v.get('name', '')}{'(storage)' if v.get('storage') else ''}"
              for v in spec(crd).get("versions") or () if v.get("served")]  # fmt: skip
    return ",".join(sorted(served))


def _established(crd: Obj) -> bool:
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in status(crd).get("conditions") or ())  # fmt: skip


def crd_columns() -> list[Column]:
    """CustomResourceDefinitions' (apiextensions-apiserver's customresourcedefinition
    tableconvertor): scope, served versions, and when -o wide group, kind and names."""
    names = lambda o: spec(o).get("names") or {}  # noqa: E731
    return [
        name_column(),
        (definition("Scope", "Cluster/Namespaced"), lambda o: spec(o).get("scope") or ""),
        (definition("Versions", "Served versions"), _served_versions),
        (definition("Created At", CREATION_TIMESTAMP, type_="date"), created_at),
        (definition("Group", "API group", priority=1), lambda o: spec(o).get("group") or ""),
        (definition("Kind", "CustomResource kind", priority=1),
         lambda o: names(o).get("kind") or ""),
        (definition("ShortNames", "Short names", priority=1),
         lambda o: ",".join(names(o).get("shortNames") or ())),
        (definition("Established", "Established status", type_="boolean", priority=1),
         _established),
    ]  # fmt: skip
