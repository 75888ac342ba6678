"""sim.apiserver.schema: the emulator's copy of what kube-apiserver does before storing objects.

Custom resources: pruning, defaulting, structural validation, list types, transition rules
and ratcheting, with the real server's field paths, reasons and messages. CRD objects: what
their creation checks. Built-in objects: the Kubernetes JSON schemas plus the hand-written
rules the project's controller output must satisfy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.apiserver.errors import ApiError, Cause
from sim.apiserver.schema import (
    BuiltinSchemas,
    CRDSchema,
    crd_resource_info,
    go_repr,
    validate_crd,
    validate_object_meta,
)

CRD_DIR = Path(__file__).resolve().parents[2] / "packaging" / "crds"
API_VERSION = "resource.nvidia.com/v1beta1"
RULES_SKIPPED = Cause(
    "<nil>",
    "FieldValueInvalid",
    'Invalid value: "null": some validation rules were not checked because the object was '
    "invalid; correct the existing errors to complete validation",
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def _load(plural: str) -> dict[str, Any]:
    with (CRD_DIR / f"resource.nvidia.com_{plural}.yaml").open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@pytest.fixture(scope="module")
def cd_crd() -> dict[str, Any]:
    return _load("computedomains")


@pytest.fixture(scope="module")
def cd_schema(cd_crd: dict[str, Any]) -> CRDSchema:
    return CRDSchema.from_crd(cd_crd)


@pytest.fixture(scope="module")
def clique_schema() -> CRDSchema:
    return CRDSchema.from_crd(_load("computedomaincliques"))


@pytest.fixture(scope="module")
def builtin() -> BuiltinSchemas:
    return BuiltinSchemas()


def cd(spec: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    obj = {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "default", "resourceVersion": "7"},
        "spec": spec if spec is not None else {"channel": {"resourceClaimTemplate": {"name": "t"}}},
    }
    return {**obj, **extra}


def rejected(fn: Callable[[], Any]) -> list[Cause]:
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


@pytest.fixture(scope="module")
def widgets() -> CRDSchema:
    return CRDSchema(WIDGET_SCHEMA, group="example.com", kind="Widget", version="v1")


def widget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": spec,
    }


# --- pruning ----------------------------------------------------------------------------


def test_unknown_fields_are_pruned_and_reported(cd_schema: CRDSchema) -> None:
    obj = cd()
    obj["spec"]["numnodes"] = 4
    obj["spec"]["channel"]["resourceClaimTemplate"]["namespace"] = "x"
    obj["bogus"] = {"a": 1}
    assert sorted(cd_schema.unknown_fields(obj)) == [
        "bogus",
        "spec.channel.resourceClaimTemplate.namespace",
        "spec.numnodes",
    ]
    stored = cd_schema.admit_create(obj)
    assert "numnodes" not in stored["spec"] and "bogus" not in stored
    assert stored["spec"]["channel"]["resourceClaimTemplate"] == {"name": "t"}


def test_inputs_are_never_modified(cd_schema: CRDSchema) -> None:
    obj = cd()
    obj["spec"]["junk"] = 1
    before = copy.deepcopy(obj)
    stored = cd_schema.admit_create(obj)
    old = copy.deepcopy(stored)
    cd_schema.admit_update(copy.deepcopy(obj), old)
    assert obj == before and old == stored
    assert stored is not obj and stored["spec"] is not obj["spec"]


def test_strict_field_validation_refuses_unknown_fields(cd_schema: CRDSchema) -> None:
    obj = cd()
    obj["spec"]["numnodes"] = 4
    with pytest.raises(ApiError) as exc:
        cd_schema.admit_create(obj, field_validation="Strict")
    assert (exc.value.code, exc.value.reason) == (400, "BadRequest")
    assert exc.value.message == (
        'ComputeDomain in version "v1beta1" cannot be handled as a ComputeDomain: '
        'strict decoding error: unknown field "spec.numnodes"'
    )


def test_metadata_is_kept_verbatim_and_not_validated(cd_schema: CRDSchema) -> None:
    obj = cd()
    obj["metadata"] = {"name": "Not_A_DNS_Name", "whatever": {"x": 1}}
    assert cd_schema.admit_create(obj)["metadata"] == obj["metadata"]
    obj["metadata"] = "string"
    causes = rejected(lambda: cd_schema.admit_create(obj))
    assert causes == [
        Cause(
            "metadata",
            "FieldValueTypeInvalid",
            'Invalid value: "string": metadata in body must be of type object: "string"',
        ),
        RULES_SKIPPED,
    ]


def test_preserve_unknown_fields_and_embedded_resources(widgets: CRDSchema) -> None:
    obj = widget(
        extra={"anything": {"goes": [1, 2]}, "known": {"a": "x", "b": "pruned"}},
        template={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}},
    )
    assert widgets.unknown_fields(obj) == ["spec.extra.known.b"]
    stored = widgets.admit_create(obj)
    assert stored["spec"]["extra"] == {"anything": {"goes": [1, 2]}, "known": {"a": "x"}}
    assert stored["spec"]["template"] == obj["spec"]["template"]
    bad = widget(template={"metadata": {"name": "Bad_Name"}})
    causes = rejected(lambda: widgets.admit_create(bad))
    assert [(c.field, c.message) for c in causes[:2]] == [
        ("spec.template.apiVersion", "Required value: must not be empty"),
        ("spec.template.kind", "Required value: must not be empty"),
    ]
    assert causes[2].field == "spec.template.metadata.name"


# --- defaulting -------------------------------------------------------------------------


def test_defaults_fill_only_existing_objects(cd_schema: CRDSchema) -> None:
    stored = cd_schema.admit_create(cd())
    assert stored["spec"] == {
        "channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Single"},
        "numNodes": 0,
    }
    assert "status" not in stored
    with_status = cd_schema.admit_create(
        cd(status={"nodes": [{"name": "n", "ipAddress": "i", "cliqueID": ""}]})
    )
    assert with_status["status"] == {
        "status": "NotReady",
        "nodes": [{"name": "n", "ipAddress": "i", "cliqueID": "", "status": "NotReady"}],
    }


def test_defaulting_runs_after_pruning_and_inside_defaults(widgets: CRDSchema) -> None:
    stored = widgets.admit_create(widget(nested={"stale": 1}))
    assert stored["spec"]["nested"] == {"level": "low"}
    stored = widgets.admit_create(widget())
    assert stored["spec"]["nested"] == {"level": "low"}  # default {} then its own defaults
    assert (stored["spec"]["count"], stored["spec"]["mode"]) == (1, "fast")


def test_null_is_dropped_then_defaulted_unless_nullable(widgets: CRDSchema) -> None:
    stored = widgets.admit_create(widget(count=None, mode=None, note=None, name=None))
    assert stored["spec"]["count"] == 1 and stored["spec"]["mode"] == "fast"
    assert stored["spec"]["note"] is None
    assert "name" not in stored["spec"]


def test_integral_float_is_an_integer(cd_schema: CRDSchema) -> None:
    """2.0 passes `type: integer` and reads back as 2, as after Go's JSON round trip."""
    stored = cd_schema.admit_create(
        cd({"channel": {"resourceClaimTemplate": {"name": "t"}}, "numNodes": 2.0})
    )
    assert stored["spec"]["numNodes"] == 2 and isinstance(stored["spec"]["numNodes"], int)


