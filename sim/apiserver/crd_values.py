"""OpenAPI validation of custom resource values: jsonschema's checks, kube-openapi's words.

A CRD version's structural schema is compiled once into a draft 4 schema (OpenAPI v3 took
its validation keywords from draft 4) with Kubernetes' extensions spelled as jsonschema
reads them: x-kubernetes-int-or-string and nullable as types, the object's metadata left to
the server. Each violation is worded as the real server words it (`spec.numNodes in body
should be greater than or equal to 0`): clients, and tests/differential against a real
kube-apiserver, compare these texts. On update a value equal to its correlated old value is
not checked again (validation ratcheting), so objects stored under an older schema stay
updatable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from functools import cache
from types import MappingProxyType
from typing import Any, Final

from jsonschema import FormatChecker, ValidationError
from jsonschema.protocols import Validator

from sim.apiserver.crd_lists import correlate_items
from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import (
    INVALID,
    TYPE_INVALID,
    field_error,
    invalid_value,
    not_supported,
    required,
    too_long,
    too_many,
)
from sim.apiserver.go_format import go_float, go_number, go_quote
from sim.apiserver.json_schema import (
    BelowError,
    field_path,
    in_walk_order,
    required_keyword,
    validator_class,
)
from sim.apiserver.json_values import ABSENT, JSON, as_list, json_equal, json_type, str_list
from sim.apiserver.names_validation import dns1123_subdomain_problems
from sim.apiserver.numbers import INT64_MAX, INT64_MIN
from sim.apiserver.schema_nodes import Schema, additional_of, compile_pattern, properties_of
from sim.apiserver.string_formats import FORMAT_CHECKS

_TYPES: Final = frozenset({"array", "boolean", "integer", "number", "object", "string"})
# The keywords taken over as they are, by the JSON type their value must have.
_KEYWORDS: Final = MappingProxyType(
    {
        int: ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties"),
        float: ("maximum", "minimum", "multipleOf"),
        bool: ("exclusiveMaximum", "exclusiveMinimum", "uniqueItems"),
        list: ("enum",),
    }
)
_EMBEDDED: Final = "x-kubernetes-embedded-resource"


def _compile(s: Schema, *, root: bool = False) -> dict[str, Any]:
    """A schema node as jsonschema reads it; malformed parts (validate_crd refuses those)
    are left out rather than crashing admission."""
    out = {k: s[k] for kind, keys in _KEYWORDS.items() for k in keys if _is(s.get(k), kind)}
    if s.get(_EMBEDDED) is True:
        out[_EMBEDDED] = True
    if s.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    elif isinstance(s.get("type"), str) and s["type"] in _TYPES:
        out["type"] = [s["type"]]
    if "type" in out and s.get("nullable"):
        out["type"].append("null")
    if isinstance(s.get("pattern"), str) and compile_pattern(s["pattern"]) is not None:
        out["pattern"] = s["pattern"]
    if isinstance(s.get("format"), str) and s["format"] in FORMAT_CHECKS:
        out["format"] = s["format"]
    embedded = root or s.get(_EMBEDDED) is True
    # ObjectMeta is validated by the server, not by the CRD's schema.
    props = {
        k: _compile(v) for k, v in properties_of(s).items() if not (embedded and k == "metadata")
    }
    if props:
        out["properties"] = props
    if (addl := additional_of(s)) is not None:
        out["additionalProperties"] = _compile(addl)
    if names := [k for k in str_list(s.get("required")) if not (root and k == "metadata")]:
        out["required"] = names
    if isinstance(s.get("items"), Mapping):
        out["items"] = _compile(s["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if subs := [_compile(x) for x in as_list(s.get(key)) if isinstance(x, Mapping)]:
            out[key] = subs
    if isinstance(s.get("not"), Mapping):
        out["not"] = _compile(s["not"])
    return out


def _is(value: Any, kind: type) -> bool:
    """Whether a keyword's value is of JSON type `kind` (float: any number; bool apart)."""
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, int | float) if kind is float else isinstance(value, kind)


