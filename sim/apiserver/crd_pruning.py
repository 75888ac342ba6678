"""Decoding a custom resource before validation: pruning, nulls, defaults, numbers.

The order is the server's: undeclared fields are pruned (and reported as unknown), nulls of
non-nullable fields without a default are dropped, defaults are applied, and integral
floats become integers as a JSON round trip through Go leaves them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from sim.apiserver.field_errors import child, index
from sim.apiserver.json_values import JSON
from sim.apiserver.schema_nodes import Schema, additional_of, properties_of

_ROOT_META: Final = frozenset({"apiVersion", "kind", "metadata"})  # kept on embedded objects


def prune(
    value: JSON, s: Schema | None, path: str, pruned: list[str], *, root: bool = False
) -> JSON:
    """structuralpruning.prune: drop undeclared fields, keep preserved ones."""
    if s is not None and s.get("x-kubernetes-preserve-unknown-fields"):
        return _skip_prune(value, s, path, pruned, root=root)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        props = properties_of(s) if s is not None else {}
        addl = additional_of(s) if s is not None else None
        embedded = root or (s is not None and s.get("x-kubernetes-embedded-resource"))
        for key, sub in value.items():
            where = child(path, key)
            keep = root or key == "metadata" or isinstance(sub, str)
            if embedded and key in _ROOT_META and keep:
                out[key] = sub
            elif key in props:
                out[key] = prune(sub, props[key], where, pruned)
            elif addl is not None:
                out[key] = prune(sub, addl, where, pruned)
            elif s is not None and s.get("additionalProperties") is True:
                out[key] = prune(sub, None, where, pruned)
            else:
                pruned.append(where)
        return out
    if isinstance(value, list):
        items = s.get("items") if s is not None else None
        return [
            prune(x, items if isinstance(items, Mapping) else None, index(path, i), pruned)
            for i, x in enumerate(value)
        ]
    return value


def _skip_prune(value: JSON, s: Schema, path: str, pruned: list[str], *, root: bool) -> JSON:
    """x-kubernetes-preserve-unknown-fields: keep unknown keys, still prune known ones."""
    if isinstance(value, dict):
        props = properties_of(s)
        addl = additional_of(s)
        out: dict[str, Any] = {}
        for key, sub in value.items():
            if root and key in _ROOT_META:
                out[key] = sub
            elif key in props:
                out[key] = prune(sub, props[key], child(path, key), pruned)
            elif addl is not None:
                out[key] = prune(sub, addl, child(path, key), pruned)
            else:
                out[key] = sub
        return out
    if isinstance(value, list) and isinstance(s.get("items"), Mapping):
        return [prune(x, s["items"], index(path, i), pruned) for i, x in enumerate(value)]
    return value


def prune_nulls(value: JSON, s: Schema) -> None:
    """Nulls of non-nullable fields without a default are dropped before defaulting."""
    if isinstance(value, dict):
        props = properties_of(s)
        for key in list(value):
            sub = props.get(key)
            if sub is None:
                continue
            if value[key] is None and "default" not in sub and not sub.get("nullable"):
                del value[key]
            else:
                prune_nulls(value[key], sub)
    elif isinstance(value, list) and isinstance(s.get("items"), Mapping):
        for item in value:
            prune_nulls(item, s["items"])


def apply_defaults(value: JSON, s: Schema) -> None:
    """structuraldefaulting.Default: only inside objects that exist, recursively."""
    if isinstance(value, dict):
        props = properties_of(s)
        for key, sub in props.items():
            if "default" in sub and (
                key not in value or (value[key] is None and not sub.get("nullable"))
            ):
                value[key] = copy.deepcopy(sub["default"])
        addl = additional_of(s)
        for key, sub_value in value.items():
            if key in props:
                apply_defaults(sub_value, props[key])
            elif addl is not None:
                if sub_value is None and "default" in addl and not addl.get("nullable"):
                    value[key] = copy.deepcopy(addl["default"])
                apply_defaults(value[key], addl)
    elif isinstance(value, list) and isinstance(s.get("items"), Mapping):
        items = s["items"]
        for i, item in enumerate(value):
            if item is None and "default" in items and not items.get("nullable"):
                value[i] = copy.deepcopy(items["default"])
            apply_defaults(value[i], items)


def integral_floats_to_int(value: JSON) -> JSON:
    """What a JSON round trip through Go does: float64 2.0 is written as `2`. Only up to
    2^53, where kube-openapi still takes a float for an integer (swag's
    IsFloat64AJSONInteger): a larger one, such as an integer beyond int64 that decoding
    made a float (numbers.py), stays a "number" that an integer field refuses."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: integral_floats_to_int(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral_floats_to_int(v) for v in value]
    return value
