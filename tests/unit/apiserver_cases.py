"""Shared inputs of the apiserver admission tests: the project's CRDs, a synthetic CRD
exercising what they do not, object builders and random JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import strategies as st

from sim.apiserver.errors import ApiError, Cause
from sim.cluster import manifests

CRD_DIR = manifests.CRD_DIR
API_VERSION = "resource.nvidia.com/v1beta1"
RULES_SKIPPED = Cause(
    "<nil>",
    "FieldValueInvalid",
    'Invalid value: null: some validation rules were not checked because the object was '
    "invalid; correct the existing errors to complete validation",
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def load_crd(plural: str) -> dict[str, Any]:
    """One of the project's CRDs, as shipped under packaging/helm/dra-driver-nvidia-gpu/crds."""
    with (CRD_DIR / f"resource.nvidia.com_{plural}.yaml").open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def cd(spec: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A ComputeDomain with `spec` (default: the smallest valid one) and extra top-level keys."""
    obj = {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "default", "resourceVersion": "7"},
        "spec": spec if spec is not None else {"channel": {"resourceClaimTemplate": {"name": "t"}}},
    }
    return {**obj, **extra}


def rejected(fn: Callable[[], Any]) -> list[Cause]:
    """The causes of the 422 Invalid that `fn` must raise."""
    with pytest.raises(ApiError) as exc:
        fn()
    assert (exc.value.code, exc.value.reason) == (422, "Invalid")
    return exc.value.causes


# A synthetic CRD exercising what the project's own CRDs do not.
WIDGET_SPEC: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
        "size": {
            "type": "number",
            "minimum": 0,
            "exclusiveMinimum": True,
            "maximum": 10,
            "multipleOf": 0.5,
        },
        "count": {"type": "integer", "default": 1, "maximum": 3},
        "port": {"x-kubernetes-int-or-string": True},
        "when": {"type": "string", "format": "date-time"},
        "uid": {"type": "string", "format": "uuid"},
        "flavor": {"type": "string", "format": "no-such-format"},
        "tags": {
            "type": "array",
            "items": {"type": "string"},
            "x-kubernetes-list-type": "set",
            "maxItems": 3,
            "minItems": 1,
        },
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "note": {"type": "string", "nullable": True},
        "mode": {"type": "string", "default": "fast", "enum": ["fast", "slow"]},
        "extra": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}},
        },
        "template": {
            "type": "object",
            "x-kubernetes-embedded-resource": True,
            "x-kubernetes-preserve-unknown-fields": True,
        },
        "nested": {
            "type": "object",
            "default": {},
            "properties": {"level": {"type": "string", "default": "low"}},
        },
        "entries": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "value": {"type": "integer", "minimum": 0},
                },
                "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "entries are immutable"}
                ],
            },
        },
        "frozen": {
            "type": "string",
            "x-kubernetes-validations": [{"rule": "oldSelf == self"}],
        },
        "sealed": {
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "x-kubernetes-validations": [
                {
                    "rule": "self == oldSelf",
                    "message": "sealed",
                    "reason": "FieldValueForbidden",
                    "fieldPath": ".key",
                }
            ],
        },
    },
}
WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": WIDGET_SPEC,
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def widget(**spec: Any) -> dict[str, Any]:
    """A Widget (of WIDGET_SCHEMA) with this spec."""
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": spec,
    }


# Random JSON for the robustness tests.
JSON_KEYS = st.sampled_from(
    [
        "numNodes",
        "channel",
        "allocationMode",
        "resourceClaimTemplate",
        "name",
        "status",
        "nodes",
        "ipAddress",
        "cliqueID",
        "index",
        "daemons",
        "nodeName",
        "size",
        "count",
        "port",
        "tags",
        "entries",
        "value",
        "labels",
        "extra",
        "template",
        "nested",
        "frozen",
        "sealed",
        "key",
    ]
) | st.text(max_size=4)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(JSON_KEYS, inner, max_size=4),
    max_leaves=24,
)
