"""`x-kubernetes-validations` of custom resources, as far as the emulator can honour them.

There is no CEL evaluator here, so only the immutability rule `self == oldSelf` is run
(with CEL's equality, where set and map lists compare regardless of order). Every other
rule is refused when the CRD is created, never silently ignored: validation must not be
weaker here than on a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from sim.apiserver.crd_lists import correlate_items
from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import (
    DUPLICATE,
    FORBIDDEN,
    INVALID,
    NOT_SUPPORTED,
    OMIT,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    TYPE_INVALID,
    child,
    duplicate,
    forbidden,
    index,
    invalid_value,
    required,
)
from sim.apiserver.json_values import ABSENT, JSON, as_list, canonical, json_equal
from sim.apiserver.schema_nodes import (
    Schema,
    additional_of,
    properties_of,
    rules_of,
    walk_nodes,
)

_SUPPORTED_RULES: Final = frozenset({"self==oldSelf", "oldSelf==self"})
_RULE_REASONS: Final = (
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
)


_BLOCKING: Final = frozenset({NOT_SUPPORTED, REQUIRED, TOO_LONG, TOO_MANY, TYPE_INVALID})
_RULES_NOT_CHECKED: Final = (
    "some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation"
)


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


def _rule_field_path(field_path: Any) -> list[str] | None:
    """`.a.b` or `['a'].b` into property names; None if malformed (or not a string)."""
    if not isinstance(field_path, str):
        return None
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


def rule_errors(new: JSON, old: Any, schema: Schema, causes: list[Cause]) -> list[Cause]:
    """Transition rule failures, or the server's "not checked" marker after blocking causes.

    Only for a schema that has rules: one without them never adds the marker.
    """
    if any(c.reason in _BLOCKING for c in causes):
        return [invalid_value("", None, _RULES_NOT_CHECKED)]
    out: list[Cause] = []
    _rules(new, old, schema, "", out)
    return out


def _rules(new: JSON, old: Any, s: Schema, path: str, out: list[Cause]) -> None:
    """Transition rules run only where both the new and the correlated old value exist."""
    if old is ABSENT or new is None:
        return
    for rule in rules_of(s):
        if _cel_equal(new, old, s):
            continue
        where = path
        for part in _rule_field_path(rule.get("fieldPath") or "") or ():
            where = child(where, part)
        message = rule.get("message") or f"failed rule: {rule['rule'].strip()}"
        reason = rule.get("reason") or INVALID
        # The failing value itself, except that objects and arrays are left out of the text.
        value = OMIT if s.get("type") in ("object", "array") else new
        if reason == FORBIDDEN:
            out.append(forbidden(where, message))
        elif reason == REQUIRED:
            out.append(required(where, message))
        elif reason == DUPLICATE:
            out.append(duplicate(where, value))
        else:
            out.append(invalid_value(where, value, message))
    if isinstance(new, dict) and isinstance(old, Mapping):
        props = properties_of(s)
        addl = additional_of(s)
        for key, sub_value in new.items():
            sub = props.get(key, addl)
            if sub is not None and key in old and not (path == "" and key == "metadata"):
                _rules(sub_value, old[key], sub, child(path, key), out)
    elif isinstance(new, list) and isinstance(s.get("items"), Mapping):
        olds = correlate_items(new, old, s, map_only=True)
        for i, item in enumerate(new):
            _rules(item, olds[i], s["items"], index(path, i), out)


def _cel_equal(a: JSON, b: JSON, s: Schema | None) -> bool:
    """CEL `==` on structural values: lists of type set/map compare regardless of order."""
    if s is None:
        return json_equal(a, b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if a.keys() != b.keys():
            return False
        props = properties_of(s)
        addl = additional_of(s)
        return all(_cel_equal(a[k], b[k], props.get(k, addl)) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False
        items = s.get("items") if isinstance(s.get("items"), Mapping) else None
        list_type = s.get("x-kubernetes-list-type")
        if list_type == "set":
            return sorted(map(canonical, a)) == sorted(map(canonical, b))
        if list_type == "map":
            matched = correlate_items(a, b, s, map_only=True)
            return all(
                o is not ABSENT and _cel_equal(n, o, items) for n, o in zip(a, matched, strict=True)
            )
        return all(_cel_equal(x, y, items) for x, y in zip(a, b, strict=True))
    return json_equal(a, b)


def rule_problems(s: Schema, path: str, *, correlatable: bool = True) -> Iterator[tuple[str, str]]:
    """(field path, problem) for every rule the emulator cannot evaluate."""
    if not isinstance(s, Mapping):
        return
    rules = s.get("x-kubernetes-validations")
    if rules is not None:
        if not isinstance(rules, list):
            yield child(path, "x-kubernetes-validations"), "must be a list"
        else:
            for i, rule in enumerate(rules):
                where = index(child(path, "x-kubernetes-validations"), i)
                problem = rule_problem(rule)
                if problem:
                    yield child(where, "rule"), problem
                    continue
                if not correlatable:
                    yield (
                        child(where, "rule"),
                        "oldSelf cannot be used on the uncorrelatable portion of the schema",
                    )
                reason = rule.get("reason")
                if reason is not None and reason not in _RULE_REASONS:
                    yield child(where, "reason"), "unsupported reason"
                if rule.get("fieldPath") and _rule_field_path(rule["fieldPath"]) is None:
                    yield child(where, "fieldPath"), "fieldPath must be a valid path"
    for name, sub in properties_of(s).items():
        yield from rule_problems(sub, f"{path}.properties[{name}]", correlatable=correlatable)
    if isinstance(s.get("additionalProperties"), Mapping):
        yield from rule_problems(
            s["additionalProperties"], f"{path}.additionalProperties", correlatable=correlatable
        )
    if isinstance(s.get("items"), Mapping):
        keyed = s.get("x-kubernetes-list-type") == "map"
        yield from rule_problems(s["items"], f"{path}.items", correlatable=correlatable and keyed)
    # Rules inside value validations would never be evaluated here: refuse them.
    compositions = [(f"{path}.not", s["not"])] if isinstance(s.get("not"), Mapping) else []
    for key in ("allOf", "anyOf", "oneOf"):
        compositions += [
            (index(child(path, key), i), sub) for i, sub in enumerate(as_list(s.get(key)))
        ]
    for where, sub in compositions:
        for node in walk_nodes(sub):
            if node.get("x-kubernetes-validations") is not None:
                yield (
                    child(where, "x-kubernetes-validations"),
                    "must not be used inside allOf, anyOf, oneOf or not",
                )
                break