# --- error forms ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "cause", "rules_skipped"),
    [
        (
            {"channel": {}},
            Cause("spec.channel.resourceClaimTemplate", "FieldValueRequired", "Required value"),
            True,
        ),
        (
            {"channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Many"}},
            Cause(
                "spec.channel.allocationMode",
                "FieldValueNotSupported",
                'Unsupported value: "Many": supported values: "All", "Single"',
            ),
            True,
        ),
        (
            {"channel": {"resourceClaimTemplate": {"name": "t"}}, "numNodes": -1},
            Cause(
                "spec.numNodes",
                "FieldValueInvalid",
                "Invalid value: -1: spec.numNodes in body should be greater than or equal to 0",
            ),
            False,
        ),
        (
            {"channel": {"resourceClaimTemplate": {"name": "t"}}, "numNodes": "string"},
            Cause(
                "spec.numNodes",
                "FieldValueTypeInvalid",
                'Invalid value: "string": spec.numNodes in body must be of type integer: "string"',
            ),
            True,
        ),
        (
            {"channel": {"resourceClaimTemplate": {"name": "t"}}, "numNodes": 1.5},
            Cause(
                "spec.numNodes",
                "FieldValueTypeInvalid",
                'Invalid value: "number": spec.numNodes in body must be of type integer: "number"',
            ),
            True,
        ),
    ],
)
def test_error_forms_match_kube_apiserver(
    cd_schema: CRDSchema, spec: dict[str, Any], cause: Cause, rules_skipped: bool
) -> None:
    """CEL rules are skipped (with a marker cause) after type/required/enum errors."""
    causes = rejected(lambda: cd_schema.admit_create(cd(spec)))
    assert causes == ([cause, RULES_SKIPPED] if rules_skipped else [cause])


def test_status_message_lists_every_cause(cd_schema: CRDSchema) -> None:
    with pytest.raises(ApiError) as exc:
        cd_schema.admit_create(
            cd({"channel": {"resourceClaimTemplate": {"name": "t"}}, "numNodes": -1})
        )
    assert exc.value.message == (
        'ComputeDomain.resource.nvidia.com "cd" is invalid: spec.numNodes: Invalid value: -1: '
        "spec.numNodes in body should be greater than or equal to 0"
    )
    body = exc.value.status_object()
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: -1: spec.numNodes in body should be greater than or "
            "equal to 0",
            "field": "spec.numNodes",
        }
    ]


def test_clique_without_rules_has_no_skip_marker(clique_schema: CRDSchema) -> None:
    obj = {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomainClique",
        "metadata": {"name": "c", "namespace": "d"},
        "daemons": [{"nodeName": "n", "ipAddress": "i", "cliqueID": "c", "status": "Bogus"}],
    }
    causes = rejected(lambda: clique_schema.admit_create(obj))
    assert [c.field for c in causes] == ["daemons[0].status"]


@pytest.mark.parametrize(
    ("spec", "field", "reason", "message"),
    [
        (
            {"name": "x"},
            "spec.name",
            "FieldValueInvalid",
            'Invalid value: "x": spec.name in body should be at least 2 chars long',
        ),
        (
            {"name": "abcdef"},
            "spec.name",
            "FieldValueTooLong",
            "Too long: may not be more than 5 bytes",
        ),
        (
            {"name": "AB"},
            "spec.name",
            "FieldValueInvalid",
            "Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'",
        ),
        (
            {"size": 0},
            "spec.size",
            "FieldValueInvalid",
            "Invalid value: 0: spec.size in body should be greater than 0",
        ),
        (
            {"size": 10.5},
            "spec.size",
            "FieldValueInvalid",
            "Invalid value: 10.5: spec.size in body should be less than or equal to 10",
        ),
        (
            {"size": 1.25},
            "spec.size",
            "FieldValueInvalid",
            "Invalid value: 1.25: spec.size in body should be a multiple of 0.5",
        ),
        (
            {"count": 4},
            "spec.count",
            "FieldValueInvalid",
            "Invalid value: 4: spec.count in body should be less than or equal to 3",
        ),
        (
            {"port": True},
            "spec.port",
            "FieldValueTypeInvalid",
            'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"',
        ),
        (
            {"when": "yesterday"},
            "spec.when",
            "FieldValueTypeInvalid",
            'Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"',
        ),
        (
            {"uid": "nope"},
            "spec.uid",
            "FieldValueTypeInvalid",
            'Invalid value: "nope": spec.uid in body must be of type uuid: "nope"',
        ),
        (
            {"tags": ["a", "b", "c", "d"]},
            "spec.tags",
            "FieldValueTooMany",
            "Too many: 4: must have at most 3 items",
        ),
        (
            {"tags": []},
            "spec.tags",
            "FieldValueInvalid",
            "Invalid value: 0: spec.tags in body should have at least 1 items",
        ),
        ({"tags": ["a", "a"]}, "spec.tags[1]", "FieldValueDuplicate", 'Duplicate value: "a"'),
        (
            {"labels": {"a": 1}},
            "spec.labels.a",
            "FieldValueTypeInvalid",
            'Invalid value: "integer": spec.labels.a in body must be of type string: "integer"',
        ),
        (
            {"entries": [{"name": "a"}, {"name": "a"}]},
            "spec.entries[1]",
            "FieldValueDuplicate",
            'Duplicate value: map[string]interface {}{"name":"a"}',
        ),
        (
            {"entries": [{"value": 1}]},
            "spec.entries[0].name",
            "FieldValueRequired",
            "Required value",
        ),
        (
            {"entries": [{"name": "a", "value": -2}]},
            "spec.entries[0].value",
            "FieldValueInvalid",
            "Invalid value: -2: spec.entries[0].value in body should be greater than or equal to 0",
        ),
        (
            {"entries": [{"name": "a", "value": 1.5}]},
            "spec.entries[0].value",
            "FieldValueTypeInvalid",
            'Invalid value: "number": spec.entries[0].value in body must be of type integer: '
            '"number"',
        ),
    ],
)
def test_validation_keywords(
    widgets: CRDSchema, spec: dict[str, Any], field: str, reason: str, message: str
) -> None:
    causes = [
        c for c in rejected(lambda: widgets.admit_create(widget(**spec))) if c.field != "<nil>"
    ]
    assert causes == [Cause(field, reason, message)]


