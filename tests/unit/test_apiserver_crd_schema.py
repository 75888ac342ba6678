"""sim.apiserver.crd_schema: what kube-apiserver does with a custom resource before storing it.

Pruning, defaulting, structural validation, list types, transition rules and ratcheting,
with the real server's field paths, reasons and messages.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from apiserver_cases import (
    API_VERSION,
    JSON_VALUES,
    RULES_SKIPPED,
    WIDGET_SCHEMA,
    cd,
    load_crd,
    rejected,
    widget,
)
from hypothesis import HealthCheck, given, settings

from sim.apiserver.crd_schema import CRDSchema
from sim.apiserver.crd_validation import validate_crd
from sim.apiserver.errors import ApiError, Cause


@pytest.fixture(scope="module")
def cd_crd() -> dict[str, Any]:
    return load_crd("computedomains")


@pytest.fixture(scope="module")
def cd_schema(cd_crd: dict[str, Any]) -> CRDSchema:
    return CRDSchema.from_crd(cd_crd)


@pytest.fixture(scope="module")
def clique_schema() -> CRDSchema:
    return CRDSchema.from_crd(load_crd("computedomaincliques"))


@pytest.fixture(scope="module")
def widgets() -> CRDSchema:
    return CRDSchema(WIDGET_SCHEMA, group="example.com", kind="Widget", version="v1")


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
            [
                Cause(
                    "spec.numNodes",
                    "FieldValueTypeInvalid",
                    'Invalid value: "number": spec.numNodes in body must be of type integer: '
                    '"number"',
                ),
                # kube-openapi's range check of "1.5" as an int64 (tests/differential).
                Cause(
                    "<nil>",
                    "FieldValueInvalid",
                    'Invalid value: "": Checked value must be of type integer (default format) '
                    "in spec.numNodes",
                ),
            ],
            True,
        ),
    ],
)
def test_error_forms_match_kube_apiserver(
    cd_schema: CRDSchema, spec: dict[str, Any], cause: Cause | list[Cause], rules_skipped: bool
) -> None:
    """CEL rules are skipped (with a marker cause) after type/required/enum errors."""
    causes = rejected(lambda: cd_schema.admit_create(cd(spec)))
    expected = cause if isinstance(cause, list) else [cause]
    assert causes == ([*expected, RULES_SKIPPED] if rules_skipped else expected)


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
            'Duplicate value: {"name":"a"}',
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
            'Duplicate value: {"name":"n1"}',
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
            'Invalid value: A computeDomain.spec is immutable',
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
            "spec.entries[1]", "FieldValueInvalid", 'Invalid value: entries are immutable'
        )
    ]


def test_rule_reason_field_path_and_default_message(widgets: CRDSchema) -> None:
    old = widgets.admit_create(widget(frozen="a", sealed={"key": "k"}))
    causes = rejected(lambda: widgets.admit_update(widget(frozen="b", sealed={"key": "j"}), old))
    assert causes == [
        Cause(
            "spec.frozen",
            "FieldValueInvalid",
            'Invalid value: "b": failed rule: oldSelf == self',
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


# --- robustness -------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=JSON_VALUES, status=JSON_VALUES, old_spec=JSON_VALUES, daemons=JSON_VALUES)
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