def _is_integer(value: Any) -> bool:
    """kube-openapi takes a float with an integral value (2.0) for an integer, up to 2^53
    (swag's IsFloat64AJSONInteger): not an integer beyond int64 that decoding made a float."""
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value) and value.is_integer() and abs(value) <= 2**53
    return isinstance(value, int)


def _multiple_of(
    validator: Validator, factor: float, value: Any, schema: Schema
) -> Iterator[ValidationError]:
    """go-openapi's multipleOf: a quotient within 1e-9 of a whole number passes (0.3 of 0.1)."""
    if not validator.is_type(value, "number") or factor <= 0 or not math.isfinite(value):
        return
    try:
        quotient = value / factor
        ok = math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9)
    except OverflowError:
        ok = isinstance(factor, int) and isinstance(value, int) and value % factor == 0
    if not ok:
        yield ValidationError(f"{value!r} is not a multiple of {factor!r}")


def _embedded_resource(
    validator: Validator, embedded: bool, value: Any, schema: Schema
) -> Iterator[ValidationError]:
    """x-kubernetes-embedded-resource: an object with apiVersion, kind and a valid name."""
    if not (embedded and isinstance(value, Mapping)):
        return
    for key in ("apiVersion", "kind"):
        if not value.get(key):
            yield BelowError("must not be empty", (key,))
    meta = value.get("metadata")
    if isinstance(meta, Mapping) and meta.get("name"):
        for problem in dns1123_subdomain_problems(str(meta["name"])):
            yield BelowError(problem, ("metadata", "name"), instance=meta["name"])


_Validator: Final = validator_class(
    {
        "required": required_keyword(lambda obj, name: name not in obj),
        "multipleOf": _multiple_of,
        _EMBEDDED: _embedded_resource,
    },
    integer=_is_integer,
)


@cache
def _formats() -> FormatChecker:
    """The string formats kube-apiserver checks (string_formats.py); others pass."""
    checker = FormatChecker(formats=())
    for name, check in FORMAT_CHECKS.items():
        checker.checks(name)(lambda value, check=check: not isinstance(value, str) or check(value))
    return checker


class ValueSchema:
    """One schema node (a CRD version's `openAPIV3Schema`, or a node with a default) compiled
    for jsonschema once, reporting violations as kube-openapi does."""

    def __init__(self, schema: Schema, *, root: bool = True) -> None:
        self.schema = schema
        self._root = root
        compiled = _compile(schema, root=root)
        self._validator = _Validator(compiled, format_checker=_formats())
        self._fields = {
            k: compiled.pop(k) for k in ("properties", "additionalProperties") if k in compiled
        }
        self._own = _Validator(compiled, format_checker=_formats())  # the top node's own checks

    def errors(self, value: JSON, old: Any = ABSENT, prefix: str = "") -> list[Cause]:
        """Every violation in `value` (paths below `prefix`); a value unchanged from its
        correlated value in `old` (ABSENT on create) is not checked."""
        out: list[Cause] = []
        meta = value.get("metadata", ABSENT) if self._root and isinstance(value, Mapping) else None
        if meta is not ABSENT and meta is not None and not isinstance(meta, Mapping):
            actual = json_type(meta)
            detail = f'metadata in body must be of type object: "{actual}"'
            out.append(field_error("metadata", TYPE_INVALID, actual, detail))
        if old is not ABSENT and json_equal(value, old):
            return out
        found = [e for e in self._violations(value, old) if self._kept(e, value, old)]
        typed = {tuple(e.path) for e in found if e.validator == "type"}
        shown: set[tuple[Any, ...]] = set()
        for error in in_walk_order(found, value):
            where = tuple(error.path)
            if where in typed:  # a value of the wrong type gets no other check (kube-openapi)
                if where in shown:
                    continue
                shown.add(where)
            out += _causes(error, field_path(error, prefix))
        return out

    def _violations(self, value: JSON, old: Any) -> Iterator[ValidationError]:
        """jsonschema's findings; on update, top-level fields equal to the old ones (a
        status update's spec) are not walked at all."""
        if not (isinstance(value, Mapping) and isinstance(old, Mapping)):
            yield from self._validator.iter_errors(value)
            return
        yield from self._own.iter_errors(value)
        props, addl = self._fields.get("properties", {}), self._fields.get("additionalProperties")
        for key, sub in value.items():
            s = props.get(key, addl)
            if s is not None and not (key in old and json_equal(sub, old[key])):
                yield from self._own.descend(sub, s, path=key)

    def _kept(self, error: ValidationError, new: Any, old: Any) -> bool:
        """False for a violation in a value ratcheting exempts or in a nullable null."""
        if old is ABSENT and error.instance is not None:
            return True
        s: Schema = self.schema
        for step in error.path:
            if old is not ABSENT and json_equal(new, old):
                return False
            if isinstance(step, int):
                old = correlate_items(new, old, s)[step]
                s = s["items"] if isinstance(s.get("items"), Mapping) else {}
            else:
                old = old.get(step, ABSENT) if isinstance(old, Mapping) else ABSENT
                s = properties_of(s).get(step, additional_of(s)) or {}
            new = new[step]
        if old is not ABSENT and json_equal(new, old):
            return False
        return not (new is None and error.validator != "type" and s.get("nullable"))


