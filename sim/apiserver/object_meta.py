"""`ValidateObjectMeta` and its label and annotation rules, shared by every kind.

Custom resources and built-in objects alike are refused for a bad name, namespace, label,
annotation, owner reference or finalizer, with the real server's field paths and messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.apiserver.errors import Cause
from sim.apiserver.field_errors import child, forbidden, invalid_value, required, too_long
from sim.apiserver.go_format import GoRepr
from sim.apiserver.names_validation import (
    NAME_RULES,
    dns1123_label_problems,
    label_value_problems,
    qualified_name_problems,
)


def _mask_trailing_dash(name: str) -> str:
    """generateName may end in '-' (a suffix follows); check it as if it did not."""
    return name[:-1] + "a" if len(name) > 1 and name.endswith("-") else name


def validate_labels(labels: Any, path: str) -> list[Cause]:
    """`ValidateLabels`: qualified-name keys and label values."""
    if not isinstance(labels, Mapping):
        return []
    out = []
    for key in sorted(labels, key=str):
        out += [invalid_value(path, key, m) for m in qualified_name_problems(str(key))]
        value = labels[key]
        if isinstance(value, str):
            out += [invalid_value(path, value, m) for m in label_value_problems(value)]
    return out


def validate_annotations(annotations: Any, path: str) -> list[Cause]:
    """`ValidateAnnotations`: qualified-name keys (any case) and 256 KiB in all."""
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
        return [required(child(path, "name"), "name or generateName is required")]
    check = NAME_RULES[name_rule]
    out: list[Cause] = []
    generate = meta.get("generateName")
    if isinstance(generate, str) and generate:
        out += [
            invalid_value(child(path, "generateName"), generate, m)
            for m in check(_mask_trailing_dash(generate))
        ]
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        out.append(required(child(path, "name"), "name or generateName is required"))
    else:
        out += [invalid_value(child(path, "name"), name, m) for m in check(name)]
    namespace = meta.get("namespace")
    if namespaced is True:
        if not namespace:
            out.append(required(child(path, "namespace")))
        elif isinstance(namespace, str):
            out += [
                invalid_value(child(path, "namespace"), namespace, m)
                for m in dns1123_label_problems(namespace)
            ]
    elif namespaced is False and namespace:
        out.append(forbidden(child(path, "namespace"), "not allowed on this type"))
    generation = meta.get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool) and generation < 0:
        out.append(
            invalid_value(
                child(path, "generation"), generation, "must be greater than or equal to 0"
            )
        )
    out += validate_labels(meta.get("labels"), child(path, "labels"))
    out += validate_annotations(meta.get("annotations"), child(path, "annotations"))
    owners = meta.get("ownerReferences")
    if isinstance(owners, list):
        owner_path = child(path, "ownerReferences")
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
                    out.append(invalid_value(child(owner_path, key), ref.get(key) or "", detail))
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
                    invalid_value(child(path, "finalizers"), fin, m)
                    for m in qualified_name_problems(fin)
                ]
    return out
