"""OpenAPI validation of custom resource values, with kube-openapi's messages.

Types, enums, bounds, lengths, patterns, formats, required fields and compositions, each
reported as the real server words it (`spec.numNodes in body should be greater than or equal
to 0`). On update a value equal to its correlated old value is not checked again
(validation ratcheting), so objects stored under an older schema stay updatable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from sim.apiserver.crd_lists import correlate_items
from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import (
    INVALID,
    TYPE_INVALID,
    child,
    field_error,
    index,
    invalid_value,
    not_supported,
    required,
    too_long,
    too_many,
)
from sim.apiserver.go_format import go_float, go_number, go_quote
from sim.apiserver.json_values import ABSENT, JSON, canonical, json_equal, json_type, str_list
from sim.apiserver.names_validation import dns1123_subdomain_problems
from sim.apiserver.numbers import INT64_MAX, INT64_MIN
from sim.apiserver.schema_nodes import Schema, additional_of, compile_pattern, properties_of
from sim.apiserver.string_formats import FORMAT_CHECKS


def _schema_types(s: Schema) -> tuple[str, ...]:
    """The types a node allows; none means any (x-kubernetes-preserve-unknown-fields)."""
    if s.get("x-kubernetes-int-or-string"):
        return ("integer", "string")
    t = s.get("type")
    return (t,) if isinstance(t, str) and t else ()


def _type_matches(value: JSON, actual: str, types: tuple[str, ...]) -> bool:
    if actual in types:
        return True
    if actual == "integer" and "number" in types:
        return True
    # kube-openapi accepts a float with an integral value (2.0) for type integer, up to
    # 2^53 (swag's IsFloat64AJSONInteger): not an integer beyond int64 decoded as a float.
    return (
        actual == "number"
        and "integer" in types
        and math.isfinite(value)
        and float(value).is_integer()
        and abs(value) <= 2**53
    )


def _int64_text(value: float) -> bool:
    """Whether Go's strconv.FormatFloat(value, 'f', -1, 64) parses as an int64."""
    if not math.isfinite(value) or not value.is_integer():
        return False
    return INT64_MIN <= int(value) <= INT64_MAX


def schema_errors(obj: Mapping[str, Any], schema: Schema, old: Any) -> list[Cause]:
    """Every OpenAPI violation of a decoded object; `old` (or ABSENT) ratchets unchanged values."""
    out: list[Cause] = []
    meta = obj.get("metadata", ABSENT)
    if meta is not ABSENT and meta is not None and not isinstance(meta, Mapping):
        actual = json_type(meta)
        out.append(
            field_error(
                "metadata",
                TYPE_INVALID,
                actual,
                f'metadata in body must be of type object: "{actual}"',
            )
        )
    check_value(obj, schema, "", old, out, root=True)
    return out


def check_value(
    value: JSON, s: Schema, path: str, old: Any, out: list[Cause], *, root: bool = False
) -> None:
    """One schema node; errors on values unchanged from `old` are ratcheted away."""
    if old is not ABSENT and json_equal(value, old):
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
    actual = json_type(value)
    if types and not _type_matches(value, actual, types):
        out.append(
            field_error(
                path,
                TYPE_INVALID,
                actual,
                f'{name} in body must be of type {",".join(types)}: "{actual}"',
            )
        )
        if actual == "number" and "integer" in types and not _int64_text(value):
            # Then kube-openapi's range check of the number as Go formats it ('f',
            # shortest): a fraction, or an integer beyond int64 that decoding made a float.
            out.append(
                field_error(
                    "",
                    INVALID,
                    "",
                    f"Checked value must be of type integer (default format) in {name}",
                )
            )
        return
    _check_composition(value, s, path, out)
    if isinstance(value, str):
        _check_string(value, s, path, out)
    elif actual in ("integer", "number"):
        _check_number(value, s, path, out)
    if (
        "enum" in s
        and isinstance(s["enum"], list)
        and not any(json_equal(value, e) for e in s["enum"])
    ):
        shown = [e if isinstance(e, str) else json.dumps(e) for e in s["enum"]]
        out.append(not_supported(path, value, shown))
    if isinstance(value, list):
        _check_array(value, s, path, old, out)
    elif isinstance(value, dict):
        _check_object(value, s, path, old, out, root=root)


def _check_composition(value: JSON, s: Schema, path: str, out: list[Cause]) -> None:
    name = path or "."
    for sub in s.get("allOf") or ():
        check_value(value, sub, path, ABSENT, out)
    if s.get("anyOf") and not any(_passes(value, sub, path) for sub in s["anyOf"]):
        out.append(
            invalid_value(
                path,
                value if isinstance(value, str) else "",
                f"{name} in body must validate at least one schema (anyOf)",
            )
        )
    if s.get("oneOf") and sum(_passes(value, sub, path) for sub in s["oneOf"]) != 1:
        out.append(
            invalid_value(
                path,
                value if isinstance(value, str) else "",
                f"{name} in body must validate one and only one schema (oneOf)",
            )
        )
    if isinstance(s.get("not"), Mapping) and _passes(value, s["not"], path):
        out.append(
            invalid_value(
                path,
                value if isinstance(value, str) else "",
                f"{name} in body must not validate the schema (not)",
            )
        )


