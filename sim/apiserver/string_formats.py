"""The OpenAPI string `format`s kube-apiserver checks (strfmt's registry), as predicates.

CRD validation reports a string that does not parse as its `format`; built-in decoding
refuses timestamps and byte fields that Go could not unmarshal.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import re
import uuid
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

from jsonschema import FormatChecker

# Where jsonschema's own checks are strfmt's.
_JSONSCHEMA: Final = FormatChecker(formats=("date", "ipv4", "ipv6"))


def is_datetime(text: str) -> bool:
    """RFC 3339 `date-time` (what metav1.Time and strfmt.DateTime parse)."""
    if not re.fullmatch(
        r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", text
    ):
        return False
    try:
        datetime.datetime.fromisoformat(text.replace("z", "Z").replace("t", "T"))
    except ValueError:
        return False
    return True


def _is_uuid(text: str, version: int | None = None) -> bool:
    if not re.fullmatch(
        r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
        r"[0-9a-fA-F]{12}",
        text,
    ):
        return False
    return version is None or uuid.UUID(text).version == version


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


def is_base64(text: str) -> bool:
    """Standard padded base64, as `format: byte` and Go's []byte decoding want it."""
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _is_hostname(text: str) -> bool:
    return len(text) <= 255 and bool(
        re.fullmatch(
            r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}"
            r"[A-Za-z0-9])?)*\.?",
            text,
        )
    )


FORMAT_CHECKS: Final[Mapping[str, Callable[[str], bool]]] = MappingProxyType(
    {
        "date-time": is_datetime,
        "datetime": is_datetime,
        "date": lambda t: _JSONSCHEMA.conforms(t, "date"),
        "uuid": _is_uuid,
        "uuid3": lambda t: _is_uuid(t, 3),
        "uuid4": lambda t: _is_uuid(t, 4),
        "uuid5": lambda t: _is_uuid(t, 5),
        "ipv4": lambda t: _JSONSCHEMA.conforms(t, "ipv4"),
        "ipv6": lambda t: _JSONSCHEMA.conforms(t, "ipv6"),  # no zone, as Go's net.ParseIP
        "cidr": _is_cidr,
        "mac": lambda t: bool(re.fullmatch(r"([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}", t)),
        "byte": is_base64,
        "hostname": _is_hostname,
        "email": lambda t: bool(re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", t)),
        "hexcolor": lambda t: bool(re.fullmatch(r"#([0-9A-Fa-f]{3}){1,2}", t)),
    }
)
"""The `format` values a CRD schema can check; any other format is not checked."""
