"""Built-in objects checked against the Kubernetes JSON schemas of `kubernetes-validate`.

jsonschema validates each write once against the kind's schema, compiled for Go's decoding
(see `_Compiler`). A value Go could not unmarshal is a 400 at decoding (`spec.replicas in
body must be of type integer: "string"`); unknown fields are dropped with a warning (or
refused under `fieldValidation=Strict`); missing required fields and the hand-written rules
of `builtin_rules`, which add what the schemas cannot express, are a 422.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from jsonschema import FormatChecker, ValidationError
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from sim.apiserver import defaults
from sim.apiserver.builtin_rules import EXTRA_CHECKS, UPDATE_CHECKS
from sim.apiserver.errors import ApiError, Cause, bad_request, invalid
from sim.apiserver.field_errors import (
    INVALID,
    REQUIRED,
    TYPE_INVALID,
    child,
    field_error,
    required,
)
from sim.apiserver.go_format import go_quote
from sim.apiserver.json_schema import (
    field_path,
    in_walk_order,
    required_keyword,
    validator_class,
    walk_position,
)
from sim.apiserver.json_values import json_copy, json_type, name_of, str_list
from sim.apiserver.schema_nodes import Schema
from sim.apiserver.string_formats import is_base64, is_datetime

_SCHEMA_DIR_RE: Final = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-(local|standalone)$")
_PROBE_FILE: Final = "resourceclaimtemplate-resource-v1.json"
Resolver = Any  # a `referencing` resolver (the package does not export the class)
_DEFS_URI: Final = "https://kubernetes.io/api/_definitions.json"  # the roots' $refs name it
_ANY_JSON_DEFS: Final = frozenset({"io.k8s.apimachinery.pkg.runtime.RawExtension"})
_QUANTITY: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"
# Schema-required fields the real server does not enforce (Go zero values are accepted).
_REQUIRED_EXEMPT: Final = frozenset(
    {
        ("io.k8s.api.core.v1.Event", "metadata"),
        ("io.k8s.api.core.v1.Event", "involvedObject"),
    }
)
_SAFE_NAME_RE: Final = re.compile(r"[A-Za-z0-9]+")
_QUANTITY_RE: Final = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_INT_RANGES: Final = MappingProxyType(
    {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
)


@dataclass
class _Found:
    """What one jsonschema pass over a built-in object found."""

    decode: list[tuple[Cause, str]] = field(default_factory=list)  # (cause, why)
    required: list[tuple[Cause, Mapping[str, Any], str]] = field(default_factory=list)
    unknown: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)

    @property
    def unknown_paths(self) -> list[str]:
        return [path for path, _, _ in self.unknown]

    def missing(self) -> list[Cause]:
        """The required fields still missing (defaulting may have set some since)."""
        return [cause for cause, obj, key in self.required if obj.get(key) is None]


@cache
def _formats() -> FormatChecker:
    """What Go's decoding refuses beyond types: integers out of range, unparseable times,
    base64 and quantities."""
    checker = FormatChecker(formats=())
    for name, (low, high) in _INT_RANGES.items():
        checker.checks(name)(
            lambda v, low=low, high=high: not isinstance(v, int) or low <= v <= high
        )
    for name, check in (
        ("date-time", is_datetime),
        ("byte", is_base64),
        ("quantity", lambda v: _QUANTITY_RE.fullmatch(v) is not None),
    ):
        checker.checks(name)(lambda v, check=check: not isinstance(v, str) or check(v))
    return checker


# A null built-in field is Go's zero value: for `required`, missing.
_Validator: Final = validator_class(
    {"required": required_keyword(lambda obj, name: obj.get(name) is None)}
)


class _Compiler:
    """A kind's schema as jsonschema validates a decoding: every $ref resolved once, through
    a `referencing` registry, into one graph of plain nodes (a write pays no lookups), and
    Go's decoding spelled as keywords: null allowed anywhere (the zero value), unknown
    fields as `additionalProperties: false`, no `required` inside status or for a number
    or bool, integer ranges and the string formats Go parses as `format`s."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, bool], dict[str, Any]] = {}

    def node(
        self, s: Schema, at: Resolver, *, in_status: bool, owner: str, top: bool = False
    ) -> dict[str, Any] | bool:
        """The compiled node; True (which jsonschema skips at once) where anything goes."""
        ref = s.get("$ref")
        if not isinstance(ref, str):
            return self._plain(s, at, in_status=in_status, owner=owner, top=top)
        name = ref.rsplit("/", 1)[-1]
        if name in _ANY_JSON_DEFS:
            return True
        if (name, in_status) in self._done:
            return self._done[(name, in_status)]
        out = self._done[(name, in_status)] = {}  # filled below: definitions recurse
        found = at.lookup(ref)
        if "oneOf" in found.contents:  # Quantity, IntOrString
            allowed = {"null"}
            for option in found.contents.get("oneOf") or ():
                allowed.update(_types(option))
            out["type"] = sorted(allowed)
            if name == _QUANTITY:
                out["format"] = "quantity"
        else:
            plain = self._plain(found.contents, found.resolver, in_status=in_status, owner=name)
            out.update(plain if isinstance(plain, dict) else {})
        return out

    def _plain(
        self, s: Schema, at: Resolver, *, in_status: bool, owner: str, top: bool = False
    ) -> dict[str, Any] | bool:
        types = [t for t in _types(s) if t != "null"]
        if not types:
            return True
        out: dict[str, Any] = {"type": [types[0], "null"]}
        fmt = s.get("format")
        if types[0] == "integer":
            out["format"] = fmt if fmt in _INT_RANGES else "int64"
        elif types[0] == "string" and fmt in ("date-time", "byte"):
            out["format"] = fmt
        elif types[0] == "array" and isinstance(s.get("items"), Mapping):
            out["items"] = self.node(s["items"], at, in_status=in_status, owner=owner)
        elif types[0] == "object":
            props, addl = s.get("properties"), s.get("additionalProperties")
            if isinstance(props, Mapping):
                out["properties"] = {
                    k: self.node(v, at, in_status=in_status or (top and k == "status"), owner=owner)
                    for k, v in props.items()
                    if isinstance(v, Mapping)
                }
                names = [
                    k
                    for k in str_list(s.get("required"))
                    if not ((top and k == "metadata") or (owner, k) in _REQUIRED_EXEMPT)
                    and not set(_types(props.get(k) or {})) & {"integer", "boolean"}
                ]
                if names and not in_status:
                    out["required"] = names
            if isinstance(addl, Mapping):
                out["additionalProperties"] = self.node(addl, at, in_status=in_status, owner=owner)
            elif isinstance(props, Mapping) and addl is not True:
                out["additionalProperties"] = False
        return out


