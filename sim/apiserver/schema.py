"""What kube-apiserver does with CRD schemas and with built-in objects before it stores them.

Custom resources: prune unknown fields, drop non-nullable nulls, apply defaults, validate the
structural schema (types, enums, bounds, formats, list-type sets and maps), then evaluate
`x-kubernetes-validations` (transition rules on update), with validation ratcheting on update.
Built-in objects: the Kubernetes JSON schemas shipped in `kubernetes-validate` for types and
required fields, plus a small table of the hand-written rules that matter to this project
(names, pod templates, DaemonSet selectors, DRA requests and allocations, RBAC, leases).

Every error is a `Cause` whose field path, reason and message follow the real server's
`field.Error` (`spec.numNodes: Invalid value: -1: spec.numNodes in body should be greater than
or equal to 0`), so clients and tests see the same 422s as against a cluster.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import ipaddress
import json
import math
import re
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any, Final

from sim.apiserver.errors import ApiError, Cause, bad_request, invalid

JSON = Any
Schema = Mapping[str, Any]

# --------------------------------------------------------------------------------------
# field.Error as Go renders it
# --------------------------------------------------------------------------------------

REQUIRED: Final = "FieldValueRequired"
INVALID: Final = "FieldValueInvalid"
TYPE_INVALID: Final = "FieldValueTypeInvalid"
NOT_SUPPORTED: Final = "FieldValueNotSupported"
DUPLICATE: Final = "FieldValueDuplicate"
FORBIDDEN: Final = "FieldValueForbidden"
TOO_LONG: Final = "FieldValueTooLong"
TOO_MANY: Final = "FieldValueTooMany"
NOT_FOUND: Final = "FieldValueNotFound"

_TYPE_TEXT: Final = {
    NOT_FOUND: "Not found",
    REQUIRED: "Required value",
    DUPLICATE: "Duplicate value",
    INVALID: "Invalid value",
    NOT_SUPPORTED: "Unsupported value",
    FORBIDDEN: "Forbidden",
    TOO_LONG: "Too long",
    TOO_MANY: "Too many",
    TYPE_INVALID: "Invalid value",
}
# ErrorBody() never prints the bad value for these.
_NO_VALUE: Final = frozenset({REQUIRED, FORBIDDEN, TOO_LONG})


class GoRepr(str):
    """A bad value already rendered the way Go's `%#v` prints it (structs, typed maps)."""


_OMIT: Final = object()  # field.Error's omitValue: print only the error type
_ABSENT: Final = object()  # "no such field" (distinct from JSON null)


