"""Built-in objects checked against the Kubernetes JSON schemas of `kubernetes-validate`.

The schemas decide types and required fields. A value Go could not unmarshal is a 400 at
decoding, with Go's `json: cannot unmarshal ...` text; unknown fields are dropped with a
warning (or refused under `fieldValidation=Strict`); the hand-written rules of
`builtin_rules` then add what the schemas cannot express, for a 422.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from sim.apiserver import defaults
from sim.apiserver.builtin_rules import EXTRA_CHECKS, UPDATE_CHECKS
from sim.apiserver.errors import ApiError, Cause, bad_request, invalid
from sim.apiserver.field_errors import (
    INVALID,
    REQUIRED,
    TYPE_INVALID,
    child,
    field_error,
    index,
    required,
)
from sim.apiserver.go_format import go_quote
from sim.apiserver.json_values import json_type, name_of, str_list
from sim.apiserver.schema_nodes import Schema
from sim.apiserver.string_formats import is_base64, is_datetime

_SCHEMA_DIR_RE: Final = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-(local|standalone)$")
_PROBE_FILE: Final = "resourceclaimtemplate-resource-v1.json"
_DEFS_PREFIX: Final = "#/$defs/"
_ANY_JSON_DEFS: Final = frozenset({"io.k8s.apimachinery.pkg.runtime.RawExtension"})
_GO_NAMED: Final = MappingProxyType(
    {
        "io.k8s.apimachinery.pkg.api.resource.Quantity": "resource.Quantity",
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "intstr.IntOrString",
        "io.k8s.apimachinery.pkg.runtime.RawExtension": "runtime.RawExtension",
    }
)
# Schema-required fields the real server does not enforce (Go zero values are accepted).
_REQUIRED_EXEMPT: Final = frozenset(
    {
        ("io.k8s.api.core.v1.Event", "metadata"),
        ("io.k8s.api.core.v1.Event", "involvedObject"),
    }
)
_SAFE_NAME_RE: Final = re.compile(r"[A-Za-z0-9]+")
_QUANTITY: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_QUANTITY_RE: Final = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_INT_RANGES: Final = MappingProxyType(
    {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
)


@dataclass
class _Walk:
    """What one pass over a built-in object found."""

    type_errors: list[tuple[Cause, str]]  # (cause, Go decode message)
    required: list[Cause]
    unknown: list[str]
    unknown_at: list[tuple[dict[str, Any], str]]  # (containing object, key) for stripping


class BuiltinSchemas:
    """Validates built-in objects against the Kubernetes JSON schemas, loaded lazily.

    The non-strict schemas decide types and required fields; unknown fields are reported
    separately because a real server drops them with a warning (or refuses them under
    `fieldValidation=Strict`). Hand-written rules the schemas cannot express follow.
    """

    def __init__(self, schema_dir: Path | None = None) -> None:
        self._dir = schema_dir
        self._defs: dict[str, Any] | None = None
        self._roots: dict[tuple[str, str], tuple[str, Schema] | None] = {}

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

    def _root(self, api_version: str, kind: str) -> tuple[str, Schema] | None:
        key = (api_version, kind)
        if key not in self._roots:
            self._roots[key] = self._load_root(api_version, kind)
        return self._roots[key]

    def _load_root(self, api_version: str, kind: str) -> tuple[str, Schema] | None:
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
            "",
        )
        return def_name or kind, root

    def has_schema(self, api_version: str, kind: str) -> bool:
        return self._root(api_version, kind) is not None

    def _resolve(self, s: Schema) -> tuple[Schema, str | None]:
        ref = s.get("$ref")
        if not isinstance(ref, str):
            return s, None
        name = ref.split(_DEFS_PREFIX, 1)[-1]
        return self._definitions().get(name, {}), name

    # -- public API ---------------------------------------------------------------------

    def validate(self, obj: Mapping[str, Any]) -> list[Cause]:
        """422 causes for a built-in object: schema types/required plus hand-written rules.

        Type mismatches come back as FieldValueTypeInvalid; a real server answers those with
        400 at decoding (see `decode_error`). Kinds without a schema give no causes.
        """
        found = self._walk(obj)
        if found is None:
            return []
        causes = [c for c, _ in found.type_errors] + found.required
        for check in EXTRA_CHECKS.get(_group_kind(obj), ()):
            causes += check(obj)
        return _dedupe(causes)

    def validate_update(self, new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
        """`validate(new)` plus the immutability rules of the update strategies."""
        causes = self.validate(new)
        if self._root(*_api_kind(new)) is None or not isinstance(old, Mapping):
            return causes
        for check in UPDATE_CHECKS.get(_group_kind(new), ()):
            causes += check(new, old)
        return _dedupe(causes)

    def unknown_fields(self, obj: Mapping[str, Any]) -> list[str]:
        """Paths of fields the schema does not know (`spec.template.spec.containers[0].foo`)."""
        found = self._walk(obj)
        return found.unknown if found is not None else []

    def strip_unknown(self, obj: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """A copy without unknown fields, and their paths (the server's default `Warn`)."""
        out = copy.deepcopy(dict(obj))
        found = self._walk(out)
        if found is None:
            return out, []
        for container, key in found.unknown_at:
            container.pop(key, None)
        return out, found.unknown

    def decode_error(self, obj: Mapping[str, Any]) -> ApiError | None:
        """The 400 a real server gives when JSON does not fit the Go types, else None."""
        found = self._walk(obj)
        if found is None or not found.type_errors:
            return None
        api_version, kind = _api_kind(obj)
        version = api_version.rpartition("/")[2]
        return bad_request(
            f"{kind} in version {go_quote(version)} cannot be handled as a "
            f"{kind}: {found.type_errors[0][1]}"
        )

    def decode(
        self, obj: Mapping[str, Any], *, field_validation: str = "Warn"
    ) -> tuple[dict[str, Any], list[str]]:
        """Decoding in the object's own version: a copy without unknown fields and the
        warnings naming them; raises 400 for undecodable types or, under Strict, unknown
        fields."""
        api_version, kind = _api_kind(obj)
        if (error := self.decode_error(obj)) is not None:
            raise error
        stripped, unknown = self.strip_unknown(obj)
        warnings = [f"unknown field {go_quote(p)}" for p in unknown]
        if unknown and field_validation == "Strict":
            version = api_version.rpartition("/")[2]
            raise bad_request(
                f"{kind} in version {go_quote(version)} cannot be handled as a "
                f"{kind}: strict decoding error: {', '.join(warnings)}"
            )
        return stripped, warnings

    def admit(
        self,
        obj: Mapping[str, Any],
        old: Mapping[str, Any] | None = None,
        *,
        field_validation: str = "Warn",
    ) -> tuple[dict[str, Any], list[str]]:
        """Everything the server does before storing a built-in object.

        Returns the object without unknown fields and the warnings to send
        (`unknown field "spec.foo"`); raises 400 for undecodable types or, under Strict,
        unknown fields, and 422 for invalid objects.
        """
        api_version, kind = _api_kind(obj)
        stripped, warnings = self.decode(obj, field_validation=field_validation)
        defaults.apply(api_version.rpartition("/")[0], kind, stripped)
        causes = self.validate(stripped) if old is None else self.validate_update(stripped, old)
        if causes:
            group = api_version.rpartition("/")[0]
            raise invalid(group, kind, name_of(stripped), causes)
        return stripped, (warnings if field_validation == "Warn" else [])

    # -- the schema walk ----------------------------------------------------------------

    def _walk(self, obj: Mapping[str, Any]) -> _Walk | None:
        if not isinstance(obj, Mapping):
            return None
        api_version, kind = _api_kind(obj)
        root = self._root(api_version, kind) if api_version and kind else None
        if root is None:
            return None
        def_name, schema = root
        found = _Walk([], [], [], [])
        short = def_name.rsplit(".", 1)[-1]
        self._node(obj, schema, "", "", short, def_name, found, in_status=False, top=True)
        return found

    def _node(
        self,
        value: Any,
        s: Schema,
        path: str,
        go_path: str,
        struct: str,
        owner: str,
        found: _Walk,
        *,
        in_status: bool,
        top: bool = False,
    ) -> None:
        s, ref = self._resolve(s)
        if ref is not None:
            if ref in _ANY_JSON_DEFS:
                return
            if ref in _GO_NAMED or "oneOf" in s:
                self._one_of(value, s, path, go_path, struct, ref, found)
                return
        if value is None or not s:
            return  # Go decodes null into the zero value
        types = s.get("type")
        types = [types] if isinstance(types, str) else list(types or ())
        types = [t for t in types if t != "null"]
        if not types:
            return
        expected = types[0]
        actual = json_type(value)
        if not self._type_ok(value, actual, expected, s):
            self._type_error(value, actual, s, ref, path, go_path, struct, found)
            return
        if expected == "object":
            self._object(
                value,
                s,
                path,
                go_path,
                struct if ref is None else ref.rsplit(".", 1)[-1],
                ref or owner,
                found,
                in_status=in_status,
                top=top,
            )
        elif expected == "array":
            items = s.get("items")
            if isinstance(items, Mapping):
                for i, item in enumerate(value):
                    self._node(
                        item,
                        items,
                        index(path, i),
                        go_path,
                        struct,
                        owner,
                        found,
                        in_status=in_status,
                    )
        elif expected == "string" and s.get("format") in ("date-time", "byte"):
            self._string_format(value, s, path, go_path, struct, found)

    @staticmethod
    def _type_ok(value: Any, actual: str, expected: str, s: Schema) -> bool:
        if expected == "integer":
            if actual != "integer":
                return False
            low, high = _INT_RANGES.get(s.get("format", "int64"), _INT_RANGES["int64"])
            return low <= value <= high
        if expected == "number":
            return actual in ("integer", "number")
        return actual == expected

    def _object(
        self,
        value: Mapping[str, Any],
        s: Schema,
        path: str,
        go_path: str,
        struct: str,
        owner: str,
        found: _Walk,
        *,
        in_status: bool,
        top: bool,
    ) -> None:
        props = s.get("properties")
        addl = s.get("additionalProperties")
        if isinstance(props, Mapping):
            for key, sub_value in value.items():
                sub = props.get(key)
                where = child(path, key)
                status = in_status or (top and key == "status")
                if sub is not None:
                    self._node(
                        sub_value,
                        sub,
                        where,
                        child(go_path, key),
                        struct,
                        owner,
                        found,
                        in_status=status,
                    )
                elif isinstance(addl, Mapping):
                    self._node(
                        sub_value,
                        addl,
                        where,
                        child(go_path, key),
                        struct,
                        owner,
                        found,
                        in_status=status,
                    )
                elif addl is not True:
                    found.unknown.append(where)
                    if isinstance(value, dict):
                        found.unknown_at.append((value, key))
            if not in_status:
                for key in str_list(s.get("required")):
                    if (top and key == "metadata") or (owner, key) in _REQUIRED_EXEMPT:
                        continue
                    sub = props.get(key) or {}
                    sub_types = sub.get("type")
                    if sub_types and set(
                        [sub_types] if isinstance(sub_types, str) else sub_types
                    ) & {"integer", "boolean"}:
                        continue  # a missing int/bool is Go's zero value, checked by hand if at all
                    if value.get(key) is None:
                        found.required.append(required(child(path, key)))
        elif isinstance(addl, Mapping):
            for key, sub_value in value.items():
                self._node(
                    sub_value,
                    addl,
                    child(path, key),
                    go_path,
                    struct,
                    owner,
                    found,
                    in_status=in_status,
                )

    def _one_of(
        self, value: Any, s: Schema, path: str, go_path: str, struct: str, ref: str, found: _Walk
    ) -> None:
        if value is None:
            return
        actual = json_type(value)
        allowed: set[str] = set()
        for option in s.get("oneOf") or ():
            t = option.get("type")
            allowed.update([t] if isinstance(t, str) else (t or ()))
        ok = actual in allowed or (actual == "integer" and "number" in allowed)
        if not ok:
            self._type_error(value, actual, s, ref, path, go_path, struct, found)
        elif ref == _QUANTITY and isinstance(value, str) and not _QUANTITY_RE.fullmatch(value):
            message = f"quantities must match the regular expression '{_QUANTITY_RE.pattern}'"
            cause = field_error(path, INVALID, value, message)
            found.type_errors.append((cause, message))

    def _string_format(
        self, value: str, s: Schema, path: str, go_path: str, struct: str, found: _Walk
    ) -> None:
        fmt = s.get("format")
        if fmt == "date-time" and not is_datetime(value):
            message = (
                f'parsing time {go_quote(value)} as "2006-01-02T15:04:05Z07:00": cannot '
                f'parse {go_quote(value)} as "2006"'
            )
            found.type_errors.append(
                (
                    field_error(path, TYPE_INVALID, value, f"must be of type date-time: {message}"),
                    message,
                )
            )
        elif fmt == "byte" and not is_base64(value):
            message = "illegal base64 data at input byte 0"
            found.type_errors.append(
                (
                    field_error(path, TYPE_INVALID, value, f"must be of type byte: {message}"),
                    message,
                )
            )

    def _type_error(
        self,
        value: Any,
        actual: str,
        s: Schema,
        ref: str | None,
        path: str,
        go_path: str,
        struct: str,
        found: _Walk,
    ) -> None:
        go_type = self._go_type(s, ref)
        expected = "object" if ref and ref not in _GO_NAMED else _first_type(s)
        detail = f'{path or "."} in body must be of type {expected}: "{actual}"'
        what = {"string": "string", "boolean": "bool", "array": "array", "object": "object"}.get(
            actual, "number"
        )
        if actual in ("integer", "number") and _first_type(s) == "integer":
            what = f"number {value!r}" if isinstance(value, float) else f"number {value}"
        message = (
            f"json: cannot unmarshal {what} into Go struct field "
            f"{struct}.{go_path} of type {go_type}"
        )
        found.type_errors.append((field_error(path, TYPE_INVALID, actual, detail), message))

    def _go_type(self, s: Schema, ref: str | None) -> str:
        if ref is not None:
            if ref in _GO_NAMED:
                return _GO_NAMED[ref]
            parts = ref.split(".")
            return f"{parts[-2]}.{parts[-1]}" if len(parts) > 1 else ref
        t = _first_type(s)
        if t == "integer":
            return s.get("format") or "int"
        if t == "array":
            items = s.get("items")
            if isinstance(items, Mapping):
                inner, inner_ref = self._resolve(items)
                return "[]" + self._go_type(inner, inner_ref)
            return "[]interface {}"
        if t == "object":
            addl = s.get("additionalProperties")
            if isinstance(addl, Mapping):
                inner, inner_ref = self._resolve(addl)
                return "map[string]" + self._go_type(inner, inner_ref)
            return "map[string]interface {}"
        return {"string": "string", "boolean": "bool", "number": "float64"}.get(t, "interface {}")


def _first_type(s: Schema) -> str:
    t = s.get("type")
    types = [t] if isinstance(t, str) else [x for x in (t or ()) if x != "null"]
    return types[0] if types else ""


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