def _passes(value: JSON, s: Schema, path: str) -> bool:
    found: list[Cause] = []
    check_value(value, s, path, ABSENT, found)
    return not found


def _check_string(value: str, s: Schema, path: str, out: list[Cause]) -> None:
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
        compiled = compile_pattern(pattern)
        # validate_crd refuses patterns that do not compile
        if compiled is not None and compiled.search(value) is None:
            out.append(invalid_value(path, value, f"{name} in body should match '{pattern}'"))
    fmt = s.get("format")
    check = FORMAT_CHECKS.get(fmt) if isinstance(fmt, str) else None
    if check is not None and not check(value):
        out.append(
            field_error(
                path,
                TYPE_INVALID,
                value,
                f"{name} in body must be of type {fmt}: {go_quote(value)}",
            )
        )


def _check_number(value: float | int, s: Schema, path: str, out: list[Cause]) -> None:
    name = path or "."
    if not isinstance(value, int) and not math.isfinite(value):
        return
    factor = s.get("multipleOf")
    if isinstance(factor, int | float) and factor > 0:
        try:
            quotient = value / factor
            multiple = math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9)
        except OverflowError:
            multiple = isinstance(factor, int) and isinstance(value, int) and (value % factor == 0)
        if not multiple:
            out.append(
                invalid_value(
                    path, value, f"{name} in body should be a multiple of {go_number(factor)}"
                )
            )
    maximum = s.get("maximum")
    if isinstance(maximum, int | float) and not isinstance(maximum, bool):
        if s.get("exclusiveMaximum") and value >= maximum:
            out.append(
                invalid_value(
                    path,
                    value,
                    f"{name} in body should be less than {go_float(float(maximum))}",
                )
            )
        elif value > maximum:
            out.append(
                invalid_value(
                    path,
                    value,
                    f"{name} in body should be less than or equal to {go_float(float(maximum))}",
                )
            )
    minimum = s.get("minimum")
    if isinstance(minimum, int | float) and not isinstance(minimum, bool):
        if s.get("exclusiveMinimum") and value <= minimum:
            out.append(
                invalid_value(
                    path,
                    value,
                    f"{name} in body should be greater than {go_float(float(minimum))}",
                )
            )
        elif value < minimum:
            out.append(
                invalid_value(
                    path,
                    value,
                    f"{name} in body should be greater than or equal to {go_float(float(minimum))}",
                )
            )


def _check_array(value: list[Any], s: Schema, path: str, old: Any, out: list[Cause]) -> None:
    name = path or "."
    if isinstance(s.get("maxItems"), int) and len(value) > s["maxItems"]:
        out.append(too_many(path, len(value), s["maxItems"]))
    if isinstance(s.get("minItems"), int) and len(value) < s["minItems"]:
        out.append(
            invalid_value(
                path, len(value), f"{name} in body should have at least {s['minItems']} items"
            )
        )
    if s.get("uniqueItems") and len({canonical(v) for v in value}) != len(value):
        out.append(invalid_value(path, "", f"{name} in body shouldn't contain duplicates"))
    items = s.get("items")
    if not isinstance(items, Mapping):
        return
    olds = correlate_items(value, old, s)
    for i, item in enumerate(value):
        check_value(item, items, index(path, i), olds[i], out)


def _check_object(
    value: dict[str, Any], s: Schema, path: str, old: Any, out: list[Cause], *, root: bool
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
    if s.get("x-kubernetes-embedded-resource"):
        for key in ("apiVersion", "kind"):
            if not value.get(key):
                out.append(required(child(path, key), "must not be empty"))
        meta = value.get("metadata")
        if isinstance(meta, Mapping) and meta.get("name"):
            out += [
                invalid_value(child(child(path, "metadata"), "name"), meta["name"], m)
                for m in dns1123_subdomain_problems(str(meta["name"]))
            ]
    props = properties_of(s)
    addl = additional_of(s)
    olds = old if isinstance(old, Mapping) else {}
    for key, sub_value in value.items():
        if (root or s.get("x-kubernetes-embedded-resource")) and key == "metadata":
            continue  # ObjectMeta is validated by the server, not the CRD schema
        sub = props.get(key, addl)
        if sub is not None:
            check_value(sub_value, sub, child(path, key), olds.get(key, ABSENT), out)
    # kube-openapi checks required properties after the properties themselves.
    for key in str_list(s.get("required")):
        if key not in value and not (root and key == "metadata"):
            out.append(required(child(path, key)))
