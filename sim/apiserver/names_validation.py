"""Kubernetes name and label syntax: k8s.io/apimachinery/pkg/util/validation.

Each `*_problems` function returns Go's error strings for one value (empty when valid), so
object validation and selector parsing report a bad name with the real server's words.
Lengths are counted in UTF-8 bytes, as Go's len() counts them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1035_LABEL_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT: Final = "(" + _QUALIFIED_NAME_FMT + ")?"
_DNS1123_LABEL_RE: Final = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE: Final = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL_RE: Final = re.compile(_DNS1035_LABEL_FMT)
_QUALIFIED_NAME_RE: Final = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE_RE: Final = re.compile(_LABEL_VALUE_FMT)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """`validation.RegexError`, including its doubled spaces between examples."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len_error(n: int) -> str:
    """`validation.MaxLenError`: Go says characters but counts bytes (see `_byte_len`)."""
    return f"must be no more than {n} characters"


def _byte_len(value: str) -> int:
    """Go's len(): UTF-8 bytes, which is what the length limits count."""
    return len(value.encode("utf-8", "surrogatepass"))


def dns1123_label_problems(value: str) -> list[str]:
    """`validation.IsDNS1123Label`."""
    errs = []
    if _byte_len(value) > 63:
        errs.append(_max_len_error(63))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            errs.append("must not contain dots")
        else:
            errs.append(
                _regex_error(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                    "or '-', and must start and end with an alphanumeric character",
                    _DNS1123_LABEL_FMT,
                    "my-name",
                    "123-abc",
                )
            )
    return errs


def dns1123_subdomain_problems(value: str) -> list[str]:
    """`validation.IsDNS1123Subdomain`."""
    errs = []
    if _byte_len(value) > 253:
        errs.append(_max_len_error(253))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errs


def dns1035_label_problems(value: str) -> list[str]:
    """`validation.IsDNS1035Label`."""
    errs = []
    if _byte_len(value) > 63:
        errs.append(_max_len_error(63))
    if not _DNS1035_LABEL_RE.fullmatch(value):
        errs.append(
            _regex_error(
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
                "with an alphabetic character, and end with an alphanumeric character",
                _DNS1035_LABEL_FMT,
                "my-name",
                "abc-123",
            )
        )
    return errs


def path_segment_problems(value: str) -> list[str]:
    """`IsValidPathSegmentName`: what RBAC objects allow as names (`system:controller:x`)."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


def qualified_name_problems(value: str) -> list[str]:
    """`validation.IsQualifiedName`: label keys, annotation keys, finalizers."""
    errs: list[str] = []
    parts = value.split("/")
    msg = (
        "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
        "with an alphanumeric character"
    )
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain_problems(prefix)]
    else:
        return [
            "a qualified name "
            + _regex_error(msg, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif _byte_len(name) > 63:
        errs.append("name part " + _max_len_error(63))
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append(
            "name part " + _regex_error(msg, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_problems(value: str) -> list[str]:
    """`validation.IsValidLabelValue`."""
    errs = []
    if _byte_len(value) > 63:
        errs.append(_max_len_error(63))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, '-', "
                "'_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


NameRule = Callable[[str], list[str]]
NAME_RULES: Final[Mapping[str, NameRule]] = MappingProxyType(
    {
        "dns-subdomain": dns1123_subdomain_problems,
        "dns-label": dns1123_label_problems,
        "dns1035-label": dns1035_label_problems,
        "path-segment": path_segment_problems,
    }
)
"""The name rules a kind's `metadata.name` follows, by the name `validate_object_meta` takes."""
