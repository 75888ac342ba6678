"""sim.apiserver.object_meta, names_validation and go_format: ObjectMeta rules, name syntax,
and values printed as Go prints them."""

from __future__ import annotations

from typing import Any

import pytest

from sim.apiserver.errors import Cause
from sim.apiserver.go_format import go_quote, go_repr
from sim.apiserver.names_validation import label_value_problems, qualified_name_problems
from sim.apiserver.object_meta import validate_object_meta

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


def test_go_quote_escapes_like_strconv_quote() -> None:
    assert go_quote('a"b\\c\td\x00\x7fé\u00a0\U0001f600') == (
        '"a\\"b\\\\c\\td\\x00\\x7fé\\u00a0😀"'
    )


# --- name syntax ------------------------------------------------------------------------


def test_name_lengths_count_utf8_bytes_as_go_does() -> None:
    """Go's len() counts bytes, so 32 two-byte characters exceed a label value's 63."""
    value = "é" * 32
    too_long = "must be no more than 63 characters"
    assert label_value_problems(value)[0] == too_long
    assert qualified_name_problems(value)[0] == f"name part {too_long}"
    causes = validate_object_meta({"name": "x", "labels": {"k": value}})
    assert causes[0] == Cause(
        "metadata.labels", "FieldValueInvalid", f'Invalid value: "{value}": {too_long}'
    )
