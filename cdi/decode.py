"""Typed reads from untrusted JSON/YAML values, so bad spec files fail with a path, not a crash.

Every error names where in the document the problem is (e.g.
`spec.devices[0].containerEdits.deviceNodes[1].major`) because spec files are
usually written by another program and read by someone debugging it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from cdi.cdi_error import CDIError

T = TypeVar("T")


def describe(value: object) -> str:
    """A JSON-flavoured type name, since spec authors think in JSON types."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _wrong_type(where: str, expected: str, value: object) -> CDIError:
    return CDIError(f"{where}: expected {expected}, got {describe(value)}")


def as_text(value: object, where: str) -> str:
    """`value` if it is a string."""
    if not isinstance(value, str):
        raise _wrong_type(where, "a string", value)
    return value


def as_integer(value: object, where: str) -> int:
    """`value` if it is an integer; booleans and floats are refused as Go's decoder does."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong_type(where, "an integer", value)
    return value


def as_list(value: object, where: str) -> list[object]:
    """`value` if it is an array."""
    if not isinstance(value, list | tuple):
        raise _wrong_type(where, "an array", value)
    return list(value)


class Fields:
    """One JSON object's keys, read with types checked and unknown keys refused.

    Unknown keys are errors (as with the Go library's strict decoding) so that a
    misspelt key such as `filemode` is reported instead of silently dropped.
    """

    def __init__(self, value: object, where: str, known: tuple[str, ...]) -> None:
        if not isinstance(value, Mapping):
            raise _wrong_type(where, "an object", value)
        for key in value:
            if not isinstance(key, str):
                raise CDIError(f"{where}: keys must be strings, got {describe(key)} {key!r}")
            if key not in known:
                raise CDIError(f"{where}: unknown key {key!r} (expected one of {', '.join(known)})")
        self._data: Mapping[str, object] = value
        self.where = where

    def path(self, key: str) -> str:
        """Where `key` sits in the document, for error messages."""
        return f"{self.where}.{key}"

    def _get(self, key: str, required: bool) -> object:
        value = self._data.get(key)
        if value is None and required:
            raise CDIError(f"{self.where}: missing required key {key!r}")
        return value

    def text(self, key: str, *, required: bool = False) -> str:
        """A string; absent or null reads as empty unless required."""
        value = self._get(key, required)
        return "" if value is None else as_text(value, self.path(key))

    def integer(self, key: str) -> int | None:
        """An integer, or None when absent, so that unset and zero stay distinct."""
        value = self._get(key, False)
        return None if value is None else as_integer(value, self.path(key))

    def flag(self, key: str) -> bool:
        """A boolean; absent or null reads as false."""
        value = self._get(key, False)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise _wrong_type(self.path(key), "a boolean", value)
        return value

    def texts(self, key: str) -> list[str]:
        """An array of strings; absent or null reads as empty."""
        return self.items(key, as_text)

    def integers(self, key: str) -> list[int]:
        """An array of integers; absent or null reads as empty."""
        return self.items(key, as_integer)

    def text_map(self, key: str) -> dict[str, str]:
        """An object of string values; absent or null reads as empty."""
        value = self._get(key, False)
        if value is None:
            return {}
        where = self.path(key)
        if not isinstance(value, Mapping):
            raise _wrong_type(where, "an object", value)
        result: dict[str, str] = {}
        for name, item in value.items():
            if not isinstance(name, str):
                raise CDIError(f"{where}: keys must be strings, got {describe(name)} {name!r}")
            result[name] = as_text(item, f"{where}.{name}")
        return result

    def nested(self, key: str, parse: Callable[[object, str], T]) -> T | None:
        """A sub-object decoded by `parse`, or None when absent or null."""
        value = self._get(key, False)
        return None if value is None else parse(value, self.path(key))

    def required_nested(self, key: str, parse: Callable[[object, str], T]) -> T:
        """A sub-object decoded by `parse` that must be present."""
        return parse(self._get(key, True), self.path(key))

    def items(
        self, key: str, parse: Callable[[object, str], T], *, required: bool = False
    ) -> list[T]:
        """An array whose elements are decoded by `parse`; absent or null reads as empty."""
        value = self._get(key, required)
        if value is None:
            return []
        where = self.path(key)
        elements = as_list(value, where)
        return [parse(item, f"{where}[{index}]") for index, item in enumerate(elements)]
