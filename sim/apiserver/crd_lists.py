"""`x-kubernetes-list-type` of custom resources: uniqueness and item correlation.

Sets must not repeat an item and maps must not repeat a key; on update, items of the new
list are paired with the old ones by key (maps) or value (sets), which both validation
ratcheting and transition rules need.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import child, duplicate, index, invalid_value
from sim.apiserver.json_values import ABSENT, JSON, canonical, str_list
from sim.apiserver.schema_nodes import Schema, additional_of, properties_of


def list_errors(value: JSON, s: Schema, path: str) -> list[Cause]:
    """Duplicates in `set` lists and by key in `map` lists, everywhere below `value`."""
    out: list[Cause] = []
    _lists(value, s, path, out)
    return out


def _lists(value: JSON, s: Schema, path: str, out: list[Cause]) -> None:
    if isinstance(value, dict):
        props = properties_of(s)
        addl = additional_of(s)
        for key, sub_value in value.items():
            sub = props.get(key, addl)
            if sub is not None and not (path == "" and key == "metadata"):
                _lists(sub_value, sub, child(path, key), out)
    elif isinstance(value, list):
        list_type = s.get("x-kubernetes-list-type")
        if list_type == "set":
            seen: set[str] = set()
            for i, item in enumerate(value):
                ident = canonical(item)
                if ident in seen:
                    out.append(duplicate(index(path, i), item))
                seen.add(ident)
        elif list_type == "map":
            keys = str_list(s.get("x-kubernetes-list-map-keys"))
            seen = set()
            for i, item in enumerate(value):
                if not isinstance(item, Mapping):
                    out.append(
                        invalid_value(
                            index(path, i),
                            item,
                            "must be an object for an array of list-type map",
                        )
                    )
                    continue
                key_values = {k: item[k] for k in keys if k in item}
                ident = canonical([item.get(k) for k in keys])
                if ident in seen:
                    out.append(duplicate(index(path, i), key_values))
                seen.add(ident)
        items = s.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _lists(item, items, index(path, i), out)


def correlate_items(new: list[Any], old: Any, s: Schema, *, map_only: bool = False) -> list[Any]:
    """The old item each new item is compared with: by key for list-type map, by value for
    sets (ratcheting only), none for atomic lists."""
    absent: list[Any] = [ABSENT] * len(new)
    if not isinstance(old, list):
        return absent
    list_type = s.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = str_list(s.get("x-kubernetes-list-map-keys"))
        by_key = {canonical([o.get(k) for k in keys]): o for o in old if isinstance(o, Mapping)}
        return [
            by_key.get(canonical([n.get(k) for k in keys]), ABSENT)
            if isinstance(n, Mapping)
            else ABSENT
            for n in new
        ]
    if list_type == "set" and not map_only:
        by_value = {canonical(o): o for o in old}
        return [by_value.get(canonical(n), ABSENT) for n in new]
    return absent
