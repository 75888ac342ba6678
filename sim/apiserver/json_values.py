"""Small helpers over decoded JSON: type names, strict equality, identities, safe access.

Admission reads objects clients sent, which may be malformed anywhere; these helpers never
raise on a wrong type, so that the validators report it instead of crashing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

JSON = Any
"""A decoded JSON value: dict, list, str, int, float, bool or None."""


ABSENT: Final = object()  # "no such field" (distinct from JSON null)


def json_type(value: JSON) -> str:
    """The JSON type name as OpenAPI spells it (`integer`, `object`, ...)."""
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


def json_copy(value: JSON) -> JSON:
    """A deep copy of decoded JSON (dicts and lists), several times faster than deepcopy."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


def json_equal(a: JSON, b: JSON) -> bool:
    """Deep JSON equality that, unlike ==, keeps true and 1 apart."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping):
        return (
            isinstance(b, Mapping)
            and a.keys() == b.keys()
            and all(json_equal(a[k], b[k]) for k in a)
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def canonical(value: JSON) -> str:
    """A hashable identity for uniqueness checks (sets, list-map keys)."""
    return json.dumps(value, sort_keys=True, default=repr, allow_nan=True) + json_type(value)


def name_of(obj: Any) -> str:
    """`metadata.name`, or "" where there is none (the name a 422 reports)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def str_list(value: Any) -> list[str]:
    """The strings of a list; a malformed value reads as empty."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def get_in(obj: Any, *keys: str) -> Any:
    """The value at a path of object keys, None where any step is missing or not an object."""
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def as_list(value: Any) -> list[Any]:
    """The value if it is a list, else empty: rules skip what the schema walk reports."""
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    """The value if it is a string, else ""."""
    return value if isinstance(value, str) else ""
