"""Field selectors, parsed and matched as kube-apiserver does.

A port of k8s.io/apimachinery `fields.ParseSelector`, down to its error texts, with the field
labels each built-in resource supports, so that a selector a client gets wrong fails here with
the message `kubectl` would show against a real cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sim.apiserver.errors import bad_request
from sim.apiserver.go_format import go_quote
from sim.apiserver.label_selectors import SelectorError

__all__ = [
    "BUILTIN_GROUPS",
    "SUPPORTED_FIELDS",
    "FieldRequirement",
    "FieldSelector",
    "SelectorError",
    "check_fields",
    "field_value",
    "parse_field_selector",
]


# --- field selectors (fields/selector.go) ----------------------------------------------------


@dataclass(frozen=True)
class FieldRequirement:
    """`field=value` (operator "=", also for "==") or `field!=value`."""

    field: str
    operator: str
    value: str

    def __str__(self) -> str:
        return f"{self.field}{self.operator}{_escape_value(self.value)}"


def _escape_value(s: str) -> str:
    return s.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _unescape_value(s: str) -> str:
    if not any(c in s for c in "\\,="):
        return s
    out: list[str] = []
    in_slash = False
    for c in s:
        if in_slash:
            if c not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{c}")
            out.append(c)
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c in ",=":
            # Go prints the rune with %v, i.e. as its code point.
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(c)}")
        else:
            out.append(c)
    if in_slash:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not backslash-escaped; escapes stay in the terms."""
    if not text:
        return []
    terms: list[str] = []
    start, in_slash = 0, False
    for i, c in enumerate(text):
        if in_slash:
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """The first `!=`, `==` or `=` splits; the left side has no escaping."""
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


@dataclass(frozen=True)
class FieldSelector:
    """An AND of field terms, sorted as the real parser sorts them."""

    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(r.field for r in self.requirements)

    def only_field(self, path: str) -> str | None:
        """The value when the selector is exactly `path=value` (for indexed lookups)."""
        if len(self.requirements) == 1:
            (r,) = self.requirements
            if r.field == path and r.operator == "=":
                return r.value
        return None

    def matches(self, obj: Mapping[str, Any], kind: str | None = None) -> bool:
        """Whether `obj` (a JSON object) has these field values; missing fields are ""."""
        for r in self.requirements:
            have = field_value(obj, r.field, kind)
            if (have == r.value) != (r.operator == "="):
                return False
        return True

    def renamed(self, renames: Mapping[str, str]) -> FieldSelector:
        """The selector with field labels renamed (the server's legacy aliases)."""
        return FieldSelector(
            tuple(
                FieldRequirement(renames.get(r.field, r.field), r.operator, r.value)
                for r in self.requirements
            )
        )

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def parse_field_selector(text: str) -> FieldSelector:
    """fields.ParseSelector: the `fieldSelector` query parameter, `--field-selector` syntax."""
    requirements: list[FieldRequirement] = []
    for part in sorted(_split_terms(text)):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        lhs, op, rhs = split
        requirements.append(
            FieldRequirement(lhs, "!=" if op == "!=" else "=", _unescape_value(rhs))
        )
    return FieldSelector(tuple(requirements))


def _format_field(value: Any) -> str:
    """A field's value as the server's field set holds it: strings as is, bools and numbers
    spelled as Go formats them, anything else (absent, lists, objects) as ""."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return ""


def _lookup(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def field_value(obj: Mapping[str, Any], path: str, kind: str | None = None) -> str:
    """The value a field selector compares for `path`, as the server's `ToSelectableFields`
    computes it: mostly the JSON value at the dotted path, with the few derived values of
    Pods, Nodes, Jobs and Events. `kind` defaults to the object's own `kind`."""
    kind = kind if kind is not None else obj.get("kind")
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    if path in ("spec.hostNetwork", "spec.unschedulable") and kind in (None, "Pod", "Node"):
        return _format_field(bool(_lookup(obj, path)))
    if path == "status.podIP" and kind in (None, "Pod"):
        ips = status.get("podIPs")
        if isinstance(ips, list) and ips and isinstance(ips[0], Mapping):
            return _format_field(ips[0].get("ip"))
        return _format_field(status.get("podIP"))
    if path == "status.successful" and kind in (None, "Job"):
        return _format_field(status.get("succeeded") or 0)
    if path == "source" and kind in (None, "Event"):
        source = obj.get("source")
        component = source.get("component") if isinstance(source, Mapping) else None
        return _format_field(component or obj.get("reportingComponent"))
    return _format_field(_lookup(obj, path))