class BuiltinSchemas:
    """Validates built-in objects against the Kubernetes JSON schemas, each kind compiled
    for jsonschema on first use.

    One pass finds what Go cannot decode (a 400), the unknown fields a real server drops
    with a warning (or refuses under `fieldValidation=Strict`) and the missing required
    fields; the hand-written rules the schemas cannot express follow.
    """

    def __init__(self, schema_dir: Path | None = None) -> None:
        self._dir = schema_dir
        self._defs: dict[str, Any] | None = None
        self._kinds: dict[tuple[str, str], Validator | None] = {}

    # -- loading ------------------------------------------------------------------------

    @property
    def schema_dir(self) -> Path:
        """The newest non-strict schema directory that knows resource.k8s.io/v1."""
        if self._dir is None:
            base = Path(str(resources.files("kubernetes_validate") / "kubernetes-json-schema"))
            found = []
            for entry in base.iterdir():
                m = _SCHEMA_DIR_RE.match(entry.name)
                if m and (entry / _PROBE_FILE).is_file():
                    found.append(
                        (tuple(int(x) for x in m.groups()[:3]), m.group(4) == "local", entry)
                    )
            if not found:
                raise FileNotFoundError(
                    f"no kubernetes-validate schema directory with {_PROBE_FILE} under {base}"
                )
            self._dir = max(found)[2]
        return self._dir

    @property
    def kubernetes_version(self) -> str:
        m = _SCHEMA_DIR_RE.match(self.schema_dir.name)
        return f"{m.group(1)}.{m.group(2)}" if m else ""

    def _definitions(self) -> dict[str, Any]:
        if self._defs is None:
            path = self.schema_dir / "_definitions.json"
            if path.is_file():
                data = json.loads(path.read_text(encoding="utf-8"))
                self._defs = data.get("$defs") or data.get("definitions") or {}
            else:
                self._defs = {}
        return self._defs

    def _validator(self, api_version: str, kind: str) -> Validator | None:
        """The kind's compiled schema, built on first use; None for kinds without one."""
        if (api_version, kind) not in self._kinds:
            self._kinds[(api_version, kind)] = self._compile(api_version, kind)
        return self._kinds[(api_version, kind)]

    def _compile(self, api_version: str, kind: str) -> Validator | None:
        group, _, version = api_version.rpartition("/")
        if not (
            _SAFE_NAME_RE.fullmatch(kind)
            and _SAFE_NAME_RE.fullmatch(version)
            and re.fullmatch(r"[a-z0-9.-]*", group)
        ):
            return None
        prefix = f"-{group.split('.')[0]}" if group else ""
        path = self.schema_dir / f"{kind.lower()}{prefix}-{version}.json"
        if not path.is_file():
            return None
        root = json.loads(path.read_text(encoding="utf-8"))
        gvks = root.get("x-kubernetes-group-version-kind") or []
        if not any(
            g.get("group", "") == group and g.get("version") == version and g.get("kind") == kind
            for g in gvks
        ):
            return None
        def_name = next(
            (
                n
                for n, d in self._definitions().items()
                if d.get("x-kubernetes-group-version-kind") == gvks
            ),
            kind,
        )
        defs = DRAFT202012.create_resource({"$id": _DEFS_URI, "$defs": self._definitions()})
        at = Registry().with_resource(_DEFS_URI, defs).resolver(str(root.get("$id", _DEFS_URI)))
        compiled = _Compiler().node(root, at, in_status=False, owner=def_name, top=True)
        return _Validator(compiled, format_checker=_formats())

    def has_schema(self, api_version: str, kind: str) -> bool:
        return self._validator(api_version, kind) is not None

    def _kind(self, obj: Mapping[str, Any]) -> Validator | None:
        return self._validator(*_api_kind(obj)) if isinstance(obj, Mapping) else None

    # -- public API ---------------------------------------------------------------------

    def validate(self, obj: Mapping[str, Any]) -> list[Cause]:
        """422 causes for a built-in object: schema types/required plus hand-written rules.

        Type mismatches come back as FieldValueTypeInvalid; a real server answers those with
        400 at decoding (see `decode_error`). Kinds without a schema give no causes.
        """
        found = self._check(obj)
        if found is None:
            return []
        return self._rules(obj, [c for c, _ in found.decode] + found.missing())

    def _rules(self, obj: Mapping[str, Any], causes: list[Cause]) -> list[Cause]:
        for check in EXTRA_CHECKS.get(_group_kind(obj), ()):
            causes += check(obj)
        return _dedupe(causes)

    def validate_update(self, new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
        """`validate(new)` plus the immutability rules of the update strategies."""
        causes = self.validate(new)
        if self._kind(new) is None or not isinstance(old, Mapping):
            return causes
        return self._update_rules(new, old, causes)

    @staticmethod
    def _update_rules(
        new: Mapping[str, Any], old: Mapping[str, Any], causes: list[Cause]
    ) -> list[Cause]:
        for check in UPDATE_CHECKS.get(_group_kind(new), ()):
            causes += check(new, old)
        return _dedupe(causes)

    def unknown_fields(self, obj: Mapping[str, Any]) -> list[str]:
        """Paths of fields the schema does not know (`spec.template.spec.containers[0].foo`)."""
        found = self._check(obj)
        return found.unknown_paths if found is not None else []

    def decode_error(self, obj: Mapping[str, Any]) -> ApiError | None:
        """The 400 a real server gives when JSON does not fit the Go types, else None."""
        found = self._check(obj)
        return _decode_error(obj, found) if found is not None else None

    def decode(
        self, obj: Mapping[str, Any], *, field_validation: str = "Warn"
    ) -> tuple[dict[str, Any], list[str]]:
        """Decoding in the object's own version: a copy without unknown fields and the
        warnings naming them; raises 400 for undecodable types or, under Strict, unknown
        fields."""
        stripped, warnings, _ = self._decode(obj, field_validation)
        return stripped, warnings

    def _decode(
        self, obj: Mapping[str, Any], field_validation: str
    ) -> tuple[dict[str, Any], list[str], _Found | None]:
        out = json_copy(dict(obj))
        found = self._check(out)
        if found is None:
            return out, [], None
        if (error := _decode_error(out, found)) is not None:
            raise error
        for _, container, key in found.unknown:
            container.pop(key, None)
        warnings = [f"unknown field {go_quote(p)}" for p in found.unknown_paths]
        if warnings and field_validation == "Strict":
            api_version, kind = _api_kind(obj)
            raise bad_request(
                f"{kind} in version {go_quote(api_version.rpartition('/')[2])} cannot be "
                f"handled as a {kind}: strict decoding error: {', '.join(warnings)}"
            )
        return out, warnings, found

    def admit(
        self,
        obj: Mapping[str, Any],
        old: Mapping[str, Any] | None = None,
        *,
        field_validation: str = "Warn",
    ) -> tuple[dict[str, Any], list[str]]:
        """Everything the server does before storing a built-in object, in one pass of the
        schema: returns the object without unknown fields and the warnings to send
        (`unknown field "spec.foo"`); raises 400 for undecodable types or, under Strict,
        unknown fields, and 422 for invalid objects.
        """
        api_version, kind = _api_kind(obj)
        stripped, warnings, found = self._decode(obj, field_validation)
        group = api_version.rpartition("/")[0]
        defaults.apply(group, kind, stripped)
        if found is not None:
            causes = self._rules(stripped, found.missing())
            if old is not None and isinstance(old, Mapping):
                causes = self._update_rules(stripped, old, causes)
            if causes:
                raise invalid(group, kind, name_of(stripped), causes)
        return stripped, (warnings if field_validation == "Warn" else [])

    # -- jsonschema's findings as Go's decoding and kube-apiserver report them ----------

    def _check(self, obj: Mapping[str, Any]) -> _Found | None:
        """One validation of `obj`; unknown fields are reported with their containers in
        `obj`, to strip them there."""
        validator = self._kind(obj)
        if validator is None:
            return None
        found, unknown = _Found(), []
        for error in in_walk_order(validator.iter_errors(obj), obj):
            path = field_path(error)
            if error.validator == "additionalProperties":
                known = error.schema.get("properties") or {}
                unknown += [
                    (walk_position(obj, [*error.path, k]), child(path, k), error.instance, k)
                    for k in error.instance
                    if k not in known
                ]
            elif error.validator == "required":
                found.required.append((required(path), error.instance, error.below[-1]))
            else:
                found.decode.append(_type_error(error, path))
        unknown.sort(key=lambda u: u[0])  # in the order of the walk, not by object
        found.unknown = [u[1:] for u in unknown]
        return found


def _type_error(error: ValidationError, path: str) -> tuple[Cause, str]:
    """A value Go cannot decode into the field's type (or, for a `format`, parse): the
    cause `validate` reports, and why, for the 400 of decoding."""
    value, limit, name = error.instance, error.validator_value, path or "."
    if error.validator == "type":
        actual = json_type(value)
        expected = ",".join(t for t in limit if t != "null")
        why = f'{name} in body must be of type {expected}: "{actual}"'
        return field_error(path, TYPE_INVALID, actual, why), why
    if limit == "quantity":  # resource.ParseQuantity's error
        why = f"quantities must match the regular expression '{_QUANTITY_RE.pattern}'"
        return field_error(path, INVALID, value, why), why
    shown = go_quote(value) if isinstance(value, str) else value
    why = f"{name} in body must be of type {limit}: {shown}"
    return field_error(path, TYPE_INVALID, value, why), why


def _types(s: Schema) -> list[str]:
    t = s.get("type")
    return [t] if isinstance(t, str) else str_list(t)


def _decode_error(obj: Mapping[str, Any], found: _Found) -> ApiError | None:
    """The 400 of the first value Go could not decode, if any."""
    if not found.decode:
        return None
    api_version, kind = _api_kind(obj)
    version = api_version.rpartition("/")[2]
    return bad_request(
        f"{kind} in version {go_quote(version)} cannot be handled as a {kind}: {found.decode[0][1]}"
    )


def _api_kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    api_version = obj.get("apiVersion") if isinstance(obj, Mapping) else None
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    return (
        api_version if isinstance(api_version, str) else "",
        kind if isinstance(kind, str) else "",
    )


def _group_kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    api_version, kind = _api_kind(obj)
    return api_version.rpartition("/")[0], kind


def _dedupe(causes: list[Cause]) -> list[Cause]:
    seen: set[tuple[str, str]] = set()
    out = []
    for cause in causes:
        if cause.reason == REQUIRED and (cause.field, REQUIRED) in seen:
            continue
        seen.add((cause.field, cause.reason))
        out.append(cause)
    return out
