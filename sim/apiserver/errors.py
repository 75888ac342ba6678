"""API errors as the real server reports them: a `Status` object with code, reason, causes.

The `kubernetes` client turns these into `ApiException` with the same status and reason
as against a real cluster, so code under test takes the same error paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One field-level problem (`details.causes[]`): reason is e.g. `FieldValueRequired`."""

    field: str
    reason: str
    message: str

    def to_dict(self) -> dict[str, str]:
        """Go's omitempty: an admission policy's cause has only a message."""
        out = {"reason": self.reason, "message": self.message, "field": self.field}
        return {k: v for k, v in out.items() if v or k == "message"}


@dataclass
class ApiError(Exception):
    """An error response; `status_object()` is the JSON body the server sends."""

    code: int
    reason: str
    message: str
    group: str = ""
    kind: str = ""
    name: str = ""
    causes: list[Cause] = field(default_factory=list)
    retry_after_seconds: int | None = None
    # A lost optimistic write that is not a 409 (a JSON patch's failed `test`): the
    # server's stats count it with the conflicts.
    lost_race: bool = False

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def status_object(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [c.to_dict() for c in self.causes]
        if self.retry_after_seconds is not None:
            details["retryAfterSeconds"] = self.retry_after_seconds
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            body["details"] = details
        return body


def _resource(group: str, resource: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_resource(group, resource)} "{name}" not found',
        group=group,
        kind=resource,
        name=name,
    )


def already_exists(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_resource(group, resource)} "{name}" already exists',
        group=group,
        kind=resource,
        name=name,
    )


def conflict(group: str, resource: str, name: str, detail: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_resource(group, resource)} "{name}": {detail}',
        group=group,
        kind=resource,
        name=name,
    )


def aggregate(messages: list[str]) -> str:
    """apimachinery's `utilerrors.Aggregate.Error()`: one message as is; several, each once,
    comma-separated inside brackets."""
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"


def invalid(group: str, kind: str, name: str, causes: list[Cause]) -> ApiError:
    """422 like the real server: `<Kind>.<group> "<name>" is invalid: <field>: <message>`,
    several causes aggregated as `[<cause>, <cause>]` (each distinct text once)."""
    qualified = f"{kind}.{group}" if group else kind
    summary = aggregate([f"{c.field}: {c.message}" if c.field else c.message for c in causes])
    return ApiError(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: {summary}',
        group=group,
        kind=kind,
        name=name,
        causes=causes,
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unsupported_media_type(*, builtin: bool) -> ApiError:
    """415 for a patch type the resource does not take (custom resources: no strategic
    merge), listing the types kube-apiserver's route consumes."""
    types = ["application/json-patch+json", "application/merge-patch+json"]
    if builtin:
        types.append("application/strategic-merge-patch+json")
    types.append("application/apply-patch+yaml")
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(types),
    )


def too_many_requests(retry_after: int = 1) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
        retry_after_seconds=retry_after,
    )


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")
