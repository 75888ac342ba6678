"""Base model for Kubernetes objects that round-trip through the API without losing data.

A controller that reads an object, changes one field and writes it back must not drop
fields that a newer API version (or another controller) added. Every model here keeps
unknown fields and writes them back unchanged; optional known fields left unset are
omitted, like Go's `omitempty`.
"""

from __future__ import annotations

from typing import Any, Self

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_serializer
from pydantic.alias_generators import to_camel

from api.validation_error import ValidationError


def describe_pydantic_errors(err: pydantic.ValidationError, *, what: str) -> str:
    """One readable line per problem, each naming the JSON path of the offending field."""
    problems = []
    for item in err.errors(include_url=False):
        path = ".".join(str(p) for p in item["loc"]) or "(top level)"
        kind = item["type"]
        if kind == "extra_forbidden":
            problems.append(f"unknown field {path!r}")
        elif kind == "missing":
            problems.append(f"{path}: required field is missing")
        elif kind == "literal_error":
            problems.append(f"{path}: {item['msg']} (got {item.get('input')!r})")
        else:
            got = type(item.get("input")).__name__
            problems.append(f"{path}: {item['msg']} (got {got})")
    return f"invalid {what}: " + "; ".join(problems)


class K8sModel(BaseModel):
    """Strictly typed known fields, unknown fields kept verbatim."""

    model_config = ConfigDict(
        extra="allow",
        strict=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: pydantic.SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name, field in type(self).model_fields.items():
            if getattr(self, name) is None:
                data.pop(field.alias or name, None)
                data.pop(name, None)
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Parse an API object; a malformed one raises `ValidationError` naming each bad field."""
        try:
            return cls.model_validate(data)
        except pydantic.ValidationError as err:
            raise ValidationError(describe_pydantic_errors(err, what=cls.__name__)) from None

    def to_dict(self) -> dict[str, Any]:
        """The API JSON form, unknown fields included."""
        return self.model_dump(mode="json", by_alias=True)

    @property
    def unknown_fields(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


class OwnerReference(K8sModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(K8sModel):
    """The parts of metadata the driver reads or writes; the rest is kept as-is."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    owner_references: list[OwnerReference] | None = None


class K8sObject(K8sModel):
    """A top-level object: apiVersion, kind, metadata."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        head = {k: data.pop(k) for k in ("apiVersion", "kind", "metadata") if k in data}
        return head | data

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or ""

    @property
    def uid(self) -> str:
        return self.metadata.uid or ""

    @property
    def deleting(self) -> bool:
        return self.metadata.deletion_timestamp is not None
