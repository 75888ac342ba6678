"""`field.Error` as kube-apiserver renders it: the causes of a 422 `Invalid` status.

Every cause's message is Go's `ErrorBody()` (`Invalid value: -1: must be greater than or
equal to 0`), with the bad value printed as Go prints it, because clients and tests compare
these texts with a real server's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

from sim.apiserver.errors import Cause
from sim.apiserver.go_format import go_json, go_quote, go_repr

REQUIRED: Final = "FieldValueRequired"
INVALID: Final = "FieldValueInvalid"
TYPE_INVALID: Final = "FieldValueTypeInvalid"
NOT_SUPPORTED: Final = "FieldValueNotSupported"
DUPLICATE: Final = "FieldValueDuplicate"
FORBIDDEN: Final = "FieldValueForbidden"
TOO_LONG: Final = "FieldValueTooLong"
TOO_MANY: Final = "FieldValueTooMany"
NOT_FOUND: Final = "FieldValueNotFound"

_TYPE_TEXT: Final = MappingProxyType(
    {
        NOT_FOUND: "Not found",
        REQUIRED: "Required value",
        DUPLICATE: "Duplicate value",
        INVALID: "Invalid value",
        NOT_SUPPORTED: "Unsupported value",
        FORBIDDEN: "Forbidden",
        TOO_LONG: "Too long",
        TOO_MANY: "Too many",
        TYPE_INVALID: "Invalid value",
    }
)
# ErrorBody() never prints the bad value for these.
_NO_VALUE: Final = frozenset({REQUIRED, FORBIDDEN, TOO_LONG})


OMIT: Final = object()  # field.Error's omitValue: print only the error type
_OMIT: Final = OMIT


def _value_text(value: Any) -> str:
    """The bad value as `ErrorBody()` prints it (apimachinery v0.37): numbers and booleans
    with %v, strings with %q, anything else (nil, maps, slices) as its JSON encoding."""
    if value is None or isinstance(value, Mapping | list | tuple):
        return go_json(value)
    return go_repr(value)  # the simple printers agree with %#v on scalars


def field_error(path: str, reason: str, value: Any = _OMIT, detail: str = "") -> Cause:
    """One `field.Error`: the message is Go's `ErrorBody()` (type, bad value, detail)."""
    body = _TYPE_TEXT[reason]
    if reason not in _NO_VALUE and value is not _OMIT:
        body = f"{body}: {_value_text(value)}"
    if detail:
        body = f"{body}: {detail}"
    return Cause(path or "<nil>", reason, body)


def required(path: str, detail: str = "") -> Cause:
    """`field.Required`: a value is missing."""
    return field_error(path, REQUIRED, detail=detail)


def invalid_value(path: str, value: Any, detail: str) -> Cause:
    """`field.Invalid`: the value is malformed; `detail` says why."""
    return field_error(path, INVALID, value, detail)


def not_supported(path: str, value: Any, supported: Iterable[str]) -> Cause:
    """`field.NotSupported`: the value is not one of `supported`."""
    quoted = ", ".join(go_quote(s) for s in supported)
    return field_error(path, NOT_SUPPORTED, value, f"supported values: {quoted}" if quoted else "")


def duplicate(path: str, value: Any) -> Cause:
    """`field.Duplicate`: the value repeats one before it."""
    return field_error(path, DUPLICATE, value)


def forbidden(path: str, detail: str) -> Cause:
    """`field.Forbidden`: the field may not be set (here, or to this)."""
    return field_error(path, FORBIDDEN, detail=detail)


def too_long(path: str, max_length: int) -> Cause:
    """`field.TooLong`: a string or object over `max_length` bytes."""
    unit = "byte" if max_length == 1 else "bytes"
    return field_error(path, TOO_LONG, detail=f"may not be more than {max_length} {unit}")


def too_many(path: str, actual: int, maximum: int) -> Cause:
    """`field.TooMany`: a list of `actual` items over `maximum`."""
    unit = "item" if maximum == 1 else "items"
    return field_error(path, TOO_MANY, actual, f"must have at most {maximum} {unit}")


def not_found(path: str, value: Any, detail: str = "") -> Cause:
    """`field.NotFound`: the value names something that does not exist."""
    return field_error(path, NOT_FOUND, value, detail)


def child(path: str, name: str) -> str:
    """`field.Path.Child`: `spec` + `nodes` is `spec.nodes`; the root has no leading dot."""
    return f"{path}.{name}" if path else name


def index(path: str, i: int | str) -> str:
    """`field.Path.Index` (`nodes[0]`) and `.Key` (`attributes[name]`)."""
    return f"{path}[{i}]"


def invalid_each(path: str, value: str, problems: list[str]) -> list[Cause]:
    """One FieldValueInvalid per problem a `*_problems` name check found, as Go appends them."""
    return [invalid_value(path, value, m) for m in problems]
