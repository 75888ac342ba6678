"""sim.apiserver.crd_validation and crd_info: what the server checks in a CRD object itself,
and the routing facts it reads from one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from apiserver_cases import (
    load_crd,
)

from sim.apiserver.crd_info import crd_resource_info
from sim.apiserver.crd_validation import validate_crd
from sim.apiserver.errors import Cause


@pytest.fixture(scope="module")
def cd_crd() -> dict[str, Any]:
    return load_crd("computedomains")


# --- CRD objects ------------------------------------------------------------------------


def test_project_crds_are_accepted(cd_crd: dict[str, Any]) -> None:
    assert validate_crd(cd_crd) == []
    assert validate_crd(load_crd("computedomaincliques")) == []


def _crd_with(change: Callable[[dict[str, Any]], None]) -> list[Cause]:
    crd = load_crd("computedomains")
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


def test_non_string_field_path_is_a_cause_not_a_crash():
    from sim.apiserver.crd_validation import validate_crd

    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "things.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "things", "singular": "thing", "kind": "Thing",
                              "listKind": "ThingList"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                        "openAPIV3Schema": {"type": "object", "properties": {"spec": {
                            "type": "object", "x-kubernetes-validations": [
                                {"rule": "self == oldSelf", "fieldPath": ["x"]}]}}}}}]}}
    causes = validate_crd(crd)
    assert any("fieldPath" in c.field for c in causes)