def test_non_object_in_list_map(widgets: CRDSchema) -> None:
    causes = rejected(lambda: widgets.admit_create(widget(entries=["a"])))
    assert causes == [
        Cause(
            "spec.entries[0]",
            "FieldValueTypeInvalid",
            'Invalid value: "string": spec.entries[0] in body must be of type object: "string"',
        ),
        Cause(
            "spec.entries[0]",
            "FieldValueInvalid",
            'Invalid value: "a": must be an object for an array of list-type map',
        ),
        RULES_SKIPPED,
    ]


def test_values_that_pass(widgets: CRDSchema) -> None:
    stored = widgets.admit_create(
        widget(
            name="ab",
            size=10,
            port="http",
            when="2024-05-01T10:00:00Z",
            flavor="anything",
            uid="3f1c9a52-6a5e-4c2b-9d7e-0a1b2c3d4e5f",
            tags=["a", "b"],
            labels={"k": "v"},
            entries=[{"name": "a", "value": 0}, {"name": "b"}],
        )
    )
    assert stored["spec"]["port"] == "http"
    assert widgets.admit_create(widget(port=8080))["spec"]["port"] == 8080


def test_list_map_duplicate_in_project_crd(cd_schema: CRDSchema) -> None:
    nodes = [
        {"name": "n1", "ipAddress": "a", "cliqueID": "c"},
        {"name": "n1", "ipAddress": "b", "cliqueID": "c"},
    ]
    causes = rejected(
        lambda: cd_schema.admit_create(cd(status={"status": "Ready", "nodes": nodes}))
    )
    assert causes == [
        Cause(
            "status.nodes[1]",
            "FieldValueDuplicate",
            'Duplicate value: map[string]interface {}{"name":"n1"}',
        )
    ]


# --- transition rules and ratcheting --------------------------------------------------


def test_spec_change_is_refused(cd_schema: CRDSchema) -> None:
    old = cd_schema.admit_create(cd())
    new = copy.deepcopy(old)
    new["spec"]["numNodes"] = 3
    causes = rejected(lambda: cd_schema.admit_update(new, old))
    assert causes == [
        Cause(
            "spec",
            "FieldValueInvalid",
            'Invalid value: "object": A computeDomain.spec is immutable',
        )
    ]


def test_status_change_is_allowed(cd_schema: CRDSchema) -> None:
    old = cd_schema.admit_create(cd())
    new = copy.deepcopy(old)
    new["status"] = {
        "status": "Ready",
        "nodes": [{"name": "n", "ipAddress": "i", "cliqueID": "c", "index": 0}],
    }
    new["metadata"]["resourceVersion"] = "8"
    stored = cd_schema.admit_update(new, old)
    assert stored["status"]["nodes"][0]["status"] == "NotReady"


def test_reapplying_without_defaults_is_not_a_change(cd_schema: CRDSchema) -> None:
    """Both sides are defaulted before `self == oldSelf` compares them."""
    manifest = cd()
    old = cd_schema.admit_create(manifest)
    assert cd_schema.admit_update(manifest, old) == old
    legacy_old = cd()  # stored before defaults existed: read-time defaulting fills them too
    assert cd_schema.admit_update(manifest, legacy_old)["spec"]["numNodes"] == 0


def test_rules_on_list_map_items_correlate_by_key(widgets: CRDSchema) -> None:
    old = widgets.admit_create(widget(entries=[{"name": "a", "value": 1}]))
    moved = widget(entries=[{"name": "b", "value": 5}, {"name": "a", "value": 1}])
    assert widgets.admit_update(moved, old)["spec"]["entries"][0]["name"] == "b"
    changed = widget(entries=[{"name": "b"}, {"name": "a", "value": 2}])
    causes = rejected(lambda: widgets.admit_update(changed, old))
    assert causes == [
        Cause(
            "spec.entries[1]", "FieldValueInvalid", 'Invalid value: "object": entries are immutable'
        )
    ]


def test_rule_reason_field_path_and_default_message(widgets: CRDSchema) -> None:
    old = widgets.admit_create(widget(frozen="a", sealed={"key": "k"}))
    causes = rejected(lambda: widgets.admit_update(widget(frozen="b", sealed={"key": "j"}), old))
    assert causes == [
        Cause(
            "spec.frozen",
            "FieldValueInvalid",
            'Invalid value: "string": failed rule: oldSelf == self',
        ),
        Cause("spec.sealed.key", "FieldValueForbidden", "Forbidden: sealed"),
    ]
    # A value absent on either side is not a transition: adding or removing is allowed.
    assert "frozen" not in widgets.admit_update(widget(), old)["spec"]


def test_unchanged_invalid_values_are_ratcheted(widgets: CRDSchema) -> None:
    old = widget(name="TOOLONG", tags=["x", "x"])  # valid under an older CRD version
    updated = widget(name="TOOLONG", tags=["x", "x"], count=2)
    assert widgets.admit_update(updated, old)["spec"]["count"] == 2
    changed = widget(name="STILLBAD", tags=["x", "x"])
    causes = rejected(lambda: widgets.admit_update(changed, old))
    assert {c.field for c in causes} == {"spec.name", "<nil>"}