# --- which field labels each resource supports -----------------------------------------------

_POD_FIELDS = frozenset(
    {
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
        "status.nominatedNodeName",
    }
)  # fmt: skip
_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
        "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
        "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
    }
)  # fmt: skip

SUPPORTED_FIELDS: Mapping[tuple[str, str], frozenset[str]] = MappingProxyType(
    {
        ("", "pods"): _POD_FIELDS,
        ("", "events"): _EVENT_FIELDS,
        ("", "nodes"): frozenset({"spec.unschedulable"}),
        ("", "namespaces"): frozenset({"status.phase"}),
        ("", "secrets"): frozenset({"type"}),
        ("", "services"): frozenset({"spec.clusterIP", "spec.type"}),
        ("resource.k8s.io", "resourceslices"): frozenset({"spec.nodeName", "spec.driver"}),
        ("batch", "jobs"): frozenset({"status.successful"}),
    }
)
"""Field labels beyond metadata.name and metadata.namespace, by (API group, resource)."""

# Cluster-scoped kinds whose conversion function lists metadata.name but not
# metadata.namespace; every other built-in resource accepts both.
_NO_NAMESPACE_FIELD = frozenset(
    {("", "nodes"), ("", "namespaces"), ("resource.k8s.io", "resourceslices")}
)
_LEGACY_ALIASES = MappingProxyType({("", "pods"): MappingProxyType({"spec.host": "spec.nodeName"})})

BUILTIN_GROUPS = frozenset(
    {
        "", "apps", "batch", "policy", "autoscaling", "coordination.k8s.io", "events.k8s.io",
        "rbac.authorization.k8s.io", "resource.k8s.io", "apiextensions.k8s.io",
        "networking.k8s.io", "storage.k8s.io", "scheduling.k8s.io", "node.k8s.io",
        "discovery.k8s.io", "admissionregistration.k8s.io", "certificates.k8s.io",
        "authentication.k8s.io", "authorization.k8s.io", "apiregistration.k8s.io",
        "flowcontrol.apiserver.k8s.io", "internal.apiserver.k8s.io", "storagemigration.k8s.io",
    }
)  # fmt: skip
"""API groups served by kube-apiserver itself; any other group is a custom resource's."""


def _unsupported_message(group: str, resource: str, label: str, version: str) -> str:
    """The error text of the resource's field label conversion function."""
    key = (group, resource)
    if key == ("batch", "jobs"):
        return f"field label {go_quote(label)} not supported for batchv1.Job"
    if key == ("resource.k8s.io", "resourceslices"):
        return (
            f"field label not supported for resource.k8s.io/{version}, Kind=ResourceSlice: {label}"
        )
    if key in SUPPORTED_FIELDS:
        return f"field label not supported: {label}"
    return (
        f'{go_quote(label)} is not a known field selector: only "metadata.name", '
        '"metadata.namespace"'
    )


def check_fields(
    group: str,
    resource: str,
    selector: FieldSelector,
    *,
    namespaced: bool = True,
    version: str = "v1",
    custom_fields: Iterable[str] = (),
) -> FieldSelector:
    """Refuse field labels the real server would refuse for this resource, with its 400.

    Custom resources (a group outside BUILTIN_GROUPS) support metadata.name, metadata.namespace
    when namespaced, and the CRD's `selectableFields` passed as `custom_fields`. Returns the
    selector with legacy aliases (a Pod's `spec.host`) renamed to the fields they stand for.
    """
    key = (group, resource)
    custom = group not in BUILTIN_GROUPS
    aliases: Mapping[str, str] = {} if custom else _LEGACY_ALIASES.get(key, {})
    allowed = {"metadata.name", *aliases}
    allowed.update(custom_fields if custom else SUPPORTED_FIELDS.get(key, ()))
    if namespaced if custom else key not in _NO_NAMESPACE_FIELD:
        allowed.add("metadata.namespace")
    for r in selector.requirements:  # the first refused term is the one reported
        if r.field not in allowed:
            if custom:
                raise bad_request(f"field label not supported: {r.field}")
            raise bad_request(_unsupported_message(group, resource, r.field, version))
    return selector.renamed(aliases) if aliases else selector
