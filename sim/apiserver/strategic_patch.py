"""Strategic merge patch, as kube-apiserver applies it.

A port of the apply half of k8s.io/apimachinery `strategicpatch` (v0.3x), with the Go struct
tags it reads (`patchStrategy:"merge"`, `patchMergeKey`) written out as a table of JSON paths
for the built-in kinds the simulator serves. So `kubectl patch` and client-go's strategic
patches merge lists where a cluster merges them and replace them where a cluster replaces
them. Every function here works on copies: inputs are never mutated.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from sim.apiserver.patch import PatchError

__all__ = [
    "MERGE_KEYS",
    "STRATEGIC_MERGE_KINDS",
    "PatchError",
    "apply_strategic_merge_patch",
]


# --- strategic merge patch: which lists merge, by what key -----------------------------------

# A list at one of these paths has `patchStrategy:"merge"`; the value is its patchMergeKey,
# "" for a list of primitives merged as a set. Paths name fields only: a list's items are
# transparent, so ("spec", "containers", "env") is the env of every container. Any other list
# is replaced whole by a strategic patch, exactly as for the Go types.
_Table = Mapping[tuple[str, ...], str]


def _under(prefix: tuple[str, ...], table: _Table) -> _Table:
    return MappingProxyType({prefix + path: key for path, key in table.items()})


def _table(*parts: _Table) -> _Table:
    return MappingProxyType({path: key for part in parts for path, key in part.items()})


_OBJECT_META = _table({("finalizers",): "", ("ownerReferences",): "uid"})
_CONTAINER = _table(
    {
        ("ports",): "containerPort",
        ("env",): "name",
        ("volumeMounts",): "mountPath",
        ("volumeDevices",): "devicePath",
    }
)
_POD_SPEC = _table(
    {
        ("volumes",): "name",
        ("imagePullSecrets",): "name",
        ("hostAliases",): "ip",
        ("topologySpreadConstraints",): "topologyKey",
        ("resourceClaims",): "name",
        ("schedulingGates",): "name",
        ("evictionResponders",): "name",
        **{
            path: key
            for field in ("containers", "initContainers", "ephemeralContainers")
            for path, key in {(field,): "name", **_under((field,), _CONTAINER)}.items()
        },
    }
)
_POD_STATUS = _table(
    {
        ("conditions",): "type",
        ("podIPs",): "ip",
        ("hostIPs",): "ip",
        ("resourceClaimStatuses",): "name",
        ("nodeAllocatableResourceClaimStatuses",): "resourceClaimName",
        ("nodeAllocatableResourceClaimStatuses", "mapping"): "name",
        ("nodeAllocatableResourceClaimStatuses", "overhead"): "name",
    }
)
_POD_TEMPLATE = _table(_under(("metadata",), _OBJECT_META), _under(("spec",), _POD_SPEC))
_CONDITIONS = _table({("status", "conditions"): "type"})
_META = _under(("metadata",), _OBJECT_META)

MERGE_KEYS: Mapping[tuple[str, str], Mapping[tuple[str, ...], str]] = MappingProxyType(
    {
        gk: MappingProxyType(table)
        for gk, table in {
            ("", "Namespace"): {**_META, **_CONDITIONS},
            ("", "Node"): {
                **_META,
                ("spec", "podCIDRs"): "",
                ("status", "conditions"): "type",
                ("status", "addresses"): "type",
            },
            ("", "Pod"): {
                **_META,
                **_under(("spec",), _POD_SPEC),
                **_under(("status",), _POD_STATUS),
            },
            ("", "Event"): _META,
            ("", "Service"): {**_META, ("spec", "ports"): "port", **_CONDITIONS},
            ("", "ServiceAccount"): {**_META, ("secrets",): "name"},
            ("", "ConfigMap"): _META,
            ("", "Secret"): _META,
            ("apps", "DaemonSet"): {
                **_META,
                **_under(("spec", "template"), _POD_TEMPLATE),
                **_CONDITIONS,
            },
            ("apps", "Deployment"): {
                **_META,
                **_under(("spec", "template"), _POD_TEMPLATE),
                **_CONDITIONS,
            },
            ("apps", "ReplicaSet"): {
                **_META,
                **_under(("spec", "template"), _POD_TEMPLATE),
                **_CONDITIONS,
            },
            ("batch", "Job"): {
                **_META,
                **_under(("spec", "template"), _POD_TEMPLATE),
                **_CONDITIONS,
            },
            ("coordination.k8s.io", "Lease"): _META,
            ("rbac.authorization.k8s.io", "Role"): _META,
            ("rbac.authorization.k8s.io", "ClusterRole"): _META,
            ("rbac.authorization.k8s.io", "RoleBinding"): _META,
            ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _META,
            ("resource.k8s.io", "ResourceClaim"): {**_META, ("status", "reservedFor"): "uid"},
            ("resource.k8s.io", "ResourceClaimTemplate"): {
                **_META,
                **_under(("spec", "metadata"), _OBJECT_META),
            },
            ("resource.k8s.io", "ResourceSlice"): _META,
            ("resource.k8s.io", "DeviceClass"): _META,
            ("apiextensions.k8s.io", "CustomResourceDefinition"): _META,
        }.items()
    }
)
"""Merge-strategy lists by (API group, kind) and JSON path; see the comment above."""

STRATEGIC_MERGE_KINDS: frozenset[tuple[str, str]] = frozenset(MERGE_KEYS)
"""(group, kind) of the built-in kinds served here; custom resources get a 415 instead."""


# --- strategic merge patch: the algorithm ------------------------------------------------------

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PREFIX = "$deleteFromPrimitiveList"
_ORDER_PREFIX = "$setElementOrder"
_REPLACE, _DELETE, _MERGE = "replace", "delete", "merge"
# JSONSchemaProps (in a CRD) has real fields named like this; they are not directives.
_NOT_DIRECTIVES = frozenset({"$ref", "$schema"})

_BAD_PRIMITIVE_LIST = "invalid patch format of primitive list"
_BAD_RETAIN_KEYS = "invalid patch format of retainKeys"
_BAD_ORDER_LIST = "invalid patch format of setElementOrder list"
_NO_LIST_OF_LISTS = "lists of lists are not supported"


def _go(value: Any) -> str:
    """Go's %v of a decoded JSON value, for error texts that embed patch fragments."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{_go(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go(v) for v in value) + "]"
    return str(value)