# --- rules the emulator cannot evaluate -------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        {"rule": "self.numNodes >= 0"},
        {"rule": "self == oldSelf", "messageExpression": "'no'"},
        {"rule": "self == oldSelf", "optionalOldSelf": True},
    ],
)
def test_unsupported_rules_refuse_the_crd(cd_crd: dict[str, Any], rule: dict[str, Any]) -> None:
    crd = copy.deepcopy(cd_crd)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-validations"] = [rule]
    (cause,) = validate_crd(crd)
    assert cause.field == (
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    )
    assert cause.reason == "FieldValueInvalid"
    assert "not supported by this API server emulator" in cause.message
    with pytest.raises(ValueError, match="not supported"):
        CRDSchema.from_crd(crd)


def test_rules_inside_atomic_lists_cannot_use_old_self() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "list": {
                        "type": "array",
                        "items": {
                            "type": "string",
                            "x-kubernetes-validations": [{"rule": "self == oldSelf"}],
                        },
                    }
                },
            }
        },
    }
    with pytest.raises(ValueError, match="uncorrelatable"):
        CRDSchema(schema)


# --- CRD objects ------------------------------------------------------------------------


def test_project_crds_are_accepted(cd_crd: dict[str, Any]) -> None:
    assert validate_crd(cd_crd) == []
    assert validate_crd(_load("computedomaincliques")) == []


def _crd_with(change: Callable[[dict[str, Any]], None]) -> list[Cause]:
    crd = _load("computedomains")
    change(crd)
    return validate_crd(crd)


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


V0 = "spec.versions[0]"
ROOT = f"{V0}.schema.openAPIV3Schema"


@pytest.mark.parametrize(
    ("change", "field", "reason", "fragment"),
    [
        (
            lambda c: c["metadata"].update(name="x.resource.nvidia.com"),
            "metadata.name",
            "FieldValueInvalid",
            'must be spec.names.plural+"."+spec.group',
        ),
        (lambda c: c["spec"].pop("group"), "spec.group", "FieldValueRequired", "Required value"),
        (
            lambda c: c["spec"]["names"].pop("kind"),
            "spec.names.kind",
            "FieldValueRequired",
            "Required value",
        ),
        (
            lambda c: c["spec"].update(scope="Global"),
            "spec.scope",
            "FieldValueNotSupported",
            '"Cluster", "Namespaced"',
        ),
        (
            lambda c: c["spec"].update(versions=[]),
            "spec.versions",
            "FieldValueRequired",
            "must have exactly one version marked as storage version",
        ),
        (
            lambda c: c["spec"]["versions"][0].update(storage=False),
            "spec.versions",
            "FieldValueInvalid",
            "must have exactly one version marked as storage version",
        ),
        (
            lambda c: c["spec"]["versions"][0].pop("schema"),
            f"{ROOT}",
            "FieldValueRequired",
            "schemas are required",
        ),
        (
            lambda c: _schema(c)["properties"]["spec"]["properties"]["numNodes"].pop("type"),
            f"{ROOT}.properties[spec].properties[numNodes].type",
            "FieldValueRequired",
            "must not be empty for specified object fields",
        ),
        (
            lambda c: _schema(c)["properties"]["status"]["properties"]["nodes"]["items"].pop(
                "type"
            ),
            f"{ROOT}.properties[status].properties[nodes].items.type",
            "FieldValueRequired",
            "must not be empty for specified array items",
        ),
        (
            lambda c: _schema(c)["properties"]["metadata"].update(properties={"labels": {}}),
            f"{ROOT}.properties[metadata]",
            "FieldValueForbidden",
            "must not specify anything other than name and generateName",
        ),
        (
            lambda c: _schema(c)["properties"]["spec"]["properties"]["numNodes"].update(default=-1),
            f"{ROOT}.properties[spec].properties[numNodes].default",
            "FieldValueInvalid",
            "spec.numNodes in body should be greater than or equal to 0",
        ),
        (
            lambda c: _schema(c)["properties"]["status"]["properties"]["nodes"].update(
                uniqueItems=True
            ),
            f"{ROOT}.properties[status].properties[nodes].uniqueItems",
            "FieldValueForbidden",
            "uniqueItems cannot be set to true",
        ),
        (
            lambda c: _schema(c)["properties"]["status"]["properties"]["nodes"]["items"].update(
                required=["ipAddress"]
            ),
            f"{ROOT}.properties[status].properties[nodes].items.properties[name]",
            "FieldValueRequired",
            "must have a default or be a required",
        ),
        (
            lambda c: c["spec"]["versions"][0]["additionalPrinterColumns"][0].pop("jsonPath"),
            f"{V0}.additionalPrinterColumns[0].jsonPath",
            "FieldValueRequired",
            "Required value",
        ),
        (
            lambda c: c["spec"]["versions"][0]["additionalPrinterColumns"][0].update(type="text"),
            f"{V0}.additionalPrinterColumns[0].type",
            "FieldValueNotSupported",
            '"boolean", "date"',
        ),
        (
            lambda c: c["spec"]["versions"][0]["additionalPrinterColumns"][0].pop("name"),
            f"{V0}.additionalPrinterColumns[0].name",
            "FieldValueRequired",
            "Required value",
        ),
    ],
)
def test_broken_crds_are_refused(
    change: Callable[[dict[str, Any]], None], field: str, reason: str, fragment: str
) -> None:
    causes = _crd_with(change)
    assert any(c.field == field and c.reason == reason and fragment in c.message for c in causes), (
        causes
    )


def test_crd_resource_info_defaults() -> None:
    crd = {
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {
                "kind": "Widget",
                "plural": "widgets",
                "shortNames": ["wd"],
                "categories": ["all"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                        },
                    },
                },
                {
                    "name": "v1alpha1",
                    "served": False,
                    "storage": False,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                },
            ],
        },
    }
    assert validate_crd(crd) == []
    info = crd_resource_info(crd)
    assert (info.list_kind, info.singular, info.short_names, info.categories) == (
        "WidgetList",
        "widget",
        ("wd",),
        ("all",),
    )
    assert not info.namespaced
    assert (info.storage_version, info.served_versions) == ("v1", ("v1",))
    v1 = info.version("v1")
    assert v1 is not None and v1.status_subresource
    assert v1.scale is not None and v1.scale.spec_replicas_path == ".spec.replicas"
    assert [c.name for c in v1.printer_columns] == ["Age"]  # the implicit column
    assert info.version("v2") is None


# --- built-in objects -------------------------------------------------------------------

CD_UID = "3f1c9a52-6a5e-4c2b-9d7e-0a1b2c3d4e5f"
CD_LABEL = {"resource.nvidia.com/computeDomain": CD_UID}


