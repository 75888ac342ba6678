"""Reading OpenAPI schema nodes that may be malformed (validate_crd reports those).

Shared by CRD admission (pruning, defaulting, validation, rules) and by the checks of CRD
objects themselves, which must walk a schema before it is known to be well formed.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from sim.apiserver.json_values import as_list

Schema = Mapping[str, Any]
"""One node of an OpenAPI v3 schema (a CRD's `openAPIV3Schema` or below)."""


def compile_pattern(pattern: str, *, strict: bool = False) -> re.Pattern[str] | None:
    """A schema `pattern` as a Python regex (close to Go's RE2 for what CRDs use), quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return re.compile(pattern)
        except re.error:
            if strict:
                raise
            return None


def properties_of(s: Schema) -> Mapping[str, Schema]:
    """`properties`, tolerating malformed schemas (validate_crd reports those)."""
    props = s.get("properties")
    if not isinstance(props, Mapping):
        return {}
    if all(isinstance(v, dict) for v in props.values()):
        return props  # the common case, on every write: no copy
    return {k: v for k, v in props.items() if isinstance(v, Mapping)}


def rules_of(s: Schema) -> list[Mapping[str, Any]]:
    """The node's `x-kubernetes-validations` entries that are objects."""
    rules = s.get("x-kubernetes-validations")
    return [r for r in rules if isinstance(r, Mapping)] if isinstance(rules, list) else []


def additional_of(s: Schema) -> Schema | None:
    """`additionalProperties` when it is a schema (not a bool)."""
    addl = s.get("additionalProperties")
    return addl if isinstance(addl, Mapping) else None


def walk_nodes(s: Schema) -> Iterator[Schema]:
    """The node and every node below it, compositions (allOf, not, ...) included."""
    if not isinstance(s, Mapping):
        return
    yield s
    for sub in properties_of(s).values():
        yield from walk_nodes(sub)
    for key in ("items", "additionalProperties", "not"):
        if isinstance(s.get(key), Mapping):
            yield from walk_nodes(s[key])
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in as_list(s.get(key)):
            yield from walk_nodes(sub)