def _go_type(value: Any) -> str:
    """The Go type a JSON value decodes to (reflect.TypeOf), for the type-change rule."""
    if value is None:
        return "<nil>"
    if isinstance(value, Mapping):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    return "string"


def _same(a: Any, b: Any) -> bool:
    """Go's == on interface values: equal dynamic type and equal value."""
    return _go_type(a) == _go_type(b) and a == b


def _no_merge_key(item: Mapping[str, Any], key: str) -> PatchError:
    return PatchError(f"map: {_go(item)} does not contain declared merge key: {key}", 500)


def _bad_arg_type(expected: str, actual: Any) -> PatchError:
    return PatchError(f"expected a {expected}, but received a {_go_type(actual)}", 500)


def _check_directives(value: Any) -> None:
    """Refuse `$`-keys that are no directive; the real server would store them as unknown
    fields (or fail strict decoding), which hides a client bug."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if (
                isinstance(key, str)
                and key.startswith("$")
                and key not in (_DIRECTIVE, _RETAIN_KEYS, *_NOT_DIRECTIVES)
                and not key.startswith((_DELETE_PREFIX, _ORDER_PREFIX))
            ):
                raise PatchError(f"unknown strategic merge patch directive: {key}", 400)
            _check_directives(item)
    elif isinstance(value, list):
        for item in value:
            _check_directives(item)


def _is_directive_key(key: str) -> bool:
    return key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith((_DELETE_PREFIX, _ORDER_PREFIX))


def _clean(value: Any) -> Any:
    """A patch value as the typed object decoded from it holds it: null members and
    directive keys gone."""
    if isinstance(value, Mapping):
        return {
            k: _clean(v) for k, v in value.items() if v is not None and not _is_directive_key(k)
        }
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


_DROP = object()


def _new_value(value: Any) -> Any:
    """A value for a key the original lacks: discardNullValuesFromPatch, then removeDirectives
    (a map carrying `$patch` is dropped, wherever it sits)."""
    if isinstance(value, Mapping):
        if _DIRECTIVE in value:
            return _DROP
        out = {}
        for k, v in value.items():
            if v is None or _is_directive_key(k):
                continue
            kept = _new_value(v)
            if kept is not _DROP:
                out[k] = kept
        return out
    if isinstance(value, list):
        return [kept for kept in (_new_value(v) for v in value) if kept is not _DROP]
    return value


def _extract_key(key: str, prefix: str) -> str:
    head, sep, rest = key.partition("/")
    if not sep or head != prefix:
        raise PatchError(_BAD_PRIMITIVE_LIST if prefix == _DELETE_PREFIX else _BAD_ORDER_LIST, 400)
    return rest


class _Merger:
    """One strategic merge; `keys` is the kind's merge table, paths are field-name tuples."""

    def __init__(self, keys: Mapping[tuple[str, ...], str]) -> None:
        self.keys = keys

    def merge_map(
        self, original: dict[str, Any], patch: dict[str, Any], path: tuple[str, ...]
    ) -> dict[str, Any]:
        if _DIRECTIVE in patch:
            directive = patch[_DIRECTIVE]
            if directive == _REPLACE:
                return _clean({k: v for k, v in patch.items() if k != _DIRECTIVE})
            if directive == _DELETE:
                return {}
            raise PatchError(f"unknown patch type: {_go(directive)} in map: {_go(patch)}", 500)
        patch = dict(patch)
        self._retain_keys(original, patch)
        self._set_element_order(original, patch, path)
        for key, patch_value in patch.items():
            is_delete_list = key.startswith(_DELETE_PREFIX)
            if is_delete_list:
                key = _extract_key(key, _DELETE_PREFIX)
            if patch_value is None:
                original.pop(key, None)
                continue
            if key not in original or _go_type(original[key]) != _go_type(patch_value):
                if not is_delete_list:
                    kept = _new_value(patch_value)
                    if kept is _DROP:
                        original.pop(key, None)
                    else:
                        original[key] = kept
                continue
            current, sub = original[key], (*path, key)
            if isinstance(current, dict):
                original[key] = self.merge_map(current, patch_value, sub)
            elif isinstance(current, list):
                original[key] = self.merge_list(current, patch_value, sub, is_delete_list)
            else:
                original[key] = patch_value
        return original

    @staticmethod
    def _retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
        if _RETAIN_KEYS not in patch:
            return
        retain = patch.pop(_RETAIN_KEYS)
        if not isinstance(retain, list):
            raise PatchError(_BAD_RETAIN_KEYS, 400)
        for key, value in patch.items():
            if value is None or key.startswith((_DELETE_PREFIX, _ORDER_PREFIX)):
                continue
            if key not in retain:
                raise PatchError(_BAD_RETAIN_KEYS, 400)
        for key in [k for k in original if k not in retain]:
            del original[key]

    def _set_element_order(
        self, original: dict[str, Any], patch: dict[str, Any], path: tuple[str, ...]
    ) -> None:
        """Merge each `$setElementOrder/<field>` list with its field, in the order it gives."""
        for order_key in [k for k in patch if k.startswith(_ORDER_PREFIX)]:
            order = patch.pop(order_key)
            if not isinstance(order, list):
                raise _bad_arg_type("[]interface {}", order)
            field = _extract_key(order_key, _ORDER_PREFIX)
            found_original, found_patch = field in original, field in patch
            original_list = original.get(field, [])
            patch_list = patch.get(field, [])
            if not isinstance(original_list, list):
                raise _bad_arg_type("[]interface {}", original_list)
            if not isinstance(patch_list, list):
                raise _bad_arg_type("[]interface {}", patch_list)
            sub = (*path, field)
            merge_key = self.keys.get(sub, "")
            _validate_order(patch_list, order, merge_key)
            if found_original and found_patch:
                merged = self.merge_list(original_list, patch_list, sub, False)
            elif found_original:
                merged = original_list
            elif found_patch:
                merged = _new_value(patch_list)
            else:
                continue
            if merge_key:
                patch_items, server_only = _partition_maps(merged, order, merge_key)
            else:
                patch_items, server_only = _partition_primitives(merged, order)
            is_map = _element_kind(original_list, patch_list) == "map"
            original[field] = _normalize_order(
                patch_items, server_only, order, original_list, merge_key, is_map
            )
            patch.pop(field, None)

    def merge_list(
        self, original: list[Any], patch: list[Any], path: tuple[str, ...], is_delete_list: bool
    ) -> list[Any]:
        if path not in self.keys and not is_delete_list:
            return _clean(patch)  # no merge strategy: the patch list replaces
        merge_key = self.keys.get(path, "")
        if not original and not patch:
            return original
        is_map = _element_kind(original, patch) == "map"
        if not is_map:
            if is_delete_list:
                return [v for v in original if not any(_same(v, d) for d in patch)]
            merged: list[Any] = []
            for item in (*original, *patch):
                if not any(_same(item, m) for m in merged):
                    merged.append(item)
        else:
            if not merge_key:
                raise PatchError(f"cannot merge lists without merge key for {'.'.join(path)}", 500)
            original, patch = _apply_list_directives(original, patch, merge_key)
            merged = list(original)
            for item in patch:
                if merge_key not in item:
                    raise _no_merge_key(item, merge_key)
                index = _find(merged, merge_key, item[merge_key])
                if index is None:
                    merged.append(_clean(item))
                else:
                    merged[index] = self.merge_map(merged[index], item, path)
        if merge_key:
            patch_items, server_only = _partition_maps(merged, patch, merge_key)
        else:
            patch_items, server_only = _partition_primitives(merged, patch)
        return _normalize_order(patch_items, server_only, patch, original, merge_key, is_map)