def _causes(e: ValidationError, path: str) -> list[Cause]:
    """One violation as kube-openapi reports it: field path, reason, message."""
    name, limit, value = path or ".", e.validator_value, e.instance
    match e.validator:
        case "type":
            actual = json_type(value)
            types = ",".join(t for t in limit if t != "null")
            detail = f'{name} in body must be of type {types}: "{actual}"'
            out = [field_error(path, TYPE_INVALID, actual, detail)]
            if actual == "number" and "integer" in limit and not _int64_text(value):
                # Then kube-openapi's range check of the number as Go formats it ('f',
                # shortest): a fraction, or an integer beyond int64 that decoding made a float.
                detail = f"Checked value must be of type integer (default format) in {name}"
                out.append(field_error("", INVALID, "", detail))
            return out
        case "required":
            return [required(path)]
        case "x-kubernetes-embedded-resource":
            if isinstance(e, BelowError) and e.below[-1] == "name":
                return [invalid_value(path, value, e.message)]
            return [required(path, e.message)]
        case "enum":
            shown = [v if isinstance(v, str) else json.dumps(v) for v in limit]
            return [not_supported(path, value, shown)]
        case "maxLength":
            return [too_long(path, limit)]
        case "maxItems" | "maxProperties":
            return [too_many(path, len(value), limit)]
        case "format":
            detail = f"{name} in body must be of type {limit}: {go_quote(value)}"
            return [field_error(path, TYPE_INVALID, value, detail)]
        case "minItems" | "minProperties":
            value = len(value)
        case "anyOf" | "oneOf" | "not" | "uniqueItems":
            value = value if isinstance(value, str) and e.validator != "uniqueItems" else ""
    return [invalid_value(path, value, f"{name} in body {_detail(e)}")]


# What kube-openapi says after `<field> in body`, by keyword ({} is the keyword's value).
_DETAILS: Final = MappingProxyType(
    {
        "minLength": "should be at least {} chars long",
        "pattern": "should match '{}'",
        "minItems": "should have at least {} items",
        "minProperties": "should have at least {} properties",
        "uniqueItems": "shouldn't contain duplicates",
        "anyOf": "must validate at least one schema (anyOf)",
        "oneOf": "must validate one and only one schema (oneOf)",
        "not": "must not validate the schema (not)",
    }
)


def _detail(e: ValidationError) -> str:
    limit = e.validator_value
    if e.validator == "multipleOf":
        return f"should be a multiple of {go_number(limit)}"
    if e.validator in ("maximum", "minimum"):
        strict = e.schema.get(
            "exclusiveMaximum" if e.validator == "maximum" else "exclusiveMinimum"
        )
        than = "less than" if e.validator == "maximum" else "greater than"
        return f"should be {than} {'' if strict else 'or equal to '}{go_float(float(limit))}"
    return _DETAILS[str(e.validator)].format(limit)


def _int64_text(value: float) -> bool:
    """Whether Go's strconv.FormatFloat(value, 'f', -1, 64) parses as an int64."""
    if not math.isfinite(value) or not value.is_integer():
        return False
    return INT64_MIN <= int(value) <= INT64_MAX