def daemonset() -> dict[str, Any]:
    """What the controller renders for one ComputeDomain's IMEX daemons."""
    check = {"exec": {"command": ["compute-domain-daemon", "check"]}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": f"computedomain-daemon-{CD_UID[:8]}",
            "namespace": "nvidia-dra-driver",
            "labels": dict(CD_LABEL),
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "ComputeDomain",
                    "name": "cd",
                    "uid": CD_UID,
                    "controller": True,
                }
            ],
            "finalizers": ["resource.nvidia.com/computeDomain"],
        },
        "spec": {
            "selector": {"matchLabels": dict(CD_LABEL)},
            "template": {
                "metadata": {"labels": dict(CD_LABEL)},
                "spec": {
                    "serviceAccountName": "compute-domain-daemon-service-account",
                    "nodeSelector": dict(CD_LABEL),
                    "resourceClaims": [
                        {
                            "name": "compute-domain-daemon",
                            "resourceClaimTemplateName": "cd-daemon-claim",
                        }
                    ],
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"operator": "Exists"},
                    ],
                    "containers": [
                        {
                            "name": "compute-domain-daemon",
                            "image": "nvcr.io/nvidia/k8s-dra-driver:v25.8.0",
                            "command": ["compute-domain-daemon", "run"],
                            "env": [
                                {
                                    "name": "NODE_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                },
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "status.podIP",
                                        }
                                    },
                                },
                                {"name": "CLIQUE_ID", "value": ""},
                            ],
                            "startupProbe": {**check, "periodSeconds": 1, "failureThreshold": 60},
                            "livenessProbe": {**check, "periodSeconds": 10},
                            "readinessProbe": dict(check),
                            "resources": {
                                "claims": [{"name": "compute-domain-daemon"}],
                                "limits": {"memory": "256Mi", "cpu": 1},
                            },
                            "securityContext": {"privileged": True},
                            "volumeMounts": [{"name": "run", "mountPath": "/run/nvidia"}],
                        }
                    ],
                    "volumes": [{"name": "run", "hostPath": {"path": "/run/nvidia"}}],
                },
            },
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "100%"},
            },
        },
    }


def claim_template() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "imex-channel-0", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "channel",
                            "exactly": {
                                "deviceClassName": "compute-domain-default-channel.nvidia.com"
                            },
                        }
                    ],
                    "config": [
                        {
                            "requests": ["channel"],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {
                                    "apiVersion": API_VERSION,
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": CD_UID,
                                    "allocationMode": "Single",
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def claim() -> dict[str, Any]:
    result = {
        "request": "channel",
        "driver": "compute-domain.nvidia.com",
        "pool": "node-1",
        "device": "channel-0",
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "workload-0-imex-x7k2p", "namespace": "default"},
        "spec": claim_template()["spec"]["spec"],
        "status": {
            "allocation": {
                "devices": {
                    "results": [result],
                    "config": [
                        {
                            "source": "FromClaim",
                            "requests": ["channel"],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {"a": 1},
                            },
                        }
                    ],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [
                {
                    "resource": "pods",
                    "name": "workload-0",
                    "uid": "1b1c2d3e-0000-1111-2222-333344445555",
                }
            ],
        },
    }


def resource_slice() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-1-compute-domain.nvidia.com-abcde"},
        "spec": {
            "driver": "compute-domain.nvidia.com",
            "nodeName": "node-1",
            "pool": {"name": "node-1", "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "channel-0",
                    "attributes": {"type": {"string": "channel"}, "id": {"int": 0}},
                },
                {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}}},
            ],
        },
    }


def device_class() -> dict[str, Any]:
    expr = (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel'"
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "compute-domain-default-channel.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": expr}}]},
    }


def node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-1", "labels": {"nvidia.com/gpu.clique": "c1.1"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "8", "nvidia.com/gpu": 4},
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2024-01-01T00:00:00Z"}
            ],
            "nodeInfo": {"kubeletVersion": "v1.34.0"},
        },
    }


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "workload-0", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "ubuntu:22.04",
                    "resources": {"claims": [{"name": "imex"}]},
                }
            ],
            "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": "imex-channel-0"}],
            "restartPolicy": "Never",
        },
        "status": {"phase": "Running", "podIP": "10.0.0.5"},
    }


def lease() -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "compute-domain-controller", "namespace": "nvidia"},
        "spec": {
            "holderIdentity": "pod-1",
            "leaseDurationSeconds": 15,
            "renewTime": "2024-01-01T00:00:05.123456Z",
            "leaseTransitions": 0,
        },
    }


def event() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "cd.17a8b9c0d1e2f3a4", "namespace": "default"},
        "involvedObject": {"kind": "ComputeDomain", "name": "cd", "namespace": "default"},
        "reason": "Created",
        "message": "created",
        "type": "Normal",
        "count": 1,
        "firstTimestamp": "2024-01-01T00:00:00Z",
        "source": {"component": "controller"},
    }


def role() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "compute-domain-daemon", "namespace": "nvidia"},
        "rules": [
            {
                "apiGroups": ["resource.nvidia.com"],
                "resources": ["computedomaincliques"],
                "verbs": ["get", "update"],
            }
        ],
    }


def cluster_role() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "system:compute-domain-controller"},
        "rules": [
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["*"]},
            {"nonResourceURLs": ["/healthz"], "verbs": ["get"]},
        ],
    }


def role_binding() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "compute-domain-daemon", "namespace": "nvidia"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "compute-domain-daemon",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": "daemon", "namespace": "nvidia"},
            {"kind": "User", "name": "alice"},
        ],
    }


VALID = [
    daemonset,
    claim_template,
    claim,
    resource_slice,
    device_class,
    node,
    pod,
    lease,
    event,
    role,
    cluster_role,
    role_binding,
]


@pytest.mark.parametrize("make", VALID, ids=lambda f: f.__name__)
def test_realistic_builtins_are_valid(builtin: BuiltinSchemas, make: Callable[[], Any]) -> None:
    obj = make()
    assert builtin.has_schema(obj["apiVersion"], obj["kind"])
    assert builtin.validate(obj) == []
    assert builtin.unknown_fields(obj) == []
    assert builtin.decode_error(obj) is None
    assert builtin.admit(obj) == (obj, [])


def test_the_newest_schema_version_is_used(builtin: BuiltinSchemas) -> None:
    assert builtin.schema_dir.name.endswith("-local")  # non-strict
    assert (builtin.schema_dir / "resourceclaimtemplate-resource-v1.json").is_file()
    major, minor = builtin.kubernetes_version.split(".")
    assert (int(major), int(minor)) >= (1, 34)


