"""What Go's `json.Unmarshal` does with a value for a field of a given Go type.

The reference verifies a checksum by decoding the file into its structs and marshalling
them again, so to verify (and to read) a file the way it does we apply the same rules: a
JSON `null` leaves a string/number/struct at its zero value and makes a pointer, slice or
map nil; object keys match struct fields exactly or case-insensitively, the last one wins,
unknown keys are ignored; a value of the wrong JSON type fails the whole decode.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar

T = TypeVar("T")

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:\d{2})\Z"
)


class LayoutError(ValueError):
    """The JSON does not fit the Go types: Go's `json.Unmarshal` would return an error."""


def fields(raw: Any, where: str, names: Sequence[str]) -> dict[str, Any]:
    """The values of a Go struct's fields in `raw` (absent fields are simply missing)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise LayoutError(f"{where}: expected an object, got {_kind(raw)}")
    exact = set(names)
    folded = {name.casefold(): name for name in names}
    found: dict[str, Any] = {}
    for key, value in raw.items():
        name = key if key in exact else folded.get(key.casefold())
        if name is not None:
            found[name] = value
    return found


def string(raw: Any, where: str) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise LayoutError(f"{where}: expected a string, got {_kind(raw)}")
    return raw


def integer(raw: Any, where: str, low: int, high: int) -> int:
    """A Go integer type with range [low, high]; floats and out-of-range values fail."""
    if raw is None:
        return 0
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise LayoutError(f"{where}: expected an integer, got {_kind(raw)}")
    if not low <= raw <= high:
        raise LayoutError(f"{where}: {raw} is out of range")
    return raw


def uint64(raw: Any, where: str) -> int:
    return integer(raw, where, 0, 2**64 - 1)


def int64(raw: Any, where: str) -> int:
    return integer(raw, where, -(2**63), 2**63 - 1)


def nullable(raw: Any, convert: Callable[[Any], T]) -> T | None:
    """A Go pointer, slice or map: `null` is nil."""
    return None if raw is None else convert(raw)


def array(raw: Any, where: str, item: Callable[[Any, str], T]) -> list[T] | None:
    """A Go slice (nil for `null`); each element decoded with `item`."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise LayoutError(f"{where}: expected an array, got {_kind(raw)}")
    return [item(value, f"{where}[{index}]") for index, value in enumerate(raw)]


def strings(raw: Any, where: str) -> list[str] | None:
    return array(raw, where, string)


def mapping(raw: Any, where: str, item: Callable[[Any, str], T]) -> dict[str, T] | None:
    """A Go `map[string]X` (nil for `null`), keys sorted as Go's marshaller writes them."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise LayoutError(f"{where}: expected an object, got {_kind(raw)}")
    return {key: item(raw[key], f"{where}[{key!r}]") for key in sorted(raw)}


def verbatim_object(raw: Any, where: str) -> dict[str, Any]:
    """A struct we keep as parsed JSON (a claim status): `null` is the empty struct."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise LayoutError(f"{where}: expected an object, got {_kind(raw)}")
    return raw


def rfc3339(raw: Any, where: str) -> datetime | None:
    """A `*metav1.Time`: nil for `null`, else an RFC 3339 string (parsed to aware UTC)."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise LayoutError(f"{where}: expected an RFC 3339 time string, got {_kind(raw)}")
    match = _RFC3339.match(raw)
    if match is None:
        raise LayoutError(f"{where}: {raw!r} is not an RFC 3339 time")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        offset = UTC
        if zone != "Z":
            sign = -1 if zone[0] == "-" else 1
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 23 or minutes > 59:
                raise ValueError("offset out of range")
            offset = timezone(sign * timedelta(hours=hours, minutes=minutes))
        micros = int((fraction or "0")[:6].ljust(6, "0"))
        stamp = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micros, offset
        )
        return stamp.astimezone(UTC)
    except (ValueError, OverflowError) as err:
        raise LayoutError(f"{where}: {raw!r} is not a valid time ({err})") from None


def format_rfc3339(stamp: datetime) -> str:
    """How `metav1.Time` marshals: UTC, whole seconds (truncated), `Z`."""
    if stamp.tzinfo is None:
        raise ValueError("checkpoint times must be timezone-aware")
    utc = stamp.astimezone(UTC)
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"
    )


def _kind(raw: Any) -> str:
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return "a boolean"
    if isinstance(raw, int | float):
        return f"the number {raw!r}"
    if isinstance(raw, str):
        return "a string"
    if isinstance(raw, list):
        return "an array"
    return "an object"
