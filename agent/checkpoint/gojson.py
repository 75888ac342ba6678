"""JSON text exactly as Go's `encoding/json` writes and reads it.

Checkpoint checksums hash the output of Go's `json.Marshal`, so our bytes must be Go's
bytes: compact, keys in the order given (Go's struct order, sorted map keys: the caller
orders them), `<` `>` `&` U+2028 U+2029 escaped as `\\u003c`..., other non-ASCII as raw
UTF-8, `\\b` `\\f` `\\n` `\\r` `\\t` short escapes, other control characters as `\\u00XX`,
invalid UTF-8 as `\\ufffd`, and Go's float formatting.

Parsing follows Go where Python differs: invalid UTF-8 and lone surrogate escapes become
U+FFFD, `NaN`/`Infinity` are syntax errors, and float literals keep their text (Go keeps raw
JSON such as a device's opaque `data` verbatim, so re-encoding must reproduce it).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from types import MappingProxyType
from typing import Any

_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\<>&\u2028\u2029\ud800-\udfff]')
_SHORT_ESCAPES = MappingProxyType(
    {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
)
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class GoJSONError(ValueError):
    """Not JSON that Go would parse; `truncated` when the text just stops early."""

    def __init__(self, message: str, *, truncated: bool = False) -> None:
        super().__init__(message)
        self.truncated = truncated


class GoFloat(float):
    """A parsed JSON float that re-encodes as its original literal (e.g. `1.50` stays `1.50`)."""

    __slots__ = ("literal",)
    literal: str

    def __new__(cls, literal: str) -> GoFloat:
        obj = super().__new__(cls, literal)
        obj.literal = literal
        return obj

    def __reduce__(self) -> tuple[type[GoFloat], tuple[str]]:
        return (GoFloat, (self.literal,))


# --- encoding ------------------------------------------------------------------------------


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    if "\ud800" <= char <= "\udfff":  # a lone surrogate is invalid UTF-8 to Go
        return "\\ufffd"
    return f"\\u{ord(char):04x}"


def quote(text: str) -> str:
    """A JSON string literal as Go writes it (HTML-safe escaping)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def go_float(value: float) -> str:
    """Go's `float64` encoding: shortest round-trip digits, exponent form outside [1e-6, 1e21)."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"json: unsupported value: {value!r}")
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        text = repr(value)  # Python's repr is scientific with a 2+ digit exponent here
        mantissa, exponent = text.split("e")
        if exponent.startswith("-0"):  # Go cleans e-07 to e-7
            exponent = "-" + exponent[2:]
        return f"{mantissa}e{exponent}"
    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _encode(value: Any, out: Callable[[str], object]) -> None:
    if value is None:
        out("null")
    elif value is True:
        out("true")
    elif value is False:
        out("false")
    elif isinstance(value, str):
        out(quote(value))
    elif isinstance(value, GoFloat):
        out(value.literal)
    elif isinstance(value, int):
        out(int.__repr__(value))
    elif isinstance(value, float):
        out(go_float(value))
    elif isinstance(value, dict):
        out("{")
        first = True
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"json: object key {key!r} is not a string")
            if not first:
                out(",")
            first = False
            out(quote(key))
            out(":")
            _encode(item, out)
        out("}")
    elif isinstance(value, list | tuple):
        out("[")
        for index, item in enumerate(value):
            if index:
                out(",")
            _encode(item, out)
        out("]")
    else:
        raise TypeError(f"json: unsupported type {type(value).__name__}")


def dumps(value: Any) -> bytes:
    """Compact Go JSON of `value` (dicts in their own key order)."""
    parts: list[str] = []
    _encode(value, parts.append)
    return "".join(parts).encode("utf-8")


# --- decoding ------------------------------------------------------------------------------


def _parse_int(literal: str) -> int | float:
    # `-0` is the one integer literal int() would not reproduce; a literal beyond Python's
    # int digit limit is kept too (Go keeps raw JSON such as a device's `data` verbatim).
    if literal == "-0":
        return GoFloat(literal)
    try:
        return int(literal)
    except ValueError:
        return GoFloat(literal)


def _reject_constant(name: str) -> Any:
    raise GoJSONError(f"invalid character in literal {name}")


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_replace_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    return value


def loads(data: bytes) -> Any:
    """Parse `data` as Go does; raises `GoJSONError` for anything Go would reject."""
    # Every undecodable byte becomes one lone surrogate, then one U+FFFD, as in Go.
    text = _SURROGATE.sub("\ufffd", data.decode("utf-8", "surrogateescape"))
    if not text.strip():
        raise GoJSONError("empty file" if not text else "no JSON value", truncated=True)
    try:
        value = json.loads(
            text, parse_float=GoFloat, parse_int=_parse_int, parse_constant=_reject_constant
        )
        if _SURROGATE_ESCAPE.search(text):
            value = _replace_surrogates(value)
    except RecursionError:
        raise GoJSONError("JSON nested too deeply") from None
    except json.JSONDecodeError as err:
        truncated = err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated")
        what = "truncated" if truncated else "not valid JSON"
        raise GoJSONError(
            f"{what}: {err.msg} at line {err.lineno} column {err.colno}", truncated=truncated
        ) from None
    return value