def _edit(
    make: Callable[[], dict[str, Any]], edit: Callable[[dict[str, Any]], Any]
) -> dict[str, Any]:
    obj = make()
    edit(obj)
    return obj


def _ctr(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]["containers"][0]


def _req(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["spec"]["devices"]["requests"][0]


INVALID = [
    (
        "daemonset without image",
        _edit(daemonset, lambda o: _ctr(o).pop("image")),
        "spec.template.spec.containers[0].image",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "daemonset container without name",
        _edit(daemonset, lambda o: _ctr(o).pop("name")),
        "spec.template.spec.containers[0].name",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "selector does not match",
        _edit(daemonset, lambda o: o["spec"]["template"]["metadata"].update(labels={"app": "x"})),
        "spec.template.metadata.labels",
        "FieldValueInvalid",
        'Invalid value: map[string]string{"app":"x"}: `selector` does not match template `labels`',
    ),
    (
        "empty selector",
        _edit(daemonset, lambda o: o["spec"].update(selector={})),
        "spec.selector",
        "FieldValueInvalid",
        "empty selector is invalid for daemonset",
    ),
    (
        "restartPolicy",
        _edit(daemonset, lambda o: o["spec"]["template"]["spec"].update(restartPolicy="Never")),
        "spec.template.spec.restartPolicy",
        "FieldValueNotSupported",
        'Unsupported value: "Never": supported values: "Always"',
    ),
    (
        "bad name",
        _edit(daemonset, lambda o: o["metadata"].update(name="Bad_Name")),
        "metadata.name",
        "FieldValueInvalid",
        f'Invalid value: "Bad_Name": {SUBDOMAIN_MSG}',
    ),
    (
        "unsupported fieldRef",
        _edit(
            daemonset,
            lambda o: _ctr(o)["env"][0]["valueFrom"]["fieldRef"].update(fieldPath="spec.foo"),
        ),
        "spec.template.spec.containers[0].env[0].valueFrom.fieldRef.fieldPath",
        "FieldValueNotSupported",
        'Unsupported value: "spec.foo": supported values: '
        '"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", '
        '"spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", '
        '"status.podIPs"',
    ),
    (
        "probe without handler",
        _edit(daemonset, lambda o: _ctr(o).update(livenessProbe={"periodSeconds": 1})),
        "spec.template.spec.containers[0].livenessProbe",
        "FieldValueRequired",
        "Required value: must specify a handler type",
    ),
    (
        "claim without source",
        _edit(
            daemonset,
            lambda o: o["spec"]["template"]["spec"]["resourceClaims"][0].pop(
                "resourceClaimTemplateName"
            ),
        ),
        "spec.template.spec.resourceClaims[0]",
        "FieldValueInvalid",
        'Invalid value: core.PodResourceClaim{Name:"compute-domain-daemon", '
        "ResourceClaimName:(*string)(nil), ResourceClaimTemplateName:(*string)(nil)}: must "
        "specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
    ),
    (
        "container claim not in pod",
        _edit(daemonset, lambda o: _ctr(o)["resources"]["claims"][0].update(name="other")),
        "spec.template.spec.containers[0].resources.claims[0]",
        "FieldValueNotFound",
        'Not found: "other": must be one of the names in pod.spec.resourceClaims: '
        "compute-domain-daemon",
    ),
    (
        "toleration effect",
        _edit(
            daemonset,
            lambda o: o["spec"]["template"]["spec"]["tolerations"][0].update(effect="Never"),
        ),
        "spec.template.spec.tolerations[0].effect",
        "FieldValueNotSupported",
        'Unsupported value: "Never": supported values: "NoSchedule", "PreferNoSchedule", '
        '"NoExecute"',
    ),
    (
        "request without exactly",
        _edit(claim_template, lambda o: _req(o).pop("exactly")),
        "spec.spec.devices.requests[0]",
        "FieldValueRequired",
        "Required value: exactly one of `exactly` or `firstAvailable` is required",
    ),
    (
        "request with both",
        _edit(
            claim_template,
            lambda o: _req(o).update(firstAvailable=[{"name": "a", "deviceClassName": "c"}]),
        ),
        "spec.spec.devices.requests[0]",
        "FieldValueInvalid",
        'Invalid value: "null": exactly '
        "one of `exactly` or `firstAvailable` is required, but multiple fields are set",
    ),
    (
        "request without class",
        _edit(claim_template, lambda o: _req(o)["exactly"].pop("deviceClassName")),
        "spec.spec.devices.requests[0].exactly.deviceClassName",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "config names unknown request",
        _edit(
            claim_template,
            lambda o: o["spec"]["spec"]["devices"]["config"][0].update(requests=["x"]),
        ),
        "spec.spec.devices.config[0].requests[0]",
        "FieldValueInvalid",
        'Invalid value: "x": must be the name of a request in the claim or the name of a request '
        "and a subrequest separated by '/'",
    ),
    (
        "parameters not an object",
        _edit(
            claim_template,
            lambda o: o["spec"]["spec"]["devices"]["config"][0]["opaque"].update(parameters=[1]),
        ),
        "spec.spec.devices.config[0].opaque.parameters",
        "FieldValueInvalid",
        'Invalid value: "<value omitted>": must be a valid JSON object',
    ),
    (
        "allocation for unknown request",
        _edit(
            claim, lambda o: o["status"]["allocation"]["devices"]["results"][0].update(request="x")
        ),
        "status.allocation.devices.results[0].request",
        "FieldValueInvalid",
        'Invalid value: "x": must be the name of a request in the claim',
    ),
    (
        "reserved without allocation",
        _edit(claim, lambda o: o["status"].pop("allocation")),
        "status.reservedFor",
        "FieldValueForbidden",
        "Forbidden: may not be specified when `allocated` is not set",
    ),
    (
        "slice without node selection",
        _edit(resource_slice, lambda o: o["spec"].pop("nodeName")),
        "spec",
        "FieldValueRequired",
        "Required value: exactly one of "
        "`nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
    ),
    (
        "slice duplicate device",
        _edit(resource_slice, lambda o: o["spec"]["devices"].append({"name": "channel-0"})),
        "spec.devices[2]",
        "FieldValueDuplicate",
        'Duplicate value: "channel-0"',
    ),
    (
        "device class without cel",
        _edit(device_class, lambda o: o["spec"].update(selectors=[{}])),
        "spec.selectors[0].cel",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "node taint effect",
        _edit(node, lambda o: o["spec"]["taints"][0].pop("effect")),
        "spec.taints[0].effect",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "pod duplicate container",
        _edit(pod, lambda o: o["spec"]["containers"].append(dict(o["spec"]["containers"][0]))),
        "spec.containers[1].name",
        "FieldValueDuplicate",
        'Duplicate value: "main"',
    ),
    (
        "pod without containers",
        _edit(pod, lambda o: o["spec"].update(containers=[])),
        "spec.containers",
        "FieldValueRequired",
        "Required value",
    ),
    (
        "lease duration",
        _edit(lease, lambda o: o["spec"].update(leaseDurationSeconds=0)),
        "spec.leaseDurationSeconds",
        "FieldValueInvalid",
        "Invalid value: 0: must be greater than 0",
    ),
    (
        "event without name",
        _edit(event, lambda o: o.pop("metadata")),
        "metadata.name",
        "FieldValueRequired",
        "Required value: name or generateName is required",
    ),
    (
        "role without verbs",
        _edit(role, lambda o: o["rules"][0].update(verbs=[])),
        "rules[0].verbs",
        "FieldValueRequired",
        "Required value: verbs must contain at least one value",
    ),
    (
        "binding to unknown kind",
        _edit(role_binding, lambda o: o["roleRef"].update(kind="X")),
        "roleRef.kind",
        "FieldValueNotSupported",
        'Unsupported value: "X": supported values: "Role", "ClusterRole"',
    ),
    (
        "label value",
        _edit(node, lambda o: o["metadata"]["labels"].update(bad="no way")),
        "metadata.labels",
        "FieldValueInvalid",
        'Invalid value: "no way": a valid label must be',
    ),
]


@pytest.mark.parametrize(
    ("obj", "field", "reason", "message"),
    [case[1:] for case in INVALID],
    ids=[case[0] for case in INVALID],
)
def test_invalid_builtins_are_refused(
    builtin: BuiltinSchemas, obj: dict[str, Any], field: str, reason: str, message: str
) -> None:
    causes = builtin.validate(obj)
    assert [(c.field, c.reason) for c in causes] == [(field, reason)]
    assert message in causes[0].message
    with pytest.raises(ApiError) as exc:
        builtin.admit(obj)
    assert exc.value.code == 422
    assert exc.value.kind == obj["kind"]


def test_missing_selector_reports_both_problems(builtin: BuiltinSchemas) -> None:
    obj = _edit(daemonset, lambda o: o["spec"].pop("selector"))
    assert [(c.field, c.reason) for c in builtin.validate(obj)] == [
        ("spec.selector", "FieldValueRequired"),
        ("spec.template.metadata.labels", "FieldValueInvalid"),
    ]


def test_wrong_types_are_decode_errors(builtin: BuiltinSchemas) -> None:
    """A real server answers JSON that does not fit the Go types with 400, not 422."""
    obj = _edit(daemonset, lambda o: o["spec"].update(revisionHistoryLimit="ten"))
    (cause,) = builtin.validate(obj)
    assert (cause.field, cause.reason) == ("spec.revisionHistoryLimit", "FieldValueTypeInvalid")
    with pytest.raises(ApiError) as exc:
        builtin.admit(obj)
    assert (exc.value.code, exc.value.message) == (
        400,
        'DaemonSet in version "v1" cannot be handled as a DaemonSet: json: cannot unmarshal '
        "string into Go struct field DaemonSetSpec.spec.revisionHistoryLimit of type int32",
    )
    port = _edit(daemonset, lambda o: _ctr(o).update(ports=[{"containerPort": 1.5}]))
    error = builtin.decode_error(port)
    assert error is not None and error.message.endswith(
        "json: cannot unmarshal number 1.5 into Go struct field ContainerPort"
        ".spec.template.spec.containers.ports.containerPort of type int32"
    )
    count = _edit(claim_template, lambda o: _req(o)["exactly"].update(count="1"))
    assert [c.field for c in builtin.validate(count)] == [
        "spec.spec.devices.requests[0].exactly.count"
    ]


def test_nulls_and_quantities_decode_like_go(builtin: BuiltinSchemas) -> None:
    obj = daemonset()
    obj["spec"]["revisionHistoryLimit"] = None
    _ctr(obj)["resources"]["limits"] = {"cpu": 0.5, "memory": "1Gi"}
    _ctr(obj)["ports"] = [{"containerPort": 80, "hostPort": None}]
    assert builtin.validate(obj) == []


def test_unknown_fields_are_reported_and_stripped(builtin: BuiltinSchemas) -> None:
    obj = daemonset()
    _ctr(obj)["imagePullPolcy"] = "Always"
    obj["spec"]["template"]["spec"]["hostnetwork"] = True
    obj["spec"]["weird.key"] = 1
    paths = [
        "spec.template.spec.containers[0].imagePullPolcy",
        "spec.template.spec.hostnetwork",
        "spec.weird.key",
    ]
    assert builtin.validate(obj) == []  # not a validation error: the server drops them
    assert sorted(builtin.unknown_fields(obj)) == sorted(paths)
    stored, warnings = builtin.admit(obj)
    assert stored == daemonset()
    assert sorted(warnings) == sorted(f'unknown field "{p}"' for p in paths)
    assert obj["spec"]["weird.key"] == 1  # input untouched
    with pytest.raises(ApiError) as exc:
        builtin.admit(obj, field_validation="Strict")
    assert exc.value.code == 400 and "strict decoding error: unknown field" in exc.value.message
    assert builtin.admit(obj, field_validation="Ignore") == (daemonset(), [])


def test_kinds_without_schema_pass(builtin: BuiltinSchemas) -> None:
    assert builtin.validate({"apiVersion": API_VERSION, "kind": "ComputeDomain"}) == []
    assert builtin.validate({"apiVersion": "v1", "kind": "NoSuchKind", "spec": 1}) == []
    assert builtin.validate({"kind": "Pod"}) == []
    assert builtin.validate({"apiVersion": "v1", "kind": "../../x"}) == []
    assert not builtin.has_schema("apps/v1", "Pod")


@pytest.mark.parametrize(
    ("make", "edit", "field", "message"),
    [
        (
            daemonset,
            lambda o: o["spec"]["selector"]["matchLabels"].update(x="y"),
            "spec.selector",
            "field is immutable",
        ),
        (
            claim_template,
            lambda o: _req(o)["exactly"].update(deviceClassName="other"),
            "spec",
            "field is immutable",
        ),
        (
            role_binding,
            lambda o: o["roleRef"].update(name="other"),
            "roleRef",
            "cannot change roleRef",
        ),
        (
            pod,
            lambda o: o["spec"].update(nodeName="node-2"),
            "spec",
            "pod updates may not change fields other than",
        ),
    ],
)
def test_immutable_fields_on_update(
    builtin: BuiltinSchemas,
    make: Callable[[], dict[str, Any]],
    edit: Callable[[dict[str, Any]], Any],
    field: str,
    message: str,
) -> None:
    old = make()
    new = _edit(make, edit)
    if make is daemonset:
        new["spec"]["template"]["metadata"]["labels"]["x"] = "y"
    causes = builtin.validate_update(new, old)
    assert [c.field for c in causes] == [field]
    assert message in causes[0].message
    assert builtin.validate_update(copy.deepcopy(old), old) == []
    image_only = _edit(pod, lambda o: o["spec"]["containers"][0].update(image="ubuntu:24.04"))
    assert builtin.validate_update(image_only, pod()) == []


def test_crd_objects_get_schema_checks_only(
    builtin: BuiltinSchemas, cd_crd: dict[str, Any]
) -> None:
    """The CRD-specific rules are validate_crd's; the builtin pass checks shape and names."""
    assert builtin.validate(cd_crd) == []
    broken = copy.deepcopy(cd_crd)
    broken["spec"]["scope"] = "Global"
    assert builtin.validate(broken) == []
    assert [c.field for c in validate_crd(broken)] == ["spec.scope"]
    broken["spec"]["versions"] = "v1"
    assert [c.reason for c in builtin.validate(broken)] == ["FieldValueTypeInvalid"]


def test_quantities_must_parse(builtin: BuiltinSchemas) -> None:
    obj = _edit(daemonset, lambda o: _ctr(o)["resources"]["limits"].update(memory="lots"))
    error = builtin.decode_error(obj)
    assert error is not None and error.code == 400
    assert error.message.endswith(
        "quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


def test_compiled_schemas_are_cached(builtin: BuiltinSchemas) -> None:
    builtin.validate(daemonset())
    first = builtin._root("apps/v1", "DaemonSet")
    builtin.validate(daemonset())
    assert builtin._root("apps/v1", "DaemonSet") is first


# --- object metadata and Go formatting --------------------------------------------------


def test_object_meta_rules() -> None:
    assert validate_object_meta({"generateName": "pod-"}) == [
        Cause(
            "metadata.name",
            "FieldValueRequired",
            "Required value: name or generateName is required",
        )
    ]
    assert validate_object_meta({"name": "system:controller:x"}, name_rule="path-segment") == []
    assert validate_object_meta({"name": "a/b"}, name_rule="path-segment") == [
        Cause("metadata.name", "FieldValueInvalid", "Invalid value: \"a/b\": may not contain '/'")
    ]
    assert [
        c.field
        for c in validate_object_meta(
            {"name": "x", "namespace": "", "ownerReferences": [{"kind": "K"}]}, namespaced=True
        )
    ] == [
        "metadata.namespace",
        "metadata.ownerReferences.apiVersion",
        "metadata.ownerReferences.name",
        "metadata.ownerReferences.uid",
    ]
    assert validate_object_meta({"name": "x", "namespace": "d"}, namespaced=False) == [
        Cause("metadata.namespace", "FieldValueForbidden", "Forbidden: not allowed on this type")
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"b": 1, "a": "x"}, 'map[string]interface {}{"a":"x", "b":1}'),
        ([1, 2.5, True, None], "[]interface {}{1, 2.5, true, interface {}(nil)}"),
        (1e6, "1e+06"),
        (123456.0, "123456"),
        (0.00001, "1e-05"),
        ('say "hi"\n', '"say \\"hi\\"\\n"'),
    ],
)
def test_go_repr(value: Any, text: str) -> None:
    assert go_repr(value) == text


