"""The list and watch options kube-apiserver refuses, and the watch-list request.

kubectl 1.37 (`kubectl wait`, client-go's reflectors) opens a watch with
`sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`: the
server sends the current objects as ADDED events, then a BOOKMARK annotated
`k8s.io/initial-events-end`, then the changes. A client waits for that bookmark before it
believes its list, so a server that never sends it leaves `kubectl wait` hanging.

The 422 texts are those of ValidateListOptions
(https://github.com/kubernetes/kubernetes/blob/v1.37.2/staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sim.apiserver import errors, field_errors
from sim.apiserver.errors import Cause

EXACT: Final = "Exact"
NOT_OLDER_THAN: Final = "NotOlderThan"
INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"
_TRUE: Final = frozenset({"1", "t", "T", "true", "TRUE", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "false", "FALSE", "False"})
_WITH_CONTINUE: Final = "resourceVersionMatch is forbidden when continue is provided"


def send_initial_events(query: Mapping[str, str]) -> bool | None:
    """The `sendInitialEvents` parameter (Go's strconv.ParseBool); None when absent."""
    value = query.get("sendInitialEvents")
    if value is None:
        return None
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    raise errors.bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def _list_causes(query: Mapping[str, str]) -> list[Cause]:
    causes: list[Cause] = []
    match = query.get("resourceVersionMatch", "")
    if match:
        rv = query.get("resourceVersion", "")
        if not rv:
            causes.append(
                field_errors.forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            )
        if query.get("continue"):
            causes.append(field_errors.forbidden("resourceVersionMatch", _WITH_CONTINUE))
        if match not in (EXACT, NOT_OLDER_THAN):
            causes.append(
                field_errors.not_supported(
                    "resourceVersionMatch", match, [EXACT, NOT_OLDER_THAN, ""]
                )
            )
        if match == EXACT and rv == "0":
            causes.append(
                field_errors.forbidden(
                    "resourceVersionMatch",
                    'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
            )
    if send_initial_events(query) is not None:
        causes.append(
            field_errors.forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list")
        )
    return causes


def _watch_causes(query: Mapping[str, str]) -> list[Cause]:
    causes: list[Cause] = []
    match = query.get("resourceVersionMatch", "")
    initial = send_initial_events(query)
    if initial is not None and match != NOT_OLDER_THAN:
        causes.append(
            field_errors.forbidden(
                "resourceVersionMatch",
                f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}",
            )
        )
    if match:
        if initial is None:
            causes.append(
                field_errors.forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
                    "provided",
                )
            )
        if match != NOT_OLDER_THAN:
            causes.append(
                field_errors.not_supported("resourceVersionMatch", match, [NOT_OLDER_THAN])
            )
        if query.get("continue"):
            causes.append(field_errors.forbidden("resourceVersionMatch", _WITH_CONTINUE))
    return causes


def validate(query: Mapping[str, str], *, watch: bool) -> None:
    """A 422 `ListOptions.meta.k8s.io "" is invalid` for options the real server refuses."""
    causes = _watch_causes(query) if watch else _list_causes(query)
    if causes:
        raise errors.invalid("meta.k8s.io", "ListOptions", "", causes)


def initial_events_end(kind: str, api_version: str, resource_version: int) -> dict[str, object]:
    """The bookmark that ends a watch's initial events."""
    return {"kind": kind, "apiVersion": api_version,
            "metadata": {"resourceVersion": str(resource_version),
                         "annotations": {INITIAL_EVENTS_END: "true"}}}  # fmt: skip
