"""Go's printing of values, as kube-apiserver's error messages embed them.

Clients and tests compare messages to the letter, so a bad value must read exactly as Go's
`%q`, `%v` and `%#v` would print it (`"a\\tb"`, `1e+06`, `map[string]interface {}{...}`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final

from sim.apiserver.json_values import JSON


class GoRepr(str):
    """A bad value already rendered the way Go's `%#v` prints it (structs, typed maps)."""


_GO_ESCAPES: Final = MappingProxyType(
    {
        '"': '\\"',
        "\\": "\\\\",
        "\n": "\\n",
        "\t": "\\t",
        "\r": "\\r",
        "\a": "\\a",
        "\b": "\\b",
        "\f": "\\f",
        "\v": "\\v",
    }
)


def go_quote(text: str) -> str:
    """Go's %q (strconv.Quote): double quotes, Go escapes, printable Unicode kept."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif not ch.isprintable():
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_float(value: float) -> str:
    """Go's %v for float64 (strconv 'g', shortest): exponent form below 1e-4 and from 1e+06."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    sign, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    exp = len(digits) - 1 + int(exponent)
    prefix = "-" if sign else ""
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    point = exp + 1
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return prefix + digits + "0" * (point - len(digits))
    return f"{prefix}{digits[:point]}.{digits[point:]}"


def go_repr(value: JSON) -> str:
    """Go's %#v of a decoded JSON value (`map[string]interface {}{"name":"n1"}`)."""
    if isinstance(value, GoRepr):
        return str(value)
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, Mapping):
        inner = ", ".join(f"{go_quote(str(k))}:{go_repr(value[k])}" for k in sorted(value))
        return f"map[string]interface {{}}{{{inner}}}"
    if isinstance(value, list | tuple):
        return f"[]interface {{}}{{{', '.join(go_repr(v) for v in value)}}}"
    return repr(value)


def go_json(value: Any) -> str:
    """Go's `json.Marshal` of a decoded JSON value: compact, map keys sorted, and <, >, &
    (and U+2028, U+2029) escaped as \\u sequences."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text


def go_string_slice(values: Any) -> str:
    """Go's %#v of a []string: `[]string{"a", "b"}`."""
    return "[]string{" + ", ".join(go_quote(str(v)) for v in values) + "}"


def string_map_repr(value: Any) -> GoRepr:
    """%#v of a Go map[string]string (labels), nil when absent."""
    if not isinstance(value, Mapping):
        return GoRepr("map[string]string(nil)")
    inner = ", ".join(f"{go_quote(str(k))}:{go_quote(str(value[k]))}" for k in sorted(value))
    return GoRepr(f"map[string]string{{{inner}}}")


def go_number(value: float | int) -> str:
    """Go's %v of a JSON number: an int as is, a float64 as `go_float`."""
    return go_float(float(value)) if isinstance(value, float) else str(value)