# --- robustness -------------------------------------------------------------------------

_KEYS = st.sampled_from(
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
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=24,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_JSON, status=_JSON, old_spec=_JSON, daemons=_JSON)
def test_admission_only_ever_raises_api_errors(
    cd_schema: CRDSchema,
    clique_schema: CRDSchema,
    widgets: CRDSchema,
    spec: Any,
    status: Any,
    old_spec: Any,
    daemons: Any,
) -> None:
    """Whatever JSON arrives under spec/status, the answer is a stored object or an ApiError."""
    cases = [
        (cd_schema, {**cd(), "spec": spec, "status": status}, {**cd(), "spec": old_spec}),
        (widgets, {**widget(), "spec": spec, "status": status}, {**widget(), "spec": old_spec}),
        (
            clique_schema,
            {
                "apiVersion": API_VERSION,
                "kind": "ComputeDomainClique",
                "metadata": {"name": "c"},
                "daemons": daemons,
            },
            {
                "apiVersion": API_VERSION,
                "kind": "ComputeDomainClique",
                "metadata": {"name": "c"},
                "daemons": spec,
            },
        ),
    ]
    for schema, new, old in cases:
        for admit in (
            lambda s=schema, n=new: s.admit_create(n),
            lambda s=schema, n=new, o=old: s.admit_update(n, o),
        ):
            try:
                stored = admit()
            except ApiError as err:
                assert err.code in (400, 422)
            else:
                assert isinstance(stored, dict)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(junk=_JSON, where=st.sampled_from(["spec", "template", "tpl_spec", "container", "meta"]))
def test_builtin_validation_never_crashes(builtin: BuiltinSchemas, junk: Any, where: str) -> None:
    obj = daemonset()
    target = {
        "spec": obj,
        "template": obj["spec"],
        "tpl_spec": obj["spec"]["template"],
        "container": obj["spec"]["template"]["spec"],
        "meta": obj,
    }[where]
    key = {
        "spec": "spec",
        "template": "template",
        "tpl_spec": "spec",
        "container": "containers",
        "meta": "metadata",
    }[where]
    target[key] = junk
    assert isinstance(builtin.validate(obj), list)
    assert isinstance(builtin.unknown_fields(obj), list)
    builtin.decode_error(obj)