def _go_quote(text: str) -> str:
    """Go's %q: double quotes, Go escapes, printable Unicode kept."""
    out = ['"']
    escapes = {
        '"': '\\"',
        "\\": "\\\\",
        "\n": "\\n",
        "\t": "\\t",
        "\r": "\\r",
        "\a": "\\a",
        "\b": "\\b",
        "\f": "\\f",
        "\v": "\\v",
    }
    for ch in text:
        code = ord(ch)
        if ch in escapes:
            out.append(escapes[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif not ch.isprintable():
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _go_float(value: float) -> str:
    """Go's %v for float64 (strconv 'g', shortest): exponent form below 1e-4 and from 1e+06."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    sign, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    exp = len(digits) - 1 + int(exponent)
    prefix = "-" if sign else ""
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    point = exp + 1
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return prefix + digits + "0" * (point - len(digits))
    return f"{prefix}{digits[:point]}.{digits[point:]}"


def go_repr(value: JSON) -> str:
    """Go's %#v of a decoded JSON value (`map[string]interface {}{"name":"n1"}`)."""
    if isinstance(value, GoRepr):
        return str(value)
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_quote(value)
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_go_quote(str(k))}:{go_repr(value[k])}" for k in sorted(value))
        return f"map[string]interface {{}}{{{inner}}}"
    if isinstance(value, list | tuple):
        return f"[]interface {{}}{{{', '.join(go_repr(v) for v in value)}}}"
    return repr(value)


def _string_map_repr(value: Any) -> GoRepr:
    """%#v of a Go map[string]string (labels), nil when absent."""
    if not isinstance(value, Mapping):
        return GoRepr("map[string]string(nil)")
    inner = ", ".join(f"{_go_quote(str(k))}:{_go_quote(str(value[k]))}" for k in sorted(value))
    return GoRepr(f"map[string]string{{{inner}}}")


def _value_text(value: Any) -> str:
    if value is None:
        return '"null"'
    if isinstance(value, GoRepr):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_quote(value)
    return go_repr(value)


def field_error(path: str, reason: str, value: Any = _OMIT, detail: str = "") -> Cause:
    """One `field.Error`: the message is Go's `ErrorBody()` (type, bad value, detail)."""
    body = _TYPE_TEXT[reason]
    if reason not in _NO_VALUE and value is not _OMIT:
        body = f"{body}: {_value_text(value)}"
    if detail:
        body = f"{body}: {detail}"
    return Cause(path or "<nil>", reason, body)


def required(path: str, detail: str = "") -> Cause:
    return field_error(path, REQUIRED, detail=detail)


def invalid_value(path: str, value: Any, detail: str) -> Cause:
    return field_error(path, INVALID, value, detail)


def not_supported(path: str, value: Any, supported: Iterable[str]) -> Cause:
    quoted = ", ".join(_go_quote(s) for s in supported)
    return field_error(path, NOT_SUPPORTED, value, f"supported values: {quoted}" if quoted else "")


def duplicate(path: str, value: Any) -> Cause:
    return field_error(path, DUPLICATE, value)


def forbidden(path: str, detail: str) -> Cause:
    return field_error(path, FORBIDDEN, detail=detail)


def too_long(path: str, max_length: int) -> Cause:
    unit = "byte" if max_length == 1 else "bytes"
    return field_error(path, TOO_LONG, detail=f"may not be more than {max_length} {unit}")


def too_many(path: str, actual: int, maximum: int) -> Cause:
    unit = "item" if maximum == 1 else "items"
    return field_error(path, TOO_MANY, actual, f"must have at most {maximum} {unit}")


def not_found(path: str, value: Any, detail: str = "") -> Cause:
    return field_error(path, NOT_FOUND, value, detail)


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _index(path: str, i: int | str) -> str:
    return f"{path}[{i}]"


# --------------------------------------------------------------------------------------
# apimachinery name and label rules
# --------------------------------------------------------------------------------------

_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1035_LABEL_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT: Final = "(" + _QUALIFIED_NAME_FMT + ")?"
_DNS1123_LABEL_RE: Final = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE: Final = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL_RE: Final = re.compile(_DNS1035_LABEL_FMT)
_QUALIFIED_NAME_RE: Final = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE_RE: Final = re.compile(_LABEL_VALUE_FMT)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len_error(n: int) -> str:
    return f"must be no more than {n} characters"


def dns1123_label_problems(value: str) -> list[str]:
    """`validation.IsDNS1123Label`."""
    errs = []
    if len(value) > 63:
        errs.append(_max_len_error(63))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            errs.append("must not contain dots")
        else:
            errs.append(
                _regex_error(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                    "or '-', and must start and end with an alphanumeric character",
                    _DNS1123_LABEL_FMT,
                    "my-name",
                    "123-abc",
                )
            )
    return errs


def dns1123_subdomain_problems(value: str) -> list[str]:
    """`validation.IsDNS1123Subdomain`."""
    errs = []
    if len(value) > 253:
        errs.append(_max_len_error(253))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errs


def dns1035_label_problems(value: str) -> list[str]:
    """`validation.IsDNS1035Label`."""
    errs = []
    if len(value) > 63:
        errs.append(_max_len_error(63))
    if not _DNS1035_LABEL_RE.fullmatch(value):
        errs.append(
            _regex_error(
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
                "with an alphabetic character, and end with an alphanumeric character",
                _DNS1035_LABEL_FMT,
                "my-name",
                "abc-123",
            )
        )
    return errs


def path_segment_problems(value: str) -> list[str]:
    """`IsValidPathSegmentName`: what RBAC objects allow as names (`system:controller:x`)."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


def qualified_name_problems(value: str) -> list[str]:
    """`validation.IsQualifiedName`: label keys, annotation keys, finalizers."""
    errs: list[str] = []
    parts = value.split("/")
    msg = (
        "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
        "with an alphanumeric character"
    )
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain_problems(prefix)]
    else:
        return [
            "a qualified name "
            + _regex_error(msg, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len_error(63))
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append(
            "name part " + _regex_error(msg, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_problems(value: str) -> list[str]:
    """`validation.IsValidLabelValue`."""
    errs = []
    if len(value) > 63:
        errs.append(_max_len_error(63))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, '-', "
                "'_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


NameRule = Callable[[str], list[str]]
NAME_RULES: Final[Mapping[str, NameRule]] = {
    "dns-subdomain": dns1123_subdomain_problems,
    "dns-label": dns1123_label_problems,
    "dns1035-label": dns1035_label_problems,
    "path-segment": path_segment_problems,
}


def _mask_trailing_dash(name: str) -> str:
    return name[:-1] + "a" if len(name) > 1 and name.endswith("-") else name


def _labels(labels: Any, path: str) -> list[Cause]:
    if not isinstance(labels, Mapping):
        return []
    out = []
    for key in sorted(labels, key=str):
        out += [invalid_value(path, key, m) for m in qualified_name_problems(str(key))]
        value = labels[key]
        if isinstance(value, str):
            out += [invalid_value(path, value, m) for m in label_value_problems(value)]
    return out


def _annotations(annotations: Any, path: str) -> list[Cause]:
    if not isinstance(annotations, Mapping):
        return []
    out = []
    for key in sorted(annotations, key=str):
        out += [invalid_value(path, key, m) for m in qualified_name_problems(str(key).lower())]
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > 256 * 1024:
        out.append(too_long(path, 256 * 1024))
    return out


def validate_object_meta(
    meta: Any,
    *,
    name_rule: str = "dns-subdomain",
    namespaced: bool | None = None,
    path: str = "metadata",
) -> list[Cause]:
    """`ValidateObjectMeta`: name/generateName format, labels, annotations, owners, finalizers.

    `name_rule` is one of NAME_RULES; `namespaced` None leaves the namespace to the caller.
    """
    if not isinstance(meta, Mapping):
        return [required(_child(path, "name"), "name or generateName is required")]
    check = NAME_RULES[name_rule]
    out: list[Cause] = []
    generate = meta.get("generateName")
    if isinstance(generate, str) and generate:
        out += [
            invalid_value(_child(path, "generateName"), generate, m)
            for m in check(_mask_trailing_dash(generate))
        ]
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        out.append(required(_child(path, "name"), "name or generateName is required"))
    else:
        out += [invalid_value(_child(path, "name"), name, m) for m in check(name)]
    namespace = meta.get("namespace")
    if namespaced is True:
        if not namespace:
            out.append(required(_child(path, "namespace")))
        elif isinstance(namespace, str):
            out += [
                invalid_value(_child(path, "namespace"), namespace, m)
                for m in dns1123_label_problems(namespace)
            ]
    elif namespaced is False and namespace:
        out.append(forbidden(_child(path, "namespace"), "not allowed on this type"))
    generation = meta.get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool) and generation < 0:
        out.append(
            invalid_value(
                _child(path, "generation"), generation, "must be greater than or equal to 0"
            )
        )
    out += _labels(meta.get("labels"), _child(path, "labels"))
    out += _annotations(meta.get("annotations"), _child(path, "annotations"))
    owners = meta.get("ownerReferences")
    if isinstance(owners, list):
        owner_path = _child(path, "ownerReferences")
        controllers = 0
        for ref in owners:
            if not isinstance(ref, Mapping):
                continue
            api_version = ref.get("apiVersion") or ""
            version = api_version.rsplit("/", 1)[-1] if isinstance(api_version, str) else ""
            for key, detail, ok in (
                ("apiVersion", "version must not be empty", bool(version)),
                ("kind", "kind must not be empty", bool(ref.get("kind"))),
                ("name", "name must not be empty", bool(ref.get("name"))),
                ("uid", "uid must not be empty", bool(ref.get("uid"))),
            ):
                if not ok:
                    out.append(invalid_value(_child(owner_path, key), ref.get(key) or "", detail))
            controllers += ref.get("controller") is True
        if controllers > 1:
            out.append(
                invalid_value(
                    owner_path,
                    GoRepr("[]v1.OwnerReference{...}"),
                    "Only one reference can have Controller set to true",
                )
            )
    finalizers = meta.get("finalizers")
    if isinstance(finalizers, list):
        for fin in finalizers:
            if isinstance(fin, str):
                out += [
                    invalid_value(_child(path, "finalizers"), fin, m)
                    for m in qualified_name_problems(fin)
                ]
    return out


# --------------------------------------------------------------------------------------
# JSON helpers
# --------------------------------------------------------------------------------------


def _json_type(value: JSON) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return "null" if value is None else type(value).__name__


def _json_equal(a: JSON, b: JSON) -> bool:
    """Deep JSON equality that, unlike ==, keeps true and 1 apart."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping):
        return (
            isinstance(b, Mapping)
            and a.keys() == b.keys()
            and all(_json_equal(a[k], b[k]) for k in a)
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _canonical(value: JSON) -> str:
    """A hashable identity for uniqueness checks (sets, list-map keys)."""
    return json.dumps(value, sort_keys=True, default=repr, allow_nan=True) + _json_type(value)


def _name_of(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


# --------------------------------------------------------------------------------------
# CRD structural schemas
# --------------------------------------------------------------------------------------

_SUPPORTED_RULES: Final = frozenset({"self==oldSelf", "oldSelf==self"})
_RULE_REASONS: Final = (
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
)
_ROOT_META: Final = frozenset({"apiVersion", "kind", "metadata"})
_SCHEMA_TYPES: Final = ("array", "boolean", "integer", "number", "object", "string")
_BLOCKING: Final = frozenset({NOT_SUPPORTED, REQUIRED, TOO_LONG, TOO_MANY, TYPE_INVALID})
_RULES_NOT_CHECKED: Final = (
    "some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation"
)
FIELD_VALIDATION: Final = ("Ignore", "Warn", "Strict")


def rule_problem(rule: Any) -> str | None:
    """Why the emulator cannot evaluate an `x-kubernetes-validations` entry, or None.

    Without a CEL implementation only `self == oldSelf` (immutability, the rule this
    project's CRDs use) is evaluated; anything else must be refused, never ignored.
    """
    if not isinstance(rule, Mapping):
        return "must be an object"
    text = rule.get("rule")
    if not isinstance(text, str) or not text.strip():
        return "rule must not be empty"
    if "".join(text.split()) not in _SUPPORTED_RULES:
        return (
            "rule is not supported by this API server emulator (no CEL evaluator is "
            'installed; only "self == oldSelf" can be evaluated)'
        )
    if rule.get("messageExpression"):
        return "messageExpression is not supported by this API server emulator"
    if rule.get("optionalOldSelf"):
        return "optionalOldSelf is not supported by this API server emulator"
    return None


def _rule_field_path(field_path: str) -> list[str] | None:
    """`.a.b` or `['a'].b` into property names; None if malformed."""
    parts: list[str] = []
    rest = field_path
    while rest:
        m = re.match(r"\.([A-Za-z_][A-Za-z0-9_-]*)", rest) or re.match(r"\['([^']*)'\]", rest)
        if m:
            parts.append(m.group(1))
        else:
            return None
        rest = rest[m.end() :]
    return parts


def _schema_types(s: Schema) -> tuple[str, ...]:
    if s.get("x-kubernetes-int-or-string"):
        return ("integer", "string")
    t = s.get("type")
    return (t,) if isinstance(t, str) and t else ()


def _type_matches(value: JSON, actual: str, types: tuple[str, ...]) -> bool:
    if actual in types:
        return True
    if actual == "integer" and "number" in types:
        return True
    # kube-openapi accepts a float with an integral value (2.0) for type integer.
    return (
        actual == "number"
        and "integer" in types
        and math.isfinite(value)
        and float(value).is_integer()
    )


def _compile_pattern(pattern: str, *, strict: bool = False) -> re.Pattern[str] | None:
    """A schema `pattern` as a Python regex (close to Go's RE2 for what CRDs use), quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return re.compile(pattern)
        except re.error:
            if strict:
                raise
            return None


def _is_datetime(text: str) -> bool:
    if not re.fullmatch(
        r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", text
    ):
        return False
    try:
        datetime.datetime.fromisoformat(text.replace("z", "Z").replace("t", "T"))
    except ValueError:
        return False
    return True


def _is_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", text))


def _is_uuid(text: str, version: int | None = None) -> bool:
    if not re.fullmatch(
        r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
        r"[0-9a-fA-F]{12}",
        text,
    ):
        return False
    return version is None or uuid.UUID(text).version == version


def _is_ip(text: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _is_hostname(text: str) -> bool:
    return len(text) <= 255 and bool(
        re.fullmatch(
            r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}"
            r"[A-Za-z0-9])?)*\.?",
            text,
        )
    )


_FORMAT_CHECKS: Final[Mapping[str, Callable[[str], bool]]] = {
    "date-time": _is_datetime,
    "datetime": _is_datetime,
    "date": _is_date,
    "uuid": _is_uuid,
    "uuid3": lambda t: _is_uuid(t, 3),
    "uuid4": lambda t: _is_uuid(t, 4),
    "uuid5": lambda t: _is_uuid(t, 5),
    "ipv4": lambda t: _is_ip(t, 4),
    "ipv6": lambda t: _is_ip(t, 6),
    "cidr": _is_cidr,
    "mac": lambda t: bool(re.fullmatch(r"([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}", t)),
    "byte": _is_base64,
    "hostname": _is_hostname,
    "email": lambda t: bool(re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", t)),
    "hexcolor": lambda t: bool(re.fullmatch(r"#([0-9A-Fa-f]{3}){1,2}", t)),
}


def _go_number(value: float | int) -> str:
    return _go_float(float(value)) if isinstance(value, float) else str(value)


def _props(s: Schema) -> Mapping[str, Schema]:
    """`properties`, tolerating malformed schemas (validate_crd reports those)."""
    props = s.get("properties")
    if not isinstance(props, Mapping):
        return {}
    return {k: v for k, v in props.items() if isinstance(v, Mapping)}


def _str_list(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _rules_of(s: Schema) -> list[Mapping[str, Any]]:
    rules = s.get("x-kubernetes-validations")
    return [r for r in rules if isinstance(r, Mapping)] if isinstance(rules, list) else []


def _addl_schema(s: Schema) -> Schema | None:
    addl = s.get("additionalProperties")
    return addl if isinstance(addl, Mapping) else None


class CRDSchema:
    """One CRD version's `openAPIV3Schema`, applied to custom resources as the server does.

    Construction refuses (ValueError) rules the emulator cannot evaluate, so a CRD whose
    validation would be weaker here than on a cluster can never be in use.
    """

    def __init__(
        self, schema: Schema, *, group: str = "", kind: str = "", version: str = ""
    ) -> None:
        if not isinstance(schema, Mapping):
            raise ValueError("openAPIV3Schema must be an object")
        problems = [f"{where}: {why}" for where, why in _rule_problems(schema, "openAPIV3Schema")]
        if problems:
            raise ValueError("; ".join(problems))
        self.schema: Schema = schema
        self.group = group
        self.kind = kind
        self.version = version
        self.has_rules = any(_rules_of(s) for s in _walk_nodes(schema))

    @classmethod
    def from_crd(cls, crd: Mapping[str, Any], version: str | None = None) -> CRDSchema:
        """The schema of `version` (default: the storage version) of a CRD object."""
        spec = crd.get("spec") or {}
        versions = spec.get("versions") or []
        chosen = next(
            (v for v in versions if (v.get("name") == version if version else v.get("storage"))),
            None,
        )
        if chosen is None:
            raise KeyError(version or "storage version")
        schema = (chosen.get("schema") or {}).get("openAPIV3Schema") or {}
        return cls(
            schema,
            group=spec.get("group", ""),
            kind=(spec.get("names") or {}).get("kind", ""),
            version=chosen["name"],
        )

    # -- the public steps ---------------------------------------------------------------

    def admit_create(
        self, obj: Mapping[str, Any], *, field_validation: str = "Warn"
    ) -> dict[str, Any]:
        """The object as stored on create (pruned, defaulted), or ApiError (422 / 400)."""
        stored = self._decode(obj, field_validation)
        causes = self._schema_errors(stored, _ABSENT)
        causes += self._list_errors(stored, self.schema, "")
        causes += self._rule_errors(stored, _ABSENT, causes)
        if causes:
            raise invalid(self.group, self.kind, _name_of(stored), causes)
        return stored

    def admit_update(
        self, new: Mapping[str, Any], old: Mapping[str, Any], *, field_validation: str = "Warn"
    ) -> dict[str, Any]:
        """Like admit_create, plus transition rules and ratcheting against the old object."""
        stored = self._decode(new, field_validation)
        previous = self.default(old) if isinstance(old, Mapping) else _ABSENT
        causes = self._schema_errors(stored, previous)
        if previous is _ABSENT or not self._list_errors(previous, self.schema, ""):
            causes += self._list_errors(stored, self.schema, "")
        causes += self._rule_errors(stored, previous, causes)
        if causes:
            raise invalid(self.group, self.kind, _name_of(stored), causes)
        return stored

    def default(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Pruned and defaulted copy, no validation (what a read from storage returns)."""
        return self._decode(obj, "Ignore")

    def unknown_fields(self, obj: Mapping[str, Any]) -> list[str]:
        """Paths pruning would drop (`spec.numnodes`): the server's `unknown field` warnings."""
        pruned: list[str] = []
        self._prune(copy.deepcopy(dict(obj)), self.schema, "", pruned, root=True)
        return pruned

    def validate(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[Cause]:
        """All causes for an already pruned and defaulted object (empty when valid)."""
        previous = old if old is not None else _ABSENT
        causes = self._schema_errors(obj, previous)
        causes += self._list_errors(obj, self.schema, "")
        causes += self._rule_errors(obj, previous, causes)
        return causes

    # -- decoding: prune, nulls, defaults -----------------------------------------------

    def _decode(self, obj: Mapping[str, Any], field_validation: str) -> dict[str, Any]:
        if not isinstance(obj, Mapping):
            raise bad_request(
                f"{self.kind} in version {_go_quote(self.version)} cannot be "
                f"handled as a {self.kind}: the body must be a JSON object"
            )
        pruned: list[str] = []
        out = self._prune(copy.deepcopy(dict(obj)), self.schema, "", pruned, root=True)
        if pruned and field_validation == "Strict":
            listed = ", ".join(f"unknown field {_go_quote(p)}" for p in pruned)
            raise bad_request(
                f"{self.kind} in version {_go_quote(self.version)} cannot be "
                f"handled as a {self.kind}: strict decoding error: {listed}"
            )
        self._prune_nulls(out, self.schema)
        self._default(out, self.schema)
        return _integral_floats_to_int(out)

    def _prune(
        self, value: JSON, s: Schema | None, path: str, pruned: list[str], *, root: bool = False
    ) -> JSON:
        """structuralpruning.prune: drop undeclared fields, keep preserved ones."""
        if s is not None and s.get("x-kubernetes-preserve-unknown-fields"):
            return self._skip_prune(value, s, path, pruned, root=root)
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            props = _props(s) if s is not None else {}
            addl = _addl_schema(s) if s is not None else None
            embedded = root or (s is not None and s.get("x-kubernetes-embedded-resource"))
            for key, sub in value.items():
                where = _child(path, key)
                keep = root or key == "metadata" or isinstance(sub, str)
                if embedded and key in _ROOT_META and keep:
                    out[key] = sub
                elif key in props:
                    out[key] = self._prune(sub, props[key], where, pruned)
                elif addl is not None:
                    out[key] = self._prune(sub, addl, where, pruned)
                elif s is not None and s.get("additionalProperties") is True:
                    out[key] = self._prune(sub, None, where, pruned)
                else:
                    pruned.append(where)
            return out
        if isinstance(value, list):
            items = s.get("items") if s is not None else None
            return [
                self._prune(
                    x, items if isinstance(items, Mapping) else None, _index(path, i), pruned
                )
                for i, x in enumerate(value)
            ]
        return value

    def _skip_prune(
        self, value: JSON, s: Schema, path: str, pruned: list[str], *, root: bool
    ) -> JSON:
        """x-kubernetes-preserve-unknown-fields: keep unknown keys, still prune known ones."""
        if isinstance(value, dict):
            props = _props(s)
            addl = _addl_schema(s)
            out: dict[str, Any] = {}
            for key, sub in value.items():
                if root and key in _ROOT_META:
                    out[key] = sub
                elif key in props:
                    out[key] = self._prune(sub, props[key], _child(path, key), pruned)
                elif addl is not None:
                    out[key] = self._prune(sub, addl, _child(path, key), pruned)
                else:
                    out[key] = sub
            return out
        if isinstance(value, list) and isinstance(s.get("items"), Mapping):
            return [
                self._prune(x, s["items"], _index(path, i), pruned) for i, x in enumerate(value)
            ]
        return value

    def _prune_nulls(self, value: JSON, s: Schema) -> None:
        """Nulls of non-nullable fields without a default are dropped before defaulting."""
        if isinstance(value, dict):
            props = _props(s)
            for key in list(value):
                sub = props.get(key)
                if sub is None:
                    continue
                if value[key] is None and "default" not in sub and not sub.get("nullable"):
                    del value[key]
                else:
                    self._prune_nulls(value[key], sub)
        elif isinstance(value, list) and isinstance(s.get("items"), Mapping):
            for item in value:
                self._prune_nulls(item, s["items"])

    def _default(self, value: JSON, s: Schema) -> None:
        """structuraldefaulting.Default: only inside objects that exist, recursively."""
        if isinstance(value, dict):
            props = _props(s)
            for key, sub in props.items():
                if "default" in sub and (
                    key not in value or (value[key] is None and not sub.get("nullable"))
                ):
                    value[key] = copy.deepcopy(sub["default"])
            addl = _addl_schema(s)
            for key, sub_value in value.items():
                if key in props:
                    self._default(sub_value, props[key])
                elif addl is not None:
                    if sub_value is None and "default" in addl and not addl.get("nullable"):
                        value[key] = copy.deepcopy(addl["default"])
                    self._default(value[key], addl)
        elif isinstance(value, list) and isinstance(s.get("items"), Mapping):
            items = s["items"]
            for i, item in enumerate(value):
                if item is None and "default" in items and not items.get("nullable"):
                    value[i] = copy.deepcopy(items["default"])
                self._default(value[i], items)

    # -- OpenAPI validation (kube-openapi's messages) -----------------------------------

    def _schema_errors(self, obj: Mapping[str, Any], old: Any) -> list[Cause]:
        out: list[Cause] = []
        meta = obj.get("metadata", _ABSENT)
        if meta is not _ABSENT and meta is not None and not isinstance(meta, Mapping):
            actual = _json_type(meta)
            out.append(
                field_error(
                    "metadata",
                    TYPE_INVALID,
                    actual,
                    f'metadata in body must be of type object: "{actual}"',
                )
            )
        self._check(obj, self.schema, "", old, out, root=True)
        return out

    def _check(
        self, value: JSON, s: Schema, path: str, old: Any, out: list[Cause], *, root: bool = False
    ) -> None:
        """One schema node; errors on values unchanged from `old` are ratcheted away."""
        if old is not _ABSENT and _json_equal(value, old):
            return
        name = path or "."
        types = _schema_types(s)
        if value is None:
            if types and not s.get("nullable"):
                out.append(
                    field_error(
                        path,
                        TYPE_INVALID,
                        "null",
                        f'{name} in body must be of type {",".join(types)}: "null"',
                    )
                )
            return
        actual = _json_type(value)
        if types and not _type_matches(value, actual, types):
            out.append(
                field_error(
                    path,
                    TYPE_INVALID,
                    actual,
                    f'{name} in body must be of type {",".join(types)}: "{actual}"',
                )
            )
            return
        self._check_composition(value, s, path, out)
        if isinstance(value, str):
            self._check_string(value, s, path, out)
        elif actual in ("integer", "number"):
            self._check_number(value, s, path, out)
        if (
            "enum" in s
            and isinstance(s["enum"], list)
            and not any(_json_equal(value, e) for e in s["enum"])
        ):
            shown = [e if isinstance(e, str) else json.dumps(e) for e in s["enum"]]
            out.append(not_supported(path, value, shown))
        if isinstance(value, list):
            self._check_array(value, s, path, old, out)
        elif isinstance(value, dict):
            self._check_object(value, s, path, old, out, root=root)

    def _check_composition(self, value: JSON, s: Schema, path: str, out: list[Cause]) -> None:
        name = path or "."
        for sub in s.get("allOf") or ():
            self._check(value, sub, path, _ABSENT, out)
        if s.get("anyOf") and not any(self._passes(value, sub, path) for sub in s["anyOf"]):
            out.append(
                invalid_value(
                    path,
                    value if isinstance(value, str) else "",
                    f"{name} in body must validate at least one schema (anyOf)",
                )
            )
        if s.get("oneOf") and sum(self._passes(value, sub, path) for sub in s["oneOf"]) != 1:
            out.append(
                invalid_value(
                    path,
                    value if isinstance(value, str) else "",
                    f"{name} in body must validate one and only one schema (oneOf)",
                )
            )
        if isinstance(s.get("not"), Mapping) and self._passes(value, s["not"], path):
            out.append(
                invalid_value(
                    path,
                    value if isinstance(value, str) else "",
                    f"{name} in body must not validate the schema (not)",
                )
            )

    def _passes(self, value: JSON, s: Schema, path: str) -> bool:
        found: list[Cause] = []
        self._check(value, s, path, _ABSENT, found)
        return not found

    def _check_string(self, value: str, s: Schema, path: str, out: list[Cause]) -> None:
        name = path or "."
        length = len(value)
        if isinstance(s.get("maxLength"), int) and length > s["maxLength"]:
            out.append(too_long(path, s["maxLength"]))
        if isinstance(s.get("minLength"), int) and length < s["minLength"]:
            out.append(
                invalid_value(
                    path, value, f"{name} in body should be at least {s['minLength']} chars long"
                )
            )
        pattern = s.get("pattern")
        if isinstance(pattern, str):
            compiled = _compile_pattern(pattern)
            # validate_crd refuses patterns that do not compile
            if compiled is not None and compiled.search(value) is None:
                out.append(invalid_value(path, value, f"{name} in body should match '{pattern}'"))
        fmt = s.get("format")
        check = _FORMAT_CHECKS.get(fmt) if isinstance(fmt, str) else None
        if check is not None and not check(value):
            out.append(
                field_error(
                    path,
                    TYPE_INVALID,
                    value,
                    f"{name} in body must be of type {fmt}: {_go_quote(value)}",
                )
            )

    def _check_number(self, value: float | int, s: Schema, path: str, out: list[Cause]) -> None:
        name = path or "."
        if not isinstance(value, int) and not math.isfinite(value):
            return
        factor = s.get("multipleOf")
        if isinstance(factor, int | float) and factor > 0:
            try:
                quotient = value / factor
                multiple = math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9)
            except OverflowError:
                multiple = (
                    isinstance(factor, int) and isinstance(value, int) and (value % factor == 0)
                )
            if not multiple:
                out.append(
                    invalid_value(
                        path, value, f"{name} in body should be a multiple of {_go_number(factor)}"
                    )
                )
        maximum = s.get("maximum")
        if isinstance(maximum, int | float) and not isinstance(maximum, bool):
            if s.get("exclusiveMaximum") and value >= maximum:
                out.append(
                    invalid_value(
                        path,
                        value,
                        f"{name} in body should be less than {_go_float(float(maximum))}",
                    )
                )
            elif value > maximum:
                out.append(
                    invalid_value(
                        path,
                        value,
                        f"{name} in body should be less than or "
                        f"equal to {_go_float(float(maximum))}",
                    )
                )
        minimum = s.get("minimum")
        if isinstance(minimum, int | float) and not isinstance(minimum, bool):
            if s.get("exclusiveMinimum") and value <= minimum:
                out.append(
                    invalid_value(
                        path,
                        value,
                        f"{name} in body should be greater than {_go_float(float(minimum))}",
                    )
                )
            elif value < minimum:
                out.append(
                    invalid_value(
                        path,
                        value,
                        f"{name} in body should be greater than or "
                        f"equal to {_go_float(float(minimum))}",
                    )
                )

    def _check_array(
        self, value: list[Any], s: Schema, path: str, old: Any, out: list[Cause]
    ) -> None:
        name = path or "."
        if isinstance(s.get("maxItems"), int) and len(value) > s["maxItems"]:
            out.append(too_many(path, len(value), s["maxItems"]))
        if isinstance(s.get("minItems"), int) and len(value) < s["minItems"]:
            out.append(
                invalid_value(
                    path, len(value), f"{name} in body should have at least {s['minItems']} items"
                )
            )
        if s.get("uniqueItems") and len({_canonical(v) for v in value}) != len(value):
            out.append(invalid_value(path, "", f"{name} in body shouldn't contain duplicates"))
        items = s.get("items")
        if not isinstance(items, Mapping):
            return
        olds = _correlate_items(value, old, s)
        for i, item in enumerate(value):
            self._check(item, items, _index(path, i), olds[i], out)

    def _check_object(
        self, value: dict[str, Any], s: Schema, path: str, old: Any, out: list[Cause], *, root: bool
    ) -> None:
        name = path or "."
        if isinstance(s.get("maxProperties"), int) and len(value) > s["maxProperties"]:
            out.append(too_many(path, len(value), s["maxProperties"]))
        if isinstance(s.get("minProperties"), int) and len(value) < s["minProperties"]:
            out.append(
                invalid_value(
                    path,
                    len(value),
                    f"{name} in body should have at least {s['minProperties']} properties",
                )
            )
        for key in _str_list(s.get("required")):
            if key not in value and not (root and key == "metadata"):
                out.append(required(_child(path, key)))
        if s.get("x-kubernetes-embedded-resource"):
            for key in ("apiVersion", "kind"):
                if not value.get(key):
                    out.append(required(_child(path, key), "must not be empty"))
            meta = value.get("metadata")
            if isinstance(meta, Mapping) and meta.get("name"):
                out += [
                    invalid_value(_child(_child(path, "metadata"), "name"), meta["name"], m)
                    for m in dns1123_subdomain_problems(str(meta["name"]))
                ]
        props = _props(s)
        addl = _addl_schema(s)
        olds = old if isinstance(old, Mapping) else {}
        for key, sub_value in value.items():
            if (root or s.get("x-kubernetes-embedded-resource")) and key == "metadata":
                continue  # ObjectMeta is validated by the server, not the CRD schema
            sub = props.get(key, addl)
            if sub is not None:
                self._check(sub_value, sub, _child(path, key), olds.get(key, _ABSENT), out)

    # -- x-kubernetes-list-type ---------------------------------------------------------

    def _list_errors(self, value: JSON, s: Schema, path: str) -> list[Cause]:
        out: list[Cause] = []
        self._lists(value, s, path, out)
        return out

    def _lists(self, value: JSON, s: Schema, path: str, out: list[Cause]) -> None:
        if isinstance(value, dict):
            props = _props(s)
            addl = _addl_schema(s)
            for key, sub_value in value.items():
                sub = props.get(key, addl)
                if sub is not None and not (path == "" and key == "metadata"):
                    self._lists(sub_value, sub, _child(path, key), out)
        elif isinstance(value, list):
            list_type = s.get("x-kubernetes-list-type")
            if list_type == "set":
                seen: set[str] = set()
                for i, item in enumerate(value):
                    ident = _canonical(item)
                    if ident in seen:
                        out.append(duplicate(_index(path, i), item))
                    seen.add(ident)
            elif list_type == "map":
                keys = _str_list(s.get("x-kubernetes-list-map-keys"))
                seen = set()
                for i, item in enumerate(value):
                    if not isinstance(item, Mapping):
                        out.append(
                            invalid_value(
                                _index(path, i),
                                item,
                                "must be an object for an array of list-type map",
                            )
                        )
                        continue
                    key_values = {k: item[k] for k in keys if k in item}
                    ident = _canonical([item.get(k) for k in keys])
                    if ident in seen:
                        out.append(duplicate(_index(path, i), key_values))
                    seen.add(ident)
            items = s.get("items")
            if isinstance(items, Mapping):
                for i, item in enumerate(value):
                    self._lists(item, items, _index(path, i), out)

    # -- x-kubernetes-validations -------------------------------------------------------

    def _rule_errors(self, new: JSON, old: Any, causes: list[Cause]) -> list[Cause]:
        if not self.has_rules:
            return []
        if any(c.reason in _BLOCKING for c in causes):
            return [invalid_value("", None, _RULES_NOT_CHECKED)]
        out: list[Cause] = []
        self._rules(new, old, self.schema, "", out)
        return out

    def _rules(self, new: JSON, old: Any, s: Schema, path: str, out: list[Cause]) -> None:
        """Transition rules run only where both the new and the correlated old value exist."""
        if old is _ABSENT or new is None:
            return
        for rule in _rules_of(s):
            if _cel_equal(new, old, s):
                continue
            where = path
            for part in _rule_field_path(rule.get("fieldPath") or "") or ():
                where = _child(where, part)
            message = rule.get("message") or f"failed rule: {rule['rule'].strip()}"
            reason = rule.get("reason") or INVALID
            value = s.get("type", "")
            if reason == FORBIDDEN:
                out.append(forbidden(where, message))
            elif reason == REQUIRED:
                out.append(required(where, message))
            elif reason == DUPLICATE:
                out.append(duplicate(where, value))
            else:
                out.append(invalid_value(where, value, message))
        if isinstance(new, dict) and isinstance(old, Mapping):
            props = _props(s)
            addl = _addl_schema(s)
            for key, sub_value in new.items():
                sub = props.get(key, addl)
                if sub is not None and key in old and not (path == "" and key == "metadata"):
                    self._rules(sub_value, old[key], sub, _child(path, key), out)
        elif isinstance(new, list) and isinstance(s.get("items"), Mapping):
            olds = _correlate_items(new, old, s, map_only=True)
            for i, item in enumerate(new):
                self._rules(item, olds[i], s["items"], _index(path, i), out)


def _integral_floats_to_int(value: JSON) -> JSON:
    """What a JSON round trip through Go does: float64 2.0 is written as `2`."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {k: _integral_floats_to_int(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_floats_to_int(v) for v in value]
    return value


def _correlate_items(new: list[Any], old: Any, s: Schema, *, map_only: bool = False) -> list[Any]:
    """The old item each new item is compared with: by key for list-type map, by value for
    sets (ratcheting only), none for atomic lists."""
    absent: list[Any] = [_ABSENT] * len(new)
    if not isinstance(old, list):
        return absent
    list_type = s.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = _str_list(s.get("x-kubernetes-list-map-keys"))
        by_key = {_canonical([o.get(k) for k in keys]): o for o in old if isinstance(o, Mapping)}
        return [
            by_key.get(_canonical([n.get(k) for k in keys]), _ABSENT)
            if isinstance(n, Mapping)
            else _ABSENT
            for n in new
        ]
    if list_type == "set" and not map_only:
        by_value = {_canonical(o): o for o in old}
        return [by_value.get(_canonical(n), _ABSENT) for n in new]
    return absent


def _cel_equal(a: JSON, b: JSON, s: Schema | None) -> bool:
    """CEL `==` on structural values: lists of type set/map compare regardless of order."""
    if s is None:
        return _json_equal(a, b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if a.keys() != b.keys():
            return False
        props = _props(s)
        addl = _addl_schema(s)
        return all(_cel_equal(a[k], b[k], props.get(k, addl)) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False
        items = s.get("items") if isinstance(s.get("items"), Mapping) else None
        list_type = s.get("x-kubernetes-list-type")
        if list_type == "set":
            return sorted(map(_canonical, a)) == sorted(map(_canonical, b))
        if list_type == "map":
            matched = _correlate_items(a, b, s, map_only=True)
            return all(
                o is not _ABSENT and _cel_equal(n, o, items)
                for n, o in zip(a, matched, strict=True)
            )
        return all(_cel_equal(x, y, items) for x, y in zip(a, b, strict=True))
    return _json_equal(a, b)


def _walk_nodes(s: Schema) -> Iterator[Schema]:
    if not isinstance(s, Mapping):
        return
    yield s
    for sub in _props(s).values():
        yield from _walk_nodes(sub)
    for key in ("items", "additionalProperties", "not"):
        if isinstance(s.get(key), Mapping):
            yield from _walk_nodes(s[key])
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in _list(s.get(key)):
            yield from _walk_nodes(sub)


def _rule_problems(s: Schema, path: str, *, correlatable: bool = True) -> Iterator[tuple[str, str]]:
    """(field path, problem) for every rule the emulator cannot evaluate."""
    if not isinstance(s, Mapping):
        return
    rules = s.get("x-kubernetes-validations")
    if rules is not None:
        if not isinstance(rules, list):
            yield _child(path, "x-kubernetes-validations"), "must be a list"
        else:
            for i, rule in enumerate(rules):
                where = _index(_child(path, "x-kubernetes-validations"), i)
                problem = rule_problem(rule)
                if problem:
                    yield _child(where, "rule"), problem
                    continue
                if not correlatable:
                    yield (
                        _child(where, "rule"),
                        "oldSelf cannot be used on the uncorrelatable portion of the schema",
                    )
                reason = rule.get("reason")
                if reason is not None and reason not in _RULE_REASONS:
                    yield _child(where, "reason"), "unsupported reason"
                if rule.get("fieldPath") and _rule_field_path(rule["fieldPath"]) is None:
                    yield _child(where, "fieldPath"), "fieldPath must be a valid path"
    for name, sub in _props(s).items():
        yield from _rule_problems(sub, f"{path}.properties[{name}]", correlatable=correlatable)
    if isinstance(s.get("additionalProperties"), Mapping):
        yield from _rule_problems(
            s["additionalProperties"], f"{path}.additionalProperties", correlatable=correlatable
        )
    if isinstance(s.get("items"), Mapping):
        keyed = s.get("x-kubernetes-list-type") == "map"
        yield from _rule_problems(s["items"], f"{path}.items", correlatable=correlatable and keyed)
    # Rules inside value validations would never be evaluated here: refuse them.
    compositions = [(f"{path}.not", s["not"])] if isinstance(s.get("not"), Mapping) else []
    for key in ("allOf", "anyOf", "oneOf"):
        compositions += [
            (_index(_child(path, key), i), sub) for i, sub in enumerate(_list(s.get(key)))
        ]
    for where, sub in compositions:
        for node in _walk_nodes(sub):
            if node.get("x-kubernetes-validations") is not None:
                yield (
                    _child(where, "x-kubernetes-validations"),
                    "must not be used inside allOf, anyOf, oneOf or not",
                )
                break


# --------------------------------------------------------------------------------------
# CustomResourceDefinition objects
# --------------------------------------------------------------------------------------

_COLUMN_TYPES: Final = ("boolean", "date", "integer", "number", "string")
_COLUMN_FORMATS: Final = (
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
)
_FORBIDDEN_SCHEMA_KEYS: Final = {
    "$ref": "$ref is not supported",
    "$schema": "$schema is not supported",
    "id": "id is not supported",
    "definitions": "definitions are not supported",
    "dependencies": "dependencies are not supported",
    "additionalItems": "additionalItems cannot be set to true",
    "patternProperties": "patternProperties is not supported",
}


def validate_crd(crd: Mapping[str, Any]) -> list[Cause]:
    """What the server refuses when a CustomResourceDefinition is created or updated."""
    out: list[Cause] = []
    if not isinstance(crd, Mapping):
        return [invalid_value("", "", "must be an object")]
    spec = crd.get("spec")
    if not isinstance(spec, Mapping):
        return [required("spec")]
    meta = crd.get("metadata") if isinstance(crd.get("metadata"), Mapping) else {}
    group = spec.get("group") if isinstance(spec.get("group"), str) else ""
    names = spec.get("names") if isinstance(spec.get("names"), Mapping) else {}
    plural = names.get("plural") if isinstance(names.get("plural"), str) else ""
    name = meta.get("name") or ""
    if name != f"{plural}.{group}":
        out.append(invalid_value("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    if not group:
        out.append(required("spec.group"))
    elif problems := dns1123_subdomain_problems(group):
        out.append(invalid_value("spec.group", group, ",".join(problems)))
    elif "." not in group:
        out.append(invalid_value("spec.group", group, "should be a domain with at least one dot"))
    scope = spec.get("scope")
    if not scope:
        out.append(required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        out.append(not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))
    out += _crd_names(names)
    if spec.get("preserveUnknownFields") is True:
        out.append(invalid_value("spec.preserveUnknownFields", True, "must be false"))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        out.append(
            required("spec.versions", "must have exactly one version marked as storage version")
        )
        return out
    seen: set[str] = set()
    storage = 0
    for i, version in enumerate(versions):
        vpath = _index("spec.versions", i)
        if not isinstance(version, Mapping):
            out.append(invalid_value(vpath, version, "must be an object"))
            continue
        vname = _str(version.get("name"))
        if not vname:
            out.append(required(_child(vpath, "name")))
        elif problems := dns1035_label_problems(vname):
            out.append(invalid_value(_child(vpath, "name"), vname, ",".join(problems)))
        if vname in seen:
            out.append(
                invalid_value(
                    "spec.versions",
                    GoRepr("[]apiextensions.CustomResourceDefinitionVersion{...}"),
                    "must contain unique version names",
                )
            )
        seen.add(vname)
        storage += version.get("storage") is True
        out += _crd_version(version, vpath)
    if storage != 1:
        out.append(
            invalid_value(
                "spec.versions",
                GoRepr("[]apiextensions.CustomResourceDefinitionVersion{...}"),
                "must have exactly one version marked as storage version",
            )
        )
    return out


def _crd_names(names: Mapping[str, Any]) -> list[Cause]:
    out: list[Cause] = []
    base = "spec.names"
    kind = _str(names.get("kind"))
    list_kind = _str(names.get("listKind")) or (f"{kind}List" if kind else "")
    for key, value in (("plural", names.get("plural")), ("kind", kind)):
        if not value:
            out.append(required(_child(base, key)))
    for key in ("plural", "singular"):
        value = names.get(key)
        if isinstance(value, str) and value and (problems := dns1035_label_problems(value)):
            out.append(invalid_value(_child(base, key), value, ",".join(problems)))
    for key, value in (("kind", kind), ("listKind", list_kind)):
        if isinstance(value, str) and value and (problems := dns1035_label_problems(value.lower())):
            out.append(
                invalid_value(
                    _child(base, key),
                    value,
                    "may have mixed case, but should otherwise match: " + ",".join(problems),
                )
            )
    if kind and kind == list_kind:
        out.append(
            invalid_value(
                _child(base, "listKind"), list_kind, "kind and listKind may not be the same"
            )
        )
    for key in ("shortNames", "categories"):
        for i, value in enumerate(_list(names.get(key))):
            if isinstance(value, str) and (problems := dns1035_label_problems(value)):
                out.append(invalid_value(_index(_child(base, key), i), value, ",".join(problems)))
    return out


def _crd_version(version: Mapping[str, Any], vpath: str) -> list[Cause]:
    out: list[Cause] = []
    schema_path = _child(vpath, "schema.openAPIV3Schema")
    schema = (
        (version.get("schema") or {}).get("openAPIV3Schema")
        if isinstance(version.get("schema"), Mapping)
        else None
    )
    if not isinstance(schema, Mapping):
        out.append(required(schema_path, "schemas are required"))
    else:
        out += _structural(schema, schema_path, root=True)
        out += [
            invalid_value(where, (_lookup_rule(schema, where, schema_path)), why)
            for where, why in _rule_problems(schema, schema_path)
        ]
    for i, column in enumerate(_list(version.get("additionalPrinterColumns"))):
        cpath = _index(_child(vpath, "additionalPrinterColumns"), i)
        if not isinstance(column, Mapping):
            out.append(invalid_value(cpath, column, "must be an object"))
            continue
        if not column.get("name"):
            out.append(required(_child(cpath, "name")))
        ctype = column.get("type")
        if not ctype:
            out.append(required(_child(cpath, "type")))
        elif ctype not in _COLUMN_TYPES:
            out.append(not_supported(_child(cpath, "type"), ctype, _COLUMN_TYPES))
        fmt = column.get("format")
        if fmt and fmt not in _COLUMN_FORMATS:
            out.append(not_supported(_child(cpath, "format"), fmt, _COLUMN_FORMATS))
        json_path = column.get("jsonPath")
        if not json_path:
            out.append(required(_child(cpath, "jsonPath")))
        elif not isinstance(json_path, str) or not json_path.startswith("."):
            out.append(
                invalid_value(
                    _child(cpath, "jsonPath"),
                    json_path,
                    "must be a simple json path starting with .",
                )
            )
        priority = column.get("priority")
        if isinstance(priority, int) and priority < 0:
            out.append(
                invalid_value(
                    _child(cpath, "priority"), priority, "must be greater than or equal to 0"
                )
            )
    sub = version.get("subresources")
    if isinstance(sub, Mapping) and isinstance(sub.get("scale"), Mapping):
        scale = sub["scale"]
        spath = _child(vpath, "subresources.scale")
        for key, prefix in (("specReplicasPath", ".spec."), ("statusReplicasPath", ".status.")):
            value = scale.get(key)
            if not value:
                out.append(required(_child(spath, key)))
            elif not str(value).startswith(prefix):
                out.append(
                    invalid_value(
                        _child(spath, key),
                        value,
                        f"should be a json path under {prefix.rstrip('.')}",
                    )
                )
    return out


def _lookup_rule(schema: Schema, where: str, schema_path: str) -> Any:
    """The offending rule text for a rule problem's message (best effort)."""
    node: Any = schema
    rest = where[len(schema_path) :]
    for part in re.findall(r"properties\[([^\]]*)\]|\.(items|additionalProperties)\b", rest):
        node = _props(node).get(part[0]) if part[0] else node.get(part[1])
        if not isinstance(node, Mapping):
            return ""
    m = re.search(r"x-kubernetes-validations\[(\d+)\]", rest)
    if m and isinstance(node, Mapping):
        rules = node.get("x-kubernetes-validations") or []
        idx = int(m.group(1))
        if idx < len(rules) and isinstance(rules[idx], Mapping):
            return rules[idx].get("rule", "")
    return ""


def _structural(
    s: Any, path: str, *, root: bool = False, in_items: bool = False, data: str = ""
) -> list[Cause]:
    """Structural-schema rules: every node typed, metadata untouched, no uniqueItems, ..."""
    if not isinstance(s, Mapping):
        return [invalid_value(path, s, "must be an object")]
    out: list[Cause] = []
    for key, why in _FORBIDDEN_SCHEMA_KEYS.items():
        if key in s and not (key == "additionalItems" and s[key] is False):
            out.append(forbidden(_child(path, key), why))
    stype = s.get("type")
    int_or_string = bool(s.get("x-kubernetes-int-or-string"))
    preserve = s.get("x-kubernetes-preserve-unknown-fields")
    if preserve is False:
        out.append(
            invalid_value(
                _child(path, "x-kubernetes-preserve-unknown-fields"),
                False,
                "must be true or undefined",
            )
        )
    if stype is not None and stype not in _SCHEMA_TYPES:
        out.append(not_supported(_child(path, "type"), stype, _SCHEMA_TYPES))
    if root and stype != "object":
        if stype:
            out.append(invalid_value(_child(path, "type"), stype, "must be object at the root"))
        else:
            out.append(required(_child(path, "type"), "must not be empty at the root"))
    elif not stype and not int_or_string and not preserve:
        where = "for specified array items" if in_items else "for specified object fields"
        out.append(required(_child(path, "type"), f"must not be empty {where}"))
    if int_or_string and stype:
        out.append(
            invalid_value(
                _child(path, "type"), stype, "must be empty if x-kubernetes-int-or-string is true"
            )
        )
    if s.get("uniqueItems") is True:
        out.append(
            forbidden(
                _child(path, "uniqueItems"),
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            )
        )
    addl = s.get("additionalProperties")
    if addl is not None and s.get("properties"):
        out.append(
            forbidden(
                _child(path, "additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            )
        )
    if addl is False:
        out.append(
            forbidden(
                _child(path, "additionalProperties"), "additionalProperties cannot be set to false"
            )
        )
    pattern = s.get("pattern")
    if pattern is not None:
        try:
            _compile_pattern(str(pattern), strict=True)
        except re.error as err:
            out.append(
                invalid_value(
                    _child(path, "pattern"),
                    pattern,
                    f"must be a valid regular expression, but isn't: {err}",
                )
            )
    out += _structural_lists(s, path)
    if "default" in s:
        out += _check_default(s, path, data)
    props = s.get("properties")
    if isinstance(props, Mapping):
        for name, sub in props.items():
            ppath = f"{path}.properties[{name}]"
            if root and name == "metadata":
                out += _metadata_schema(sub, ppath)
                continue
            out += _structural(sub, ppath, data=_child(data, name))
    elif props is not None:
        out.append(invalid_value(_child(path, "properties"), props, "must be an object"))
    if isinstance(addl, Mapping):
        out += _structural(addl, _child(path, "additionalProperties"), data=data)
    items = s.get("items")
    if items is not None:
        if isinstance(items, list):
            out.append(
                forbidden(_child(path, "items"), "items must be a schema object and not an array")
            )
        else:
            out += _structural(items, _child(path, "items"), in_items=True, data=data)
    elif stype == "array":
        out.append(required(_child(path, "items"), "must be specified"))
    for key in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(s.get(key) or ()):
            if isinstance(sub, Mapping) and ("type" in sub or "default" in sub):
                out.append(
                    forbidden(
                        _index(_child(path, key), i) + ".type", "must be empty to be structural"
                    )
                )
    return out


def _metadata_schema(s: Any, path: str) -> list[Cause]:
    if not isinstance(s, Mapping):
        return [invalid_value(path, s, "must be an object")]
    allowed = {"type", "description"}
    props = _props(s)
    if set(s) - allowed - {"properties"} or set(props) - {"name", "generateName"}:
        return [
            forbidden(
                path,
                "must not specify anything other than name and generateName, "
                "but metadata is implicitly specified",
            )
        ]
    if s.get("type") not in (None, "object"):
        return [invalid_value(_child(path, "type"), s.get("type"), "must be object")]
    return []


def _structural_lists(s: Mapping[str, Any], path: str) -> list[Cause]:
    out: list[Cause] = []
    list_type = s.get("x-kubernetes-list-type")
    raw_keys = s.get("x-kubernetes-list-map-keys")
    keys = _str_list(raw_keys)
    if list_type is not None:
        if list_type not in ("atomic", "set", "map"):
            out.append(
                not_supported(
                    _child(path, "x-kubernetes-list-type"), list_type, ["atomic", "set", "map"]
                )
            )
        elif s.get("type") != "array":
            out.append(
                invalid_value(
                    _child(path, "x-kubernetes-list-type"),
                    list_type,
                    "must only be used on type=array",
                )
            )
    items = s.get("items") if isinstance(s.get("items"), Mapping) else {}
    if list_type == "map":
        kpath = _child(path, "x-kubernetes-list-map-keys")
        if not keys:
            out.append(required(kpath, "must not be empty if x-kubernetes-list-type is map"))
        elif items.get("type") != "object":
            out.append(
                invalid_value(
                    _child(path, "items.type"),
                    items.get("type") or "",
                    "must be object if parent array's x-kubernetes-list-type is map",
                )
            )
        else:
            props = _props(items)
            for key in keys:
                prop = props.get(key)
                if prop is None:
                    out.append(
                        invalid_value(
                            kpath,
                            GoRepr(go_repr(list(keys))),
                            "entries must all be names of item properties",
                        )
                    )
                elif prop.get("type") not in ("string", "integer", "boolean", "number") and not (
                    prop.get("x-kubernetes-int-or-string")
                ):
                    out.append(
                        invalid_value(
                            f"{path}.items.properties[{key}].type",
                            prop.get("type") or "",
                            "must be a scalar type if parent array's x-kubernetes-list-type is map",
                        )
                    )
                elif key not in _str_list(items.get("required")) and "default" not in prop:
                    out.append(
                        required(
                            f"{path}.items.properties[{key}]",
                            "this property is in x-kubernetes-list-map-keys, so it "
                            "must have a default or be a required property",
                        )
                    )
    elif raw_keys is not None:
        out.append(
            forbidden(
                _child(path, "x-kubernetes-list-map-keys"),
                "must only be used if x-kubernetes-list-type is map",
            )
        )
    if (
        list_type == "set"
        and items.get("type") == "object"
        and (items.get("x-kubernetes-map-type") != "atomic")
    ):
        out.append(
            invalid_value(
                _child(path, "items.x-kubernetes-map-type"),
                items.get("x-kubernetes-map-type") or "",
                "must be atomic as item of a list with x-kubernetes-list-type=set",
            )
        )
    return out


def _check_default(s: Mapping[str, Any], path: str, data: str) -> list[Cause]:
    """A default must survive pruning unchanged and validate against its own schema."""
    default = s["default"]
    dpath = _child(path, "default")
    try:
        checker = CRDSchema({k: v for k, v in s.items() if k != "x-kubernetes-validations"})
    except ValueError:
        return []
    pruned: list[str] = []
    checker._prune(copy.deepcopy(default), s, data, pruned)
    if pruned:
        return [
            invalid_value(
                dpath,
                GoRepr(go_repr(default)),
                f"must not have unknown fields: {', '.join(pruned)}",
            )
        ]
    found: list[Cause] = []
    checker._check(copy.deepcopy(default), s, data, _ABSENT, found)
    return [Cause(dpath, c.reason, c.message) for c in found]


@dataclass(frozen=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry (what `kubectl get` prints)."""

    name: str
    type: str
    json_path: str
    description: str = ""
    format: str = ""
    priority: int = 0


@dataclass(frozen=True)
class ScaleSubresource:
    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None


@dataclass(frozen=True)
class CRDVersionInfo:
    """One entry of `spec.versions`: whether it is served/stored and its subresources."""

    name: str
    served: bool
    storage: bool
    status_subresource: bool
    scale: ScaleSubresource | None
    printer_columns: tuple[PrinterColumn, ...]
    deprecated: bool = False
    deprecation_warning: str | None = None


@dataclass(frozen=True)
class CRDResourceInfo:
    """What routing and discovery need from a CRD (names defaulted like the server does)."""

    name: str
    group: str
    kind: str
    list_kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    scope: str
    versions: tuple[CRDVersionInfo, ...]

    @property
    def namespaced(self) -> bool:
        return self.scope == "Namespaced"

    @property
    def storage_version(self) -> str:
        return next(v.name for v in self.versions if v.storage)

    @property
    def served_versions(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.versions if v.served)

    def version(self, name: str) -> CRDVersionInfo | None:
        return next((v for v in self.versions if v.name == name), None)


_AGE_COLUMN: Final = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


def crd_resource_info(crd: Mapping[str, Any]) -> CRDResourceInfo:
    """Routing/discovery facts of a (validated) CRD; singular and listKind get the server's
    defaults, and a version without printer columns gets the implicit Age column."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    kind = names.get("kind", "")
    versions = []
    for v in spec.get("versions") or ():
        sub = v.get("subresources") or {}
        scale = sub.get("scale")
        columns = v.get("additionalPrinterColumns")
        versions.append(
            CRDVersionInfo(
                name=v.get("name", ""),
                served=bool(v.get("served")),
                storage=bool(v.get("storage")),
                status_subresource="status" in sub,
                scale=ScaleSubresource(
                    scale.get("specReplicasPath", ""),
                    scale.get("statusReplicasPath", ""),
                    scale.get("labelSelectorPath"),
                )
                if isinstance(scale, Mapping)
                else None,
                printer_columns=tuple(
                    PrinterColumn(
                        c.get("name", ""),
                        c.get("type", ""),
                        c.get("jsonPath", ""),
                        c.get("description", ""),
                        c.get("format", ""),
                        int(c.get("priority", 0) or 0),
                    )
                    for c in columns
                )
                if columns is not None
                else (_AGE_COLUMN,),
                deprecated=bool(v.get("deprecated")),
                deprecation_warning=v.get("deprecationWarning"),
            )
        )
    return CRDResourceInfo(
        name=(crd.get("metadata") or {}).get("name", ""),
        group=spec.get("group", ""),
        kind=kind,
        list_kind=names.get("listKind") or f"{kind}List",
        plural=names.get("plural", ""),
        singular=names.get("singular") or kind.lower(),
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        scope=spec.get("scope", ""),
        versions=tuple(versions),
    )


# --------------------------------------------------------------------------------------
# Built-in objects: the kubernetes-validate JSON schemas
# --------------------------------------------------------------------------------------

_SCHEMA_DIR_RE: Final = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-(local|standalone)$")
_PROBE_FILE: Final = "resourceclaimtemplate-resource-v1.json"
_DEFS_PREFIX: Final = "#/$defs/"
_ANY_JSON_DEFS: Final = frozenset({"io.k8s.apimachinery.pkg.runtime.RawExtension"})
_GO_NAMED: Final = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "resource.Quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "intstr.IntOrString",
    "io.k8s.apimachinery.pkg.runtime.RawExtension": "runtime.RawExtension",
}
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
_INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


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
        for check in _EXTRA_CHECKS.get(_group_kind(obj), ()):
            causes += check(obj)
        return _dedupe(causes)

    def validate_update(self, new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
        """`validate(new)` plus the immutability rules of the update strategies."""
        causes = self.validate(new)
        if self._root(*_api_kind(new)) is None or not isinstance(old, Mapping):
            return causes
        for check in _UPDATE_CHECKS.get(_group_kind(new), ()):
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
            f"{kind} in version {_go_quote(version)} cannot be handled as a "
            f"{kind}: {found.type_errors[0][1]}"
        )

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
        if (error := self.decode_error(obj)) is not None:
            raise error
        stripped, unknown = self.strip_unknown(obj)
        warnings = [f"unknown field {_go_quote(p)}" for p in unknown]
        if unknown and field_validation == "Strict":
            version = api_version.rpartition("/")[2]
            raise bad_request(
                f"{kind} in version {_go_quote(version)} cannot be handled as a "
                f"{kind}: strict decoding error: {', '.join(warnings)}"
            )
        causes = self.validate(stripped) if old is None else self.validate_update(stripped, old)
        if causes:
            group = api_version.rpartition("/")[0]
            raise invalid(group, kind, _name_of(stripped), causes)
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
        actual = _json_type(value)
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
                        _index(path, i),
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
                where = _child(path, key)
                status = in_status or (top and key == "status")
                if sub is not None:
                    self._node(
                        sub_value,
                        sub,
                        where,
                        _child(go_path, key),
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
                        _child(go_path, key),
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
                for key in _str_list(s.get("required")):
                    if (top and key == "metadata") or (owner, key) in _REQUIRED_EXEMPT:
                        continue
                    sub = props.get(key) or {}
                    sub_types = sub.get("type")
                    if sub_types and set(
                        [sub_types] if isinstance(sub_types, str) else sub_types
                    ) & {"integer", "boolean"}:
                        continue  # a missing int/bool is Go's zero value, checked by hand if at all
                    if value.get(key) is None:
                        found.required.append(required(_child(path, key)))
        elif isinstance(addl, Mapping):
            for key, sub_value in value.items():
                self._node(
                    sub_value,
                    addl,
                    _child(path, key),
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
        actual = _json_type(value)
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
        if fmt == "date-time" and not _is_datetime(value):
            message = (
                f'parsing time {_go_quote(value)} as "2006-01-02T15:04:05Z07:00": cannot '
                f'parse {_go_quote(value)} as "2006"'
            )
            found.type_errors.append(
                (
                    field_error(path, TYPE_INVALID, value, f"must be of type date-time: {message}"),
                    message,
                )
            )
        elif fmt == "byte" and not _is_base64(value):
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


# --------------------------------------------------------------------------------------
# Hand-written validation of built-in kinds (what the JSON schemas cannot express)
# --------------------------------------------------------------------------------------


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _meta_check(name_rule: str) -> Callable[[Mapping[str, Any]], list[Cause]]:
    def check(obj: Mapping[str, Any]) -> list[Cause]:
        return validate_object_meta(obj.get("metadata"), name_rule=name_rule)

    return check


def _str_problems(path: str, value: str, problems: list[str]) -> list[Cause]:
    return [invalid_value(path, value, m) for m in problems]


def _label_selector(selector: Any, path: str) -> list[Cause]:
    """`ValidateLabelSelector`."""
    if not isinstance(selector, Mapping):
        return []
    out = _labels(selector.get("matchLabels"), _child(path, "matchLabels"))
    for i, expr in enumerate(_list(selector.get("matchExpressions"))):
        epath = _index(_child(path, "matchExpressions"), i)
        if not isinstance(expr, Mapping):
            continue
        op = expr.get("operator")
        values = _list(expr.get("values"))
        if op in ("In", "NotIn"):
            if not values:
                out.append(
                    required(
                        _child(epath, "values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    )
                )
        elif op in ("Exists", "DoesNotExist"):
            if values:
                out.append(
                    forbidden(
                        _child(epath, "values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            out.append(
                invalid_value(_child(epath, "operator"), op or "", "not a valid selector operator")
            )
        key = _str(expr.get("key"))
        out += _str_problems(_child(epath, "key"), key, qualified_name_problems(key))
        for value in values:
            if isinstance(value, str):
                out += _str_problems(
                    _index(_child(epath, "values"), 0), value, label_value_problems(value)
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
    for expr in _list(selector.get("matchExpressions")):
        if not isinstance(expr, Mapping):
            continue
        key, op = _str(expr.get("key")), expr.get("operator")
        values = _list(expr.get("values"))
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


_ENV_FIELD_PATHS: Final = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
_PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")
_TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_PROBE_HANDLERS: Final = ("exec", "httpGet", "tcpSocket", "grpc")


def _probe(probe: Any, path: str, *, liveness_like: bool) -> list[Cause]:
    if not isinstance(probe, Mapping):
        return []
    out: list[Cause] = []
    handlers = [h for h in _PROBE_HANDLERS if probe.get(h) is not None]
    if not handlers:
        out.append(required(path, "must specify a handler type"))
    for extra in handlers[1:]:
        out.append(forbidden(_child(path, extra), "may not specify more than 1 handler type"))
    if handlers and handlers[0] == "exec" and not _list(_get(probe, "exec", "command")):
        out.append(required(_child(_child(path, "exec"), "command")))
    for key in (
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ):
        value = probe.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            out.append(
                invalid_value(_child(path, key), value, "must be greater than or equal to 0")
            )
    threshold = probe.get("successThreshold")
    if liveness_like and isinstance(threshold, int) and threshold not in (0, 1):
        out.append(invalid_value(_child(path, "successThreshold"), threshold, "must be 1"))
    return out


def _env(env: list[Any], path: str) -> list[Cause]:
    out: list[Cause] = []
    for i, var in enumerate(env):
        if not isinstance(var, Mapping):
            continue
        vpath = _index(path, i)
        name = _str(var.get("name"))
        if not name:
            out.append(required(_child(vpath, "name")))
        elif any(not (32 <= ord(c) < 127) or c == "=" for c in name):
            out.append(
                invalid_value(
                    _child(vpath, "name"),
                    name,
                    "a valid environment variable "
                    "name must consist only of printable ASCII characters other "
                    "than '='",
                )
            )
        source = var.get("valueFrom")
        if not isinstance(source, Mapping):
            continue
        fpath = _child(vpath, "valueFrom")
        kinds = [
            k
            for k in (
                "fieldRef",
                "resourceFieldRef",
                "configMapKeyRef",
                "secretKeyRef",
                "fileKeyRef",
            )
            if source.get(k) is not None
        ]
        if not kinds:
            out.append(
                invalid_value(
                    fpath,
                    "",
                    "must specify one of: `fieldRef`, "
                    "`resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                )
            )
        if var.get("value"):
            if kinds:
                out.append(
                    invalid_value(fpath, "", "may not be specified when `value` is not empty")
                )
        elif len(kinds) > 1:
            out.append(
                invalid_value(fpath, "", "may not have more than one field specified at a time")
            )
        ref = source.get("fieldRef")
        if isinstance(ref, Mapping):
            out += _field_ref(ref, _child(fpath, "fieldRef"))
    return out


def _field_ref(ref: Mapping[str, Any], path: str) -> list[Cause]:
    field_path = _str(ref.get("fieldPath"))
    api_version = ref.get("apiVersion") or "v1"  # defaulted
    if not field_path:
        return [required(_child(path, "fieldPath"))]
    if api_version != "v1":
        return [
            invalid_value(
                _child(path, "fieldPath"),
                field_path,
                f"error converting fieldPath: unsupported pod version: {api_version}",
            )
        ]
    if m := re.fullmatch(r"(metadata\.(?:labels|annotations))\['(.*)'\]", field_path):
        return _str_problems(path, m.group(2), qualified_name_problems(m.group(2)))
    if "[" in field_path:
        return [invalid_value(path, field_path.split("[", 1)[0], "does not support subscript")]
    if field_path not in _ENV_FIELD_PATHS:
        return [not_supported(_child(path, "fieldPath"), field_path, _ENV_FIELD_PATHS)]
    return []


def _tolerations(tolerations: list[Any], path: str) -> list[Cause]:
    out: list[Cause] = []
    for i, tol in enumerate(tolerations):
        if not isinstance(tol, Mapping):
            continue
        tpath = _index(path, i)
        key = _str(tol.get("key"))
        operator = tol.get("operator") or "Equal"
        effect = _str(tol.get("effect"))
        if key:
            out += _str_problems(_child(tpath, "key"), key, qualified_name_problems(key))
        elif operator != "Exists":
            out.append(
                invalid_value(
                    _child(tpath, "operator"),
                    _str(tol.get("operator")),
                    "operator must be Exists when `key` is empty, which means "
                    '"match all values and all keys"',
                )
            )
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            out.append(
                invalid_value(
                    _child(tpath, "effect"),
                    effect,
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                )
            )
        value = _str(tol.get("value"))
        if operator == "Equal":
            if problems := label_value_problems(value):
                out.append(invalid_value(_child(tpath, "operator"), value, ";".join(problems)))
        elif operator == "Exists":
            if value:
                out.append(
                    invalid_value(
                        _child(tpath, "operator"),
                        GoRepr(
                            f'core.Toleration{{Key:{_go_quote(key)}, Operator:"Exists", '
                            f"Value:{_go_quote(value)}, Effect:{_go_quote(effect)}}}"
                        ),
                        "value must be empty when `operator` is 'Exists'",
                    )
                )
        else:
            out.append(not_supported(_child(tpath, "operator"), operator, ("Equal", "Exists")))
        if effect and effect not in _TAINT_EFFECTS:
            out.append(not_supported(_child(tpath, "effect"), effect, _TAINT_EFFECTS))
    return out


def _pointer(value: Any) -> str:
    return "(*string)(nil)" if value is None else f"(*string)({_go_quote(str(value))})"


def _containers(
    containers: list[Any], path: str, claim_names: set[str], *, seen: set[str], init: bool
) -> list[Cause]:
    out: list[Cause] = []
    for i, ctr in enumerate(containers):
        if not isinstance(ctr, Mapping):
            continue
        cpath = _index(path, i)
        name = _str(ctr.get("name"))
        if not name:
            out.append(required(_child(cpath, "name")))
        else:
            out += _str_problems(_child(cpath, "name"), name, dns1123_label_problems(name))
            if name in seen:
                out.append(duplicate(_child(cpath, "name"), name))
            seen.add(name)
        if not _str(ctr.get("image")):
            out.append(required(_child(cpath, "image")))
        policy = ctr.get("imagePullPolicy")
        if policy is not None and policy not in _PULL_POLICIES:
            out.append(not_supported(_child(cpath, "imagePullPolicy"), policy, _PULL_POLICIES))
        out += _env(_list(ctr.get("env")), _child(cpath, "env"))
        for j, port in enumerate(_list(ctr.get("ports"))):
            number = port.get("containerPort") if isinstance(port, Mapping) else None
            if (isinstance(number, int) and not 1 <= number <= 65535) or number is None:
                out.append(
                    invalid_value(
                        _child(_index(_child(cpath, "ports"), j), "containerPort"),
                        number or 0,
                        "must be between 1 and 65535, inclusive",
                    )
                )
        restartable = ctr.get("restartPolicy") == "Always"
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if ctr.get(probe) is None:
                continue
            if init and not restartable:
                out.append(
                    forbidden(
                        _child(cpath, probe),
                        "may not be set for init containers without restartPolicy=Always",
                    )
                )
            else:
                out += _probe(
                    ctr[probe], _child(cpath, probe), liveness_like=probe != "readinessProbe"
                )
        if not init and ctr.get("restartPolicy") is not None:
            out.append(
                forbidden(_child(cpath, "restartPolicy"), "may not be set for non-init containers")
            )
        claims_path = _child(_child(cpath, "resources"), "claims")
        claim_seen: set[str] = set()
        for j, claim in enumerate(_list(_get(ctr, "resources", "claims"))):
            cname = _str(claim.get("name")) if isinstance(claim, Mapping) else ""
            if not cname:
                out.append(required(_index(claims_path, j)))
                continue
            if cname in claim_seen:
                out.append(duplicate(_index(claims_path, j), cname))
            claim_seen.add(cname)
            if cname not in claim_names:
                detail = "must be one of the names in pod.spec.resourceClaims"
                detail += (
                    ": " + ", ".join(sorted(claim_names)) if claim_names else " which is empty"
                )
                out.append(not_found(_index(claims_path, j), cname, detail))
    return out


def validate_pod_spec(spec: Any, path: str, *, template: bool = False) -> list[Cause]:
    """The parts of `ValidatePodSpec` that this project's pods and templates exercise."""
    if not isinstance(spec, Mapping):
        return [required(_child(path, "containers"))]
    out: list[Cause] = []
    claim_names: set[str] = set()
    for i, claim in enumerate(_list(spec.get("resourceClaims"))):
        if not isinstance(claim, Mapping):
            continue
        cpath = _index(_child(path, "resourceClaims"), i)
        name = _str(claim.get("name"))
        if not name:
            out.append(required(_child(cpath, "name")))
        elif name in claim_names:
            out.append(duplicate(_child(cpath, "name"), name))
        else:
            out += _str_problems(_child(cpath, "name"), name, dns1123_label_problems(name))
            claim_names.add(name)
        by_name, by_template = (
            claim.get("resourceClaimName"),
            claim.get("resourceClaimTemplateName"),
        )
        shown = GoRepr(
            f"core.PodResourceClaim{{Name:{_go_quote(name)}, ResourceClaimName:"
            f"{_pointer(by_name)}, ResourceClaimTemplateName:{_pointer(by_template)}}}"
        )
        if by_name is not None and by_template is not None:
            out.append(
                invalid_value(
                    cpath,
                    shown,
                    "at most one of `resourceClaimName` or "
                    "`resourceClaimTemplateName` may be specified",
                )
            )
        if by_name is None and by_template is None:
            out.append(
                invalid_value(
                    cpath,
                    shown,
                    "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
                )
            )
        for key, value in (
            ("resourceClaimName", by_name),
            ("resourceClaimTemplateName", by_template),
        ):
            if isinstance(value, str):
                out += _str_problems(_child(cpath, key), value, dns1123_subdomain_problems(value))
    containers = _list(spec.get("containers"))
    seen: set[str] = set()
    if not containers:
        out.append(required(_child(path, "containers")))
    out += _containers(containers, _child(path, "containers"), claim_names, seen=seen, init=False)
    out += _containers(
        _list(spec.get("initContainers")),
        _child(path, "initContainers"),
        claim_names,
        seen=seen,
        init=True,
    )
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in ("Always", "OnFailure", "Never"):
        out.append(
            not_supported(_child(path, "restartPolicy"), policy, ("Always", "OnFailure", "Never"))
        )
    dns = spec.get("dnsPolicy")
    if dns is not None and dns not in (
        "ClusterFirstWithHostNet",
        "ClusterFirst",
        "Default",
        "None",
    ):
        out.append(
            not_supported(
                _child(path, "dnsPolicy"),
                dns,
                ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"),
            )
        )
    out += _labels(spec.get("nodeSelector"), _child(path, "nodeSelector"))
    out += _tolerations(_list(spec.get("tolerations")), _child(path, "tolerations"))
    for key, check in (
        ("serviceAccountName", dns1123_subdomain_problems),
        ("nodeName", dns1123_subdomain_problems),
        ("priorityClassName", dns1123_subdomain_problems),
        ("hostname", dns1123_label_problems),
        ("subdomain", dns1123_label_problems),
    ):
        value = spec.get(key)
        if isinstance(value, str) and value:
            out += _str_problems(_child(path, key), value, check(value))
    volumes: set[str] = set()
    for i, vol in enumerate(_list(spec.get("volumes"))):
        vname = _str(_get(vol, "name"))
        vpath = _child(_index(_child(path, "volumes"), i), "name")
        if not vname:
            out.append(required(vpath))
        elif vname in volumes:
            out.append(duplicate(vpath, vname))
        else:
            out += _str_problems(vpath, vname, dns1123_label_problems(vname))
        volumes.add(vname)
    for kind in ("containers", "initContainers"):
        for i, ctr in enumerate(_list(spec.get(kind))):
            for j, mount in enumerate(_list(_get(ctr, "volumeMounts"))):
                mpath = _index(_child(_index(_child(path, kind), i), "volumeMounts"), j)
                mname = _str(_get(mount, "name"))
                if not mname:
                    out.append(required(_child(mpath, "name")))
                elif mname not in volumes:
                    out.append(not_found(_child(mpath, "name"), mname))
                if not _str(_get(mount, "mountPath")):
                    out.append(required(_child(mpath, "mountPath")))
    if template and spec.get("ephemeralContainers"):
        out.append(
            forbidden(
                _child(path, "ephemeralContainers"),
                "ephemeral containers not allowed in pod template",
            )
        )
    return out


def _pod(obj: Mapping[str, Any]) -> list[Cause]:
    return validate_pod_spec(obj.get("spec"), "spec")


def _workload(kind: str) -> Callable[[Mapping[str, Any]], list[Cause]]:
    """DaemonSet/Deployment/ReplicaSet/StatefulSet: selector vs template, restartPolicy."""

    def check(obj: Mapping[str, Any]) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            return []
        out: list[Cause] = []
        selector = spec.get("selector")
        template = spec.get("template") if isinstance(spec.get("template"), Mapping) else {}
        labels = _get(template, "metadata", "labels")
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
                        _string_map_repr(labels),
                        "`selector` does not match template `labels`",
                    )
                )
        elif selector is None and kind == "DaemonSet":
            # A nil selector matches nothing; only DaemonSet validation reports it this way.
            out.append(
                invalid_value(
                    "spec.template.metadata.labels",
                    _string_map_repr(labels),
                    "`selector` does not match template `labels`",
                )
            )
        out += _labels(labels, "spec.template.metadata.labels")
        out += _annotations(
            _get(template, "metadata", "annotations"), "spec.template.metadata.annotations"
        )
        out += validate_pod_spec(template.get("spec"), "spec.template.spec", template=True)
        policy = _get(template, "spec", "restartPolicy")
        if policy is not None and policy != "Always":
            out.append(not_supported("spec.template.spec.restartPolicy", policy, ["Always"]))
        if _get(template, "spec", "activeDeadlineSeconds") is not None and kind == "DaemonSet":
            out.append(
                invalid_value(
                    "spec.template.spec.activeDeadlineSeconds",
                    _get(template, "spec", "activeDeadlineSeconds"),
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


def _job(obj: Mapping[str, Any]) -> list[Cause]:
    template = _get(obj, "spec", "template")
    out = validate_pod_spec(_get(template, "spec"), "spec.template.spec", template=True)
    policy = _get(template, "spec", "restartPolicy")
    if policy not in ("OnFailure", "Never"):
        out.append(
            not_supported("spec.template.spec.restartPolicy", policy or "", ["OnFailure", "Never"])
        )
    return out


# -- DRA (resource.k8s.io/v1) ----------------------------------------------------------

_ALLOCATION_MODES: Final = ("All", "ExactCount")


def _driver_name(value: Any, path: str) -> list[Cause]:
    """`ValidateCSIDriverName`, which DRA reuses for driver names."""
    name = _str(value)
    if not name:
        return [required(path)]
    out = []
    if len(name) > 63:
        out.append(too_long(path, 63))
    out += _str_problems(path, name, dns1123_subdomain_problems(name.lower()))
    return out


def _opaque(config: Any, path: str) -> list[Cause]:
    opaque = _get(config, "opaque")
    if not isinstance(opaque, Mapping):
        return [required(_child(path, "opaque"))]
    opath = _child(path, "opaque")
    out = _driver_name(opaque.get("driver"), _child(opath, "driver"))
    params = opaque.get("parameters")
    ppath = _child(opath, "parameters")
    if params is None:
        out.append(required(ppath))
    elif len(json.dumps(params, separators=(",", ":"))) > 10 * 1024:
        out.append(too_long(ppath, 10 * 1024))
    elif not isinstance(params, Mapping):
        out.append(invalid_value(ppath, "<value omitted>", "must be a valid JSON object"))
    return out


def _request_names(devices: Any) -> dict[str, set[str] | None]:
    names: dict[str, set[str] | None] = {}
    for request in _list(_get(devices, "requests")):
        name = _str(_get(request, "name"))
        subs = _list(_get(request, "firstAvailable"))
        names[name] = {_str(_get(s, "name")) for s in subs} if subs else None
    return names


def _request_ref(name: Any, path: str, names: dict[str, set[str] | None]) -> list[Cause]:
    text = _str(name)
    detail = (
        "must be the name of a request in the claim or the name of a request and a "
        "subrequest separated by '/'"
    )
    segments = text.split("/")
    if len(segments) > 2:
        return [invalid_value(path, text, detail)]
    out = []
    for segment in segments:
        out += _str_problems(path, segment, dns1123_label_problems(segment))
    subs = names.get(segments[0], set())
    known = segments[0] in names and (
        len(segments) == 1 or (subs is not None and segments[1] in subs)
    )
    if not known:
        out.append(invalid_value(path, text, detail))
    return out


def _allocation_mode(request: Mapping[str, Any], path: str) -> list[Cause]:
    mode = request.get("allocationMode") or "ExactCount"  # defaulted
    count = request.get("count")
    if mode == "All":
        if count not in (None, 0):
            return [
                invalid_value(
                    _child(path, "count"),
                    count,
                    "must not be specified when allocationMode is 'All'",
                )
            ]
    elif mode == "ExactCount":
        if isinstance(count, int) and count <= 0:
            return [invalid_value(_child(path, "count"), count, "must be greater than zero")]
    else:
        return [not_supported(_child(path, "allocationMode"), mode, _ALLOCATION_MODES)]
    return []


def _device_class_request(request: Mapping[str, Any], path: str) -> list[Cause]:
    out: list[Cause] = []
    cls = _str(request.get("deviceClassName"))
    if not cls:
        out.append(required(_child(path, "deviceClassName")))
    else:
        out += _str_problems(_child(path, "deviceClassName"), cls, dns1123_subdomain_problems(cls))
    out += _selectors(request.get("selectors"), _child(path, "selectors"))
    out += _allocation_mode(request, path)
    return out


def _selectors(selectors: Any, path: str) -> list[Cause]:
    out: list[Cause] = []
    items = _list(selectors)
    if len(items) > 32:
        out.append(too_many(path, len(items), 32))
    for i, sel in enumerate(items):
        spath = _index(path, i)
        cel = _get(sel, "cel")
        if not isinstance(cel, Mapping):
            out.append(required(_child(spath, "cel")))
            continue
        expr = cel.get("expression")
        if isinstance(expr, str) and len(expr) > 10 * 1024:
            out.append(too_long(_child(_child(spath, "cel"), "expression"), 10 * 1024))
    return out


def validate_device_claim(devices: Any, path: str) -> list[Cause]:
    """`validateDeviceClaim`: requests, constraints and config of a claim (or template)."""
    if not isinstance(devices, Mapping):
        return []
    out: list[Cause] = []
    names = _request_names(devices)
    requests = _list(devices.get("requests"))
    rpath = _child(path, "requests")
    if len(requests) > 32:
        out.append(too_many(rpath, len(requests), 32))
    seen: set[str] = set()
    for i, request in enumerate(requests):
        if not isinstance(request, Mapping):
            continue
        qpath = _index(rpath, i)
        name = _str(request.get("name"))
        out += (
            _str_problems(_child(qpath, "name"), name, dns1123_label_problems(name))
            if name
            else [required(_child(qpath, "name"))]
        )
        exactly = request.get("exactly")
        first = _list(request.get("firstAvailable"))
        if exactly is None and not first:
            out.append(required(qpath, "exactly one of `exactly` or `firstAvailable` is required"))
        elif exactly is not None and first:
            out.append(
                invalid_value(
                    qpath,
                    None,
                    "exactly one of `exactly` or `firstAvailable` "
                    "is required, but multiple fields are set",
                )
            )
        elif first:
            sub_seen: set[str] = set()
            for j, sub in enumerate(first):
                if not isinstance(sub, Mapping):
                    continue
                spath = _index(_child(qpath, "firstAvailable"), j)
                sname = _str(sub.get("name"))
                out += (
                    _str_problems(_child(spath, "name"), sname, dns1123_label_problems(sname))
                    if sname
                    else [required(_child(spath, "name"))]
                )
                if sname in sub_seen:
                    out.append(duplicate(spath, sname))
                sub_seen.add(sname)
                out += _device_class_request(sub, spath)
        elif isinstance(exactly, Mapping):
            out += _device_class_request(exactly, _child(qpath, "exactly"))
        if name and name in seen:
            out.append(duplicate(qpath, name))
        seen.add(name)
    for i, constraint in enumerate(_list(devices.get("constraints"))):
        cpath = _index(_child(path, "constraints"), i)
        for j, ref in enumerate(_list(_get(constraint, "requests"))):
            out += _request_ref(ref, _index(_child(cpath, "requests"), j), names)
        if (
            _get(constraint, "matchAttribute") is None
            and _get(constraint, "distinctAttribute") is None
        ):
            out.append(required(_child(cpath, "matchAttribute")))
    for i, config in enumerate(_list(devices.get("config"))):
        cpath = _index(_child(path, "config"), i)
        ref_seen: set[str] = set()
        for j, ref in enumerate(_list(_get(config, "requests"))):
            out += _request_ref(ref, _index(_child(cpath, "requests"), j), names)
            if isinstance(ref, str) and ref in ref_seen:
                out.append(duplicate(_index(_child(cpath, "requests"), j), ref))
            ref_seen.add(_str(ref))
        out += _opaque(config, cpath)
    return out


def _pool_name(value: Any, path: str) -> list[Cause]:
    name = _str(value)
    if not name:
        return [required(path)]
    out = [too_long(path, 253)] if len(name) > 253 else []
    for part in name.split("/"):
        out += _str_problems(path, part, dns1123_subdomain_problems(part))
    return out


def _allocation(allocation: Any, path: str, names: dict[str, set[str] | None]) -> list[Cause]:
    if not isinstance(allocation, Mapping):
        return []
    out: list[Cause] = []
    dpath = _child(path, "devices")
    for i, result in enumerate(_list(_get(allocation, "devices", "results"))):
        if not isinstance(result, Mapping):
            continue
        rpath = _index(_child(dpath, "results"), i)
        out += _request_ref(result.get("request"), _child(rpath, "request"), names)
        out += _driver_name(result.get("driver"), _child(rpath, "driver"))
        out += _pool_name(result.get("pool"), _child(rpath, "pool"))
        device = _str(result.get("device"))
        out += _str_problems(_child(rpath, "device"), device, dns1123_label_problems(device))
    for i, config in enumerate(_list(_get(allocation, "devices", "config"))):
        cpath = _index(_child(dpath, "config"), i)
        source = _get(config, "source")
        if not source:
            out.append(required(_child(cpath, "source")))
        elif source not in ("FromClaim", "FromClass"):
            out.append(not_supported(_child(cpath, "source"), source, ("FromClaim", "FromClass")))
        for j, ref in enumerate(_list(_get(config, "requests"))):
            out += _request_ref(ref, _index(_child(cpath, "requests"), j), names)
        out += _opaque(config, cpath)
    return out


def _resource_claim(obj: Mapping[str, Any]) -> list[Cause]:
    devices = _get(obj, "spec", "devices")
    out = validate_device_claim(devices, "spec.devices")
    status = obj.get("status")
    if isinstance(status, Mapping):
        names = _request_names(devices)
        reserved = _list(status.get("reservedFor"))
        uids: set[str] = set()
        for i, ref in enumerate(reserved):
            rpath = _index("status.reservedFor", i)
            for key in ("resource", "name", "uid"):
                if not _str(_get(ref, key)):
                    out.append(required(_child(rpath, key)))
            uid = _str(_get(ref, "uid"))
            if uid and uid in uids:
                out.append(duplicate(rpath, uid))
            uids.add(uid)
        if reserved and status.get("allocation") is None:
            out.append(
                forbidden("status.reservedFor", "may not be specified when `allocated` is not set")
            )
        out += _allocation(status.get("allocation"), "status.allocation", names)
    return out


def _resource_claim_template(obj: Mapping[str, Any]) -> list[Cause]:
    template = _get(obj, "spec")
    out = _labels(_get(template, "metadata", "labels"), "spec.metadata.labels")
    out += _annotations(_get(template, "metadata", "annotations"), "spec.metadata.annotations")
    return out + validate_device_claim(_get(template, "spec", "devices"), "spec.spec.devices")


def _device_class(obj: Mapping[str, Any]) -> list[Cause]:
    out = _selectors(_get(obj, "spec", "selectors"), "spec.selectors")
    for i, config in enumerate(_list(_get(obj, "spec", "config"))):
        out += _opaque(config, _index("spec.config", i))
    return out


def _resource_slice(obj: Mapping[str, Any]) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    out = _driver_name(spec.get("driver"), "spec.driver")
    pool = spec.get("pool") if isinstance(spec.get("pool"), Mapping) else {}
    out += _pool_name(pool.get("name"), "spec.pool.name")
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or count <= 0:
        out.append(
            invalid_value("spec.pool.resourceSliceCount", count or 0, "must be greater than zero")
        )
    generation = pool.get("generation")
    if isinstance(generation, int) and generation < 0:
        out.append(
            invalid_value(
                "spec.pool.generation", generation, "must be greater than or equal to zero"
            )
        )
    chosen = []
    node_name = spec.get("nodeName")
    if node_name is not None:
        if node_name:
            chosen.append("`nodeName`")
            out += _str_problems(
                "spec.nodeName", _str(node_name), dns1123_subdomain_problems(_str(node_name))
            )
        else:
            out.append(
                invalid_value(
                    "spec.nodeName", node_name, "must be either unset or set to a non-empty string"
                )
            )
    if spec.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        terms = _list(_get(spec, "nodeSelector", "nodeSelectorTerms"))
        if len(terms) != 1:
            out.append(
                invalid_value(
                    "spec.nodeSelector.nodeSelectorTerms",
                    GoRepr(f"[]core.NodeSelectorTerm{{...{len(terms)} terms...}}"),
                    "must have exactly one node selector term",
                )
            )
    for key in ("allNodes", "perDeviceNodeSelection"):
        value = spec.get(key)
        if value is True:
            chosen.append(f"`{key}`")
        elif value is not None:
            out.append(invalid_value(f"spec.{key}", value, "must be either unset or set to true"))
    options = "`nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"
    if not chosen:
        out.append(required("spec", f"exactly one of {options} is required"))
    elif len(chosen) > 1:
        out.append(
            invalid_value(
                "spec",
                "{" + ", ".join(chosen) + "}",
                f"exactly one of {options} is required, but multiple fields are set",
            )
        )
    if spec.get("sharedCounters") is not None and spec.get("devices") is not None:
        out.append(
            invalid_value("spec", "", "only one of `sharedCounters` or `devices` is allowed")
        )
    seen: set[str] = set()
    for i, device in enumerate(_list(spec.get("devices"))):
        dpath = _index("spec.devices", i)
        name = _str(_get(device, "name"))
        out += _str_problems(_child(dpath, "name"), name, dns1123_label_problems(name))
        if name in seen:
            out.append(duplicate(dpath, name))
        seen.add(name)
        attributes = _get(device, "attributes")
        if isinstance(attributes, Mapping):
            for key, attr in attributes.items():
                apath = _index(_child(dpath, "attributes"), key)
                kinds = [
                    k for k in ("int", "bool", "string", "version") if _get(attr, k) is not None
                ]
                if len(kinds) != 1:
                    out.append(
                        invalid_value(
                            apath, GoRepr(go_repr(attr)), "exactly one value must be specified"
                        )
                    )
    return out


# -- RBAC, coordination, nodes ----------------------------------------------------------

_RBAC: Final = "rbac.authorization.k8s.io"


def _policy_rules(obj: Mapping[str, Any], *, namespaced: bool) -> list[Cause]:
    out: list[Cause] = []
    if not namespaced and obj.get("aggregationRule") is not None:
        return out
    for i, rule in enumerate(_list(obj.get("rules"))):
        rpath = _index("rules", i)
        if not isinstance(rule, Mapping):
            continue
        if not _list(rule.get("verbs")):
            out.append(required(_child(rpath, "verbs"), "verbs must contain at least one value"))
        urls = _list(rule.get("nonResourceURLs"))
        if urls:
            if namespaced:
                out.append(
                    invalid_value(
                        _child(rpath, "nonResourceURLs"),
                        GoRepr(go_repr(urls)),
                        "namespaced rules cannot apply to non-resource URLs",
                    )
                )
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                out.append(
                    invalid_value(
                        _child(rpath, "nonResourceURLs"),
                        GoRepr(go_repr(urls)),
                        "rules cannot apply to both regular resources and non-resource URLs",
                    )
                )
            continue
        if not _list(rule.get("apiGroups")):
            out.append(
                required(
                    _child(rpath, "apiGroups"), "resource rules must supply at least one api group"
                )
            )
        if not _list(rule.get("resources")):
            out.append(
                required(
                    _child(rpath, "resources"), "resource rules must supply at least one resource"
                )
            )
    return out


def _binding(
    kinds: tuple[str, ...], *, namespaced: bool
) -> Callable[[Mapping[str, Any]], list[Cause]]:
    def check(obj: Mapping[str, Any]) -> list[Cause]:
        out: list[Cause] = []
        ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), Mapping) else {}
        if ref.get("apiGroup") != _RBAC:
            out.append(not_supported("roleRef.apiGroup", _str(ref.get("apiGroup")), [_RBAC]))
        if ref.get("kind") not in kinds:
            out.append(not_supported("roleRef.kind", _str(ref.get("kind")), kinds))
        name = _str(ref.get("name"))
        if not name:
            out.append(required("roleRef.name"))
        else:
            out += _str_problems("roleRef.name", name, path_segment_problems(name))
        for i, subject in enumerate(_list(obj.get("subjects"))):
            spath = _index("subjects", i)
            if not isinstance(subject, Mapping):
                continue
            sname = _str(subject.get("name"))
            if not sname:
                out.append(required(_child(spath, "name")))
            skind = subject.get("kind")
            group = subject.get("apiGroup")
            if skind == "ServiceAccount":
                if sname:
                    out += _str_problems(
                        _child(spath, "name"), sname, dns1123_subdomain_problems(sname)
                    )
                if group:
                    out.append(not_supported(_child(spath, "apiGroup"), group, [""]))
                if not namespaced and not subject.get("namespace"):
                    out.append(required(_child(spath, "namespace")))
            elif skind in ("User", "Group"):
                if group not in (None, "", _RBAC):  # "" and absent are defaulted to rbac
                    out.append(not_supported(_child(spath, "apiGroup"), group, [_RBAC]))
            else:
                out.append(
                    not_supported(
                        _child(spath, "kind"), _str(skind), ["ServiceAccount", "User", "Group"]
                    )
                )
        return out

    return check


def _lease(obj: Mapping[str, Any]) -> list[Cause]:
    out: list[Cause] = []
    duration = _get(obj, "spec", "leaseDurationSeconds")
    if isinstance(duration, int) and duration <= 0:
        out.append(invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = _get(obj, "spec", "leaseTransitions")
    if isinstance(transitions, int) and transitions < 0:
        out.append(
            invalid_value(
                "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
            )
        )
    return out


def _node_object(obj: Mapping[str, Any]) -> list[Cause]:
    out: list[Cause] = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(_list(_get(obj, "spec", "taints"))):
        tpath = _index("spec.taints", i)
        key = _str(_get(taint, "key"))
        out += _str_problems(_child(tpath, "key"), key, qualified_name_problems(key))
        value = _str(_get(taint, "value"))
        if problems := label_value_problems(value):
            out.append(invalid_value(_child(tpath, "value"), value, ";".join(problems)))
        effect = _str(_get(taint, "effect"))
        if not effect:
            out.append(required(_child(tpath, "effect")))
        elif effect not in _TAINT_EFFECTS:
            out.append(not_supported(_child(tpath, "effect"), effect, _TAINT_EFFECTS))
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

_EXTRA_CHECKS: Final[
    Mapping[tuple[str, str], tuple[Callable[[Mapping[str, Any]], list[Cause]], ...]]
] = {
    ("", "Pod"): (_SUBDOMAIN_META, _pod),
    ("", "Node"): (_SUBDOMAIN_META, _node_object),
    ("", "Namespace"): (_meta_check("dns-label"),),
    ("", "Service"): (_meta_check("dns1035-label"),),
    ("", "ServiceAccount"): (_SUBDOMAIN_META,),
    ("", "ConfigMap"): (_SUBDOMAIN_META,),
    ("", "Secret"): (_SUBDOMAIN_META,),
    ("", "Event"): (_SUBDOMAIN_META,),
    ("events.k8s.io", "Event"): (_SUBDOMAIN_META,),
    ("apps", "DaemonSet"): (_SUBDOMAIN_META, _workload("DaemonSet")),
    ("apps", "Deployment"): (_SUBDOMAIN_META, _workload("Deployment")),
    ("apps", "ReplicaSet"): (_SUBDOMAIN_META, _workload("ReplicaSet")),
    ("apps", "StatefulSet"): (_SUBDOMAIN_META, _workload("StatefulSet")),
    ("batch", "Job"): (_SUBDOMAIN_META, _job),
    ("coordination.k8s.io", "Lease"): (_SUBDOMAIN_META, _lease),
    ("scheduling.k8s.io", "PriorityClass"): (_SUBDOMAIN_META,),
    ("resource.k8s.io", "ResourceClaim"): (_SUBDOMAIN_META, _resource_claim),
    ("resource.k8s.io", "ResourceClaimTemplate"): (_SUBDOMAIN_META, _resource_claim_template),
    ("resource.k8s.io", "DeviceClass"): (_SUBDOMAIN_META, _device_class),
    ("resource.k8s.io", "ResourceSlice"): (_SUBDOMAIN_META, _resource_slice),
    (_RBAC, "Role"): (_PATH_META, lambda o: _policy_rules(o, namespaced=True)),
    (_RBAC, "ClusterRole"): (_PATH_META, lambda o: _policy_rules(o, namespaced=False)),
    (_RBAC, "RoleBinding"): (_PATH_META, _binding(("Role", "ClusterRole"), namespaced=True)),
    (_RBAC, "ClusterRoleBinding"): (_PATH_META, _binding(("ClusterRole",), namespaced=False)),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): (_SUBDOMAIN_META,),
}


def _immutable(*path: str) -> Callable[[Mapping[str, Any], Mapping[str, Any]], list[Cause]]:
    """`ValidateImmutableField` at one path (absent and null count as equal)."""

    def check(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
        a, b = _get(new, *path), _get(old, *path)
        if _json_equal(a, b):
            return []
        return [
            invalid_value(
                ".".join(path), GoRepr(go_repr(a)) if a is not None else None, "field is immutable"
            )
        ]

    return check


def _allocation_immutable(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    a, b = _get(new, "status", "allocation"), _get(old, "status", "allocation")
    if a is not None and b is not None and not _json_equal(a, b):
        return [invalid_value("status.allocation", GoRepr(go_repr(a)), "field is immutable")]
    return []


def _role_ref_immutable(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    a, b = new.get("roleRef"), old.get("roleRef")
    if _json_equal(a, b):
        return []
    ref = a if isinstance(a, Mapping) else {}
    shown = GoRepr(
        f"rbac.RoleRef{{APIGroup:{_go_quote(_str(ref.get('apiGroup')))}, "
        f"Kind:{_go_quote(_str(ref.get('kind')))}, "
        f"Name:{_go_quote(_str(ref.get('name')))}}}"
    )
    return [invalid_value("roleRef", shown, "cannot change roleRef")]


_MUTABLE_POD_SPEC: Final = frozenset(
    {"activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"}
)


def _pod_spec_immutable(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """Pod updates may change images, deadlines, tolerations (additions) and gates only."""
    a, b = _get(new, "spec"), _get(old, "spec")
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return []

    def comparable(spec: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in spec.items() if k not in _MUTABLE_POD_SPEC}
        for kind in ("containers", "initContainers"):
            if isinstance(out.get(kind), list):
                out[kind] = [
                    {k: v for k, v in c.items() if k != "image"} if isinstance(c, Mapping) else c
                    for c in out[kind]
                ]
        return out

    if _json_equal(comparable(a), comparable(b)):
        return []
    return [
        forbidden(
            "spec",
            "pod updates may not change fields other than "
            "`spec.containers[*].image`,`spec.initContainers[*].image`,"
            "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions "
            "to existing tolerations),`spec.terminationGracePeriodSeconds` "
            "(allow it to be set to 1 if it was previously negative)",
        )
    ]


_UPDATE_CHECKS: Final[
    Mapping[
        tuple[str, str], tuple[Callable[[Mapping[str, Any], Mapping[str, Any]], list[Cause]], ...]
    ]
] = {
    ("", "Pod"): (_pod_spec_immutable,),
    ("apps", "DaemonSet"): (_immutable("spec", "selector"),),
    ("apps", "Deployment"): (_immutable("spec", "selector"),),
    ("apps", "ReplicaSet"): (_immutable("spec", "selector"),),
    ("apps", "StatefulSet"): (_immutable("spec", "selector"),),
    ("resource.k8s.io", "ResourceClaim"): (_immutable("spec"), _allocation_immutable),
    ("resource.k8s.io", "ResourceClaimTemplate"): (_immutable("spec"),),
    ("resource.k8s.io", "ResourceSlice"): (
        _immutable("spec", "driver"),
        _immutable("spec", "pool", "name"),
        _immutable("spec", "nodeName"),
    ),
    (_RBAC, "RoleBinding"): (_role_ref_immutable,),
    (_RBAC, "ClusterRoleBinding"): (_role_ref_immutable,),
}
