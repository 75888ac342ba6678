"""What kube-apiserver refuses in a CustomResourceDefinition object itself.

Names and scope, versions (exactly one stored), printer columns, scale paths, and a
structural `openAPIV3Schema`: every node typed, metadata left alone, valid list types,
defaults that survive pruning and validate, and only the rules the emulator can evaluate.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from sim.apiserver.crd_pruning import prune
from sim.apiserver.crd_rules import rule_problems
from sim.apiserver.crd_values import ValueSchema
from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import (
    child,
    forbidden,
    index,
    invalid_value,
    not_supported,
    required,
)
from sim.apiserver.go_format import GoRepr, go_repr
from sim.apiserver.json_values import as_list, as_str, str_list
from sim.apiserver.names_validation import dns1035_label_problems, dns1123_subdomain_problems
from sim.apiserver.schema_nodes import Schema, compile_pattern, properties_of

_SCHEMA_TYPES: Final = ("array", "boolean", "integer", "number", "object", "string")


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
_FORBIDDEN_SCHEMA_KEYS: Final = MappingProxyType(
    {
        "$ref": "$ref is not supported",
        "$schema": "$schema is not supported",
        "id": "id is not supported",
        "definitions": "definitions are not supported",
        "dependencies": "dependencies are not supported",
        "additionalItems": "additionalItems cannot be set to true",
        "patternProperties": "patternProperties is not supported",
    }
)


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
        vpath = index("spec.versions", i)
        if not isinstance(version, Mapping):
            out.append(invalid_value(vpath, version, "must be an object"))
            continue
        vname = as_str(version.get("name"))
        if not vname:
            out.append(required(child(vpath, "name")))
        elif problems := dns1035_label_problems(vname):
            out.append(invalid_value(child(vpath, "name"), vname, ",".join(problems)))
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
    kind = as_str(names.get("kind"))
    list_kind = as_str(names.get("listKind")) or (f"{kind}List" if kind else "")
    for key, value in (("plural", names.get("plural")), ("kind", kind)):
        if not value:
            out.append(required(child(base, key)))
    for key in ("plural", "singular"):
        value = names.get(key)
        if isinstance(value, str) and value and (problems := dns1035_label_problems(value)):
            out.append(invalid_value(child(base, key), value, ",".join(problems)))
    for key, value in (("kind", kind), ("listKind", list_kind)):
        if isinstance(value, str) and value and (problems := dns1035_label_problems(value.lower())):
            out.append(
                invalid_value(
                    child(base, key),
                    value,
                    "may have mixed case, but should otherwise match: " + ",".join(problems),
                )
            )
    if kind and kind == list_kind:
        out.append(
            invalid_value(
                child(base, "listKind"), list_kind, "kind and listKind may not be the same"
            )
        )
    for key in ("shortNames", "categories"):
        for i, value in enumerate(as_list(names.get(key))):
            if isinstance(value, str) and (problems := dns1035_label_problems(value)):
                out.append(invalid_value(index(child(base, key), i), value, ",".join(problems)))
    return out


def _crd_version(version: Mapping[str, Any], vpath: str) -> list[Cause]:
    out: list[Cause] = []
    schema_path = child(vpath, "schema.openAPIV3Schema")
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
            for where, why in rule_problems(schema, schema_path)
        ]
    for i, column in enumerate(as_list(version.get("additionalPrinterColumns"))):
        cpath = index(child(vpath, "additionalPrinterColumns"), i)
        if not isinstance(column, Mapping):
            out.append(invalid_value(cpath, column, "must be an object"))
            continue
        if not column.get("name"):
            out.append(required(child(cpath, "name")))
        ctype = column.get("type")
        if not ctype:
            out.append(required(child(cpath, "type")))
        elif ctype not in _COLUMN_TYPES:
            out.append(not_supported(child(cpath, "type"), ctype, _COLUMN_TYPES))
        fmt = column.get("format")
        if fmt and fmt not in _COLUMN_FORMATS:
            out.append(not_supported(child(cpath, "format"), fmt, _COLUMN_FORMATS))
        json_path = column.get("jsonPath")
        if not json_path:
            out.append(required(child(cpath, "jsonPath")))
        elif not isinstance(json_path, str) or not json_path.startswith("."):
            out.append(
                invalid_value(
                    child(cpath, "jsonPath"),
                    json_path,
                    "must be a simple json path starting with .",
                )
            )
        priority = column.get("priority")
        if isinstance(priority, int) and priority < 0:
            out.append(
                invalid_value(
                    child(cpath, "priority"), priority, "must be greater than or equal to 0"
                )
            )
    sub = version.get("subresources")
    if isinstance(sub, Mapping) and isinstance(sub.get("scale"), Mapping):
        scale = sub["scale"]
        spath = child(vpath, "subresources.scale")
        for key, prefix in (("specReplicasPath", ".spec."), ("statusReplicasPath", ".status.")):
            value = scale.get(key)
            if not value:
                out.append(required(child(spath, key)))
            elif not str(value).startswith(prefix):
                out.append(
                    invalid_value(
                        child(spath, key),
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
        node = properties_of(node).get(part[0]) if part[0] else node.get(part[1])
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
            out.append(forbidden(child(path, key), why))
    stype = s.get("type")
    int_or_string = bool(s.get("x-kubernetes-int-or-string"))
    preserve = s.get("x-kubernetes-preserve-unknown-fields")
    if preserve is False:
        out.append(
            invalid_value(
                child(path, "x-kubernetes-preserve-unknown-fields"),
                False,
                "must be true or undefined",
            )
        )
    if stype is not None and stype not in _SCHEMA_TYPES:
        out.append(not_supported(child(path, "type"), stype, _SCHEMA_TYPES))
    if root and stype != "object":
        if stype:
            out.append(invalid_value(child(path, "type"), stype, "must be object at the root"))
        else:
            out.append(required(child(path, "type"), "must not be empty at the root"))
    elif not stype and not int_or_string and not preserve:
        where = "for specified array items" if in_items else "for specified object fields"
        out.append(required(child(path, "type"), f"must not be empty {where}"))
    if int_or_string and stype:
        out.append(
            invalid_value(
                child(path, "type"), stype, "must be empty if x-kubernetes-int-or-string is true"
            )
        )
    if s.get("uniqueItems") is True:
        out.append(
            forbidden(
                child(path, "uniqueItems"),
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            )
        )
    addl = s.get("additionalProperties")
    if addl is not None and s.get("properties"):
        out.append(
            forbidden(
                child(path, "additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            )
        )
    if addl is False:
        out.append(
            forbidden(
                child(path, "additionalProperties"), "additionalProperties cannot be set to false"
            )
        )
    pattern = s.get("pattern")
    if pattern is not None:
        try:
            compile_pattern(str(pattern), strict=True)
        except re.error as err:
            out.append(
                invalid_value(
                    child(path, "pattern"),
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
            out += _structural(sub, ppath, data=child(data, name))
    elif props is not None:
        out.append(invalid_value(child(path, "properties"), props, "must be an object"))
    if isinstance(addl, Mapping):
        out += _structural(addl, child(path, "additionalProperties"), data=data)
    items = s.get("items")
    if items is not None:
        if isinstance(items, list):
            out.append(
                forbidden(child(path, "items"), "items must be a schema object and not an array")
            )
        else:
            out += _structural(items, child(path, "items"), in_items=True, data=data)
    elif stype == "array":
        out.append(required(child(path, "items"), "must be specified"))
    for key in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(s.get(key) or ()):
            if isinstance(sub, Mapping) and ("type" in sub or "default" in sub):
                out.append(
                    forbidden(
                        index(child(path, key), i) + ".type", "must be empty to be structural"
                    )
                )
    return out


def _metadata_schema(s: Any, path: str) -> list[Cause]:
    if not isinstance(s, Mapping):
        return [invalid_value(path, s, "must be an object")]
    allowed = {"type", "description"}
    props = properties_of(s)
    if set(s) - allowed - {"properties"} or set(props) - {"name", "generateName"}:
        return [
            forbidden(
                path,
                "must not specify anything other than name and generateName, "
                "but metadata is implicitly specified",
            )
        ]
    if s.get("type") not in (None, "object"):
        return [invalid_value(child(path, "type"), s.get("type"), "must be object")]
    return []


def _structural_lists(s: Mapping[str, Any], path: str) -> list[Cause]:
    out: list[Cause] = []
    list_type = s.get("x-kubernetes-list-type")
    raw_keys = s.get("x-kubernetes-list-map-keys")
    keys = str_list(raw_keys)
    if list_type is not None:
        if list_type not in ("atomic", "set", "map"):
            out.append(
                not_supported(
                    child(path, "x-kubernetes-list-type"), list_type, ["atomic", "set", "map"]
                )
            )
        elif s.get("type") != "array":
            out.append(
                invalid_value(
                    child(path, "x-kubernetes-list-type"),
                    list_type,
                    "must only be used on type=array",
                )
            )
    items = s.get("items") if isinstance(s.get("items"), Mapping) else {}
    if list_type == "map":
        kpath = child(path, "x-kubernetes-list-map-keys")
        if not keys:
            out.append(required(kpath, "must not be empty if x-kubernetes-list-type is map"))
        elif items.get("type") != "object":
            out.append(
                invalid_value(
                    child(path, "items.type"),
                    items.get("type") or "",
                    "must be object if parent array's x-kubernetes-list-type is map",
                )
            )
        else:
            props = properties_of(items)
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
                elif key not in str_list(items.get("required")) and "default" not in prop:
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
                child(path, "x-kubernetes-list-map-keys"),
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
                child(path, "items.x-kubernetes-map-type"),
                items.get("x-kubernetes-map-type") or "",
                "must be atomic as item of a list with x-kubernetes-list-type=set",
            )
        )
    return out


def _check_default(s: Mapping[str, Any], path: str, data: str) -> list[Cause]:
    """A default must survive pruning unchanged and validate against its own schema."""
    default = s["default"]
    dpath = child(path, "default")
    below = {k: v for k, v in s.items() if k != "x-kubernetes-validations"}
    if any(rule_problems(below, "openAPIV3Schema")):
        return []  # a schema CRDSchema refuses; the rule problems are reported on their own
    pruned: list[str] = []
    prune(copy.deepcopy(default), s, data, pruned)
    if pruned:
        return [
            invalid_value(
                dpath,
                GoRepr(go_repr(default)),
                f"must not have unknown fields: {', '.join(pruned)}",
            )
        ]
    found = ValueSchema(s, root=False).errors(copy.deepcopy(default), prefix=data)
    return [Cause(dpath, c.reason, c.message) for c in found]
