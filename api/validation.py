"""Syntax checks for values that end up in paths and label values."""

from __future__ import annotations

import re
from typing import Final

from api.validation_error import ValidationError

LABEL_VALUE_MAX: Final = 63
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a valid Kubernetes label value, or None when it is."""
    if len(value) > LABEL_VALUE_MAX:
        return f"must be no more than {LABEL_VALUE_MAX} characters (got {len(value)})"
    if not _LABEL_VALUE.fullmatch(value):
        return (
            "must consist of alphanumeric characters, '-', '_' or '.', and must start and "
            "end with an alphanumeric character"
        )
    return None


def path_component_problem(value: str) -> str | None:
    """Why `value` cannot be used as one directory entry name, or None when it can.

    Domain IDs become directory names under the plugin dir; a `/` or `..` would let a
    claim write outside it.
    """
    if value == "":
        return "must not be empty"
    if "\x00" in value:
        return "must not contain NUL characters"
    if "/" in value:
        return "must not contain '/'"
    if value in (".", ".."):
        return f"must not be {value!r}"
    return None


def validate_domain_id(value: str, *, field: str = "domainID") -> None:
    """A domainID is a ComputeDomain UID: non-empty, a safe path component, a label value."""
    if value == "":
        raise ValidationError(
            f"{field} cannot be empty: set it to the UID of the ComputeDomain "
            "(kubectl get computedomain NAME -o jsonpath='{.metadata.uid}')"
        )
    problem = path_component_problem(value) or label_value_problem(value)
    if problem:
        raise ValidationError(f"invalid {field} {value!r}: {problem}")
