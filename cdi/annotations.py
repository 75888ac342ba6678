"""Annotation checks, since runtimes validate CDI annotations as Kubernetes annotations.

The Go CDI library applies apimachinery's annotation rules (keys are qualified names,
compared case-insensitively; total size at most 256 KiB), so a spec our rules accept
must pass those too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from cdi.cdi_error import CDIError

_TOTAL_SIZE_LIMIT = 256 * 1024
_NAME_MAX = 63
_PREFIX_MAX = 253
_NAME = re.compile(r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")


def _key_problem(key: str) -> str | None:
    lowered = key.lower()
    prefix, sep, name = lowered.rpartition("/") if "/" in lowered else ("", "", lowered)
    if sep and not prefix:
        return "prefix part must be non-empty"
    if "/" in prefix:
        return "a qualified name must have at most one '/'"
    if not name:
        return "name part must be non-empty"
    if len(name) > _NAME_MAX:
        return f"name part must be no more than {_NAME_MAX} characters"
    if not _NAME.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    if prefix and (len(prefix) > _PREFIX_MAX or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    return None


def validate_annotations(annotations: Mapping[str, str], where: str) -> None:
    """Raise CDIError naming the first bad key, or if the annotations are too large."""
    total = 0
    for key, value in annotations.items():
        problem = _key_problem(key)
        if problem is not None:
            raise CDIError(f"{where}: invalid annotation key {key!r}: {problem}")
        # surrogatepass: a lone surrogate is bad data to report, not a reason to crash.
        total += len(key.encode("utf-8", "surrogatepass"))
        total += len(value.encode("utf-8", "surrogatepass"))
    if total > _TOTAL_SIZE_LIMIT:
        raise CDIError(
            f"{where}: annotations are {total} bytes, more than the {_TOTAL_SIZE_LIMIT} allowed"
        )