def _element_kind(*lists: list[Any]) -> str:
    """sliceElementType: all elements of one JSON type, and not lists."""
    seen: str | None = None
    for items in lists:
        for item in items:
            kind = _go_type(item)
            if seen is None:
                if kind == "[]interface {}":
                    raise PatchError(_NO_LIST_OF_LISTS, 422)
                seen = kind
            elif kind != seen:
                raise PatchError(f"list element types are not identical: {_go(list(lists))}", 500)
    if seen is None:
        raise PatchError("no elements in any of the given slices", 500)
    return "map" if seen == "map[string]interface {}" else seen


def _find(items: list[Any], key: str, value: Any) -> int | None:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise PatchError(f"value for key {i} is not a map", 500)
        if key in item and _same(item[key], value):
            return i
    return None


def _apply_list_directives(
    original: list[Any], patch: list[Any], merge_key: str
) -> tuple[list[Any], list[Any]]:
    """mergeSliceWithSpecialElements: `$patch: delete` items remove by merge key, a
    `$patch: replace` item makes the rest of the patch list the whole list."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        if _DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[_DIRECTIVE]
        if directive == _DELETE:
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
            original = [
                o
                for o in original
                if not (
                    isinstance(o, dict) and merge_key in o and _same(o[merge_key], item[merge_key])
                )
            ]
        elif directive == _REPLACE:
            replace = True
        elif directive == _MERGE:
            raise PatchError("merging lists cannot yet be specified in the patch", 500)
        else:
            raise PatchError(f"unknown patch type: {_go(directive)} in map: {_go(item)}", 500)
    if replace:
        return [_clean(item) for item in plain], []
    return original, plain


def _partition_primitives(merged: list[Any], by: list[Any]) -> tuple[list[Any], list[Any]]:
    inside = [v for v in merged if any(_same(v, b) for b in by)]
    outside = [v for v in merged if not any(_same(v, b) for b in by)]
    return inside, outside


def _partition_maps(
    merged: list[Any], by: list[Any], merge_key: str
) -> tuple[list[Any], list[Any]]:
    inside: list[Any] = []
    outside: list[Any] = []
    for item in merged:
        if not isinstance(item, dict):
            raise _bad_arg_type("map[string]interface {}", item)
        if merge_key not in item:
            raise _no_merge_key(item, merge_key)
        (inside if _find(by, merge_key, item[merge_key]) is not None else outside).append(item)
    return inside, outside


def _index(order: list[Any], item: Any, merge_key: str, is_map: bool) -> int:
    def value(x: Any) -> Any:
        return x.get(merge_key) if is_map and isinstance(x, dict) else (None if is_map else x)

    wanted = value(item)
    for i, candidate in enumerate(order):
        if _same(value(candidate), wanted):
            return i
    return -1


def _sort_by(items: list[Any], order: list[Any], merge_key: str, is_map: bool) -> list[Any]:
    if is_map:
        for item in (*items, *order):
            if not isinstance(item, dict):
                raise _bad_arg_type("map[string]interface {}", item)
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
    positions = [_index(order, item, merge_key, is_map) for item in items]
    ranked = sorted(range(len(items)), key=lambda i: (positions[i] < 0, positions[i]))
    return [items[i] for i in ranked]


def _normalize_order(
    patch_items: list[Any],
    server_only: list[Any],
    patch_order: list[Any],
    server_order: list[Any],
    merge_key: str,
    is_map: bool,
) -> list[Any]:
    """normalizeElementOrder: patch items in patch order, server-only items in live order,
    interleaved where the live order relates them (mergeSortedSlice)."""
    right = _sort_by(patch_items, patch_order, merge_key, is_map)
    left = _sort_by(server_only, server_order, merge_key, is_map)
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            out.append(left[i])
            i += 1
        elif i >= len(left):
            out.append(right[j])
            j += 1
        else:
            li = _index(server_order, left[i], merge_key, is_map)
            ri = _index(server_order, right[j], merge_key, is_map)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _validate_order(patch_list: list[Any], order: list[Any], merge_key: str) -> None:
    """validatePatchWithSetOrderList: the patch list's items appear in the order list, in order."""
    if not order or not patch_list:
        return
    items = patch_list
    if merge_key:
        for item in patch_list:
            if not isinstance(item, dict):
                raise _bad_arg_type("map[string]interface {}", item)
        items = [item for item in patch_list if item.get(_DIRECTIVE) != _DELETE]
    p = o = 0
    while p < len(items) and o < len(order):
        item = items[p]
        if isinstance(item, dict) and _DIRECTIVE in item:
            p += 1
            continue
        if merge_key:
            if not isinstance(order[o], dict):
                raise _bad_arg_type("map[string]interface {}", order[o])
            for m in (item, order[o]):
                if merge_key not in m:
                    raise _no_merge_key(m, merge_key)
            equal = _same(item[merge_key], order[o][merge_key])
        else:
            equal = _same(item, order[o])
        if equal:
            p += 1
        o += 1
    if p < len(items) and o >= len(order):
        raise PatchError(
            f"The order in patch list:\n{_go(patch_list)}\n doesn't match {_ORDER_PREFIX} "
            f"list:\n{_go(order)}\n",
            500,
        )


def apply_strategic_merge_patch(
    target: Mapping[str, Any], patch: Mapping[str, Any], kind: str, group: str = ""
) -> dict[str, Any]:
    """application/strategic-merge-patch+json for a built-in kind.

    Lists with a merge strategy merge by their merge key (primitive ones as sets), others are
    replaced; null deletes; `$patch` (replace/delete), `$deleteFromPrimitiveList/<f>`,
    `$setElementOrder/<f>` and `$retainKeys` work as on a real server, and so do the errors
    (see PatchError.code).
    """
    if (group, kind) not in MERGE_KEYS:
        raise PatchError("strategic merge patch format is not supported", 415)
    if not isinstance(patch, Mapping):
        raise PatchError(
            f"json: cannot unmarshal {type(patch).__name__} into Go value of type "
            "map[string]interface {}",
            400,
        )
    if not isinstance(target, Mapping):
        raise PatchError("invalid JSON document", 400)
    _check_directives(patch)
    merger = _Merger(MERGE_KEYS[(group, kind)])
    return merger.merge_map(copy.deepcopy(dict(target)), copy.deepcopy(dict(patch)), ())
