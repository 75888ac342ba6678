"""Base model for Kubernetes objects that round-trip through the API without losing data.

A controller that reads an object, changes one field and writes it back must not drop
fields that a newer API version (or another controller) added. Every model here keeps
unknown fields and writes them back unchanged; optional known fields left unset are
omitted, like Go's `omitempty`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, Self, TypeVar

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
        data: dict[str, Any] = handler(self)
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

    def as_read(self, *, without: frozenset[str] = frozenset()) -> dict[str, Any]:
        """The JSON this was parsed from: only the fields it had (no default filled in),
        unknown ones included; less the fields named in `without`. For writing an object
        back with one part changed, as a copy of what was read would be."""
        data: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_unset=True,
                                               exclude=set(without))
        return data

    @property
    def unknown_fields(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})

    @property
    def is_empty(self) -> bool:
        """Parsed from `{}`: no field given at all, known or unknown."""
        return not self.model_fields_set and not self.__pydantic_extra__


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

    def label(self, key: str) -> str | None:
        """One label's value; None when the object does not carry it."""
        return self.labels.get(key) if self.labels else None


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
    def resource_version(self) -> str:
        return self.metadata.resource_version or ""

    @property
    def finalizers(self) -> list[str]:
        """A copy: the parsed object stays as read."""
        return list(self.metadata.finalizers or ())

    @property
    def deleting(self) -> bool:
        """Marked for deletion: a deletionTimestamp is set (and not empty)."""
        return bool(self.metadata.deletion_timestamp)

    def label(self, key: str) -> str | None:
        return self.metadata.label(key)


M = TypeVar("M", bound=K8sModel)


class ParsedCache(Generic[M]):
    """The parsed form of each item of a cache of API JSON (an informer's `items`), parsed
    once per version of the object instead of on every read.

    An informer replaces an item by a new dict on every change and never changes one in
    place (runtime/informer.py), so a cached result is current while its item is the very
    dict it was parsed from. A `ValidationError` is remembered as well, and raised again.
    """

    def __init__(self, model: type[M]) -> None:
        self._model = model
        # key -> (the item, its model or why it does not parse)
        self._parsed: dict[str, tuple[Mapping[str, Any], M | str]] = {}

    def get(self, items: Mapping[str, Mapping[str, Any]], key: str) -> M | None:
        """The item `key` parsed, None when `items` has no such key."""
        raw = items.get(key)
        if raw is None:
            return None
        if len(self._parsed) > 2 * len(items) + 64:
            self.forget_missing(items)
        return self.parse(key, raw)

    def parse(self, key: str, raw: Mapping[str, Any]) -> M:
        """`raw`, the item `key`, parsed (from the cache while it is the same dict)."""
        cached = self._parsed.get(key)
        if cached is None or cached[0] is not raw:
            cached = self._fresh(key, raw)
        if isinstance(cached[1], str):
            raise ValidationError(cached[1])
        return cached[1]

    def parse_all(self, items: Mapping[str, Mapping[str, Any]]
                  ) -> tuple[list[M], dict[str, str]]:
        """Every item parsed, and why each of the others does not parse, by key; what
        `items` no longer holds is forgotten. The hot path of a reconcile: one dict lookup
        per unchanged item."""
        parsed, models, errors = self._parsed, [], {}
        for key, raw in items.items():
            cached = parsed.get(key)
            if cached is None or cached[0] is not raw:
                cached = self._fresh(key, raw)
            if isinstance(cached[1], str):
                errors[key] = cached[1]
            else:
                models.append(cached[1])
        # Every key of `items` is held now: more keys than it has means stale ones.
        if len(self._parsed) > len(items):
            self._parsed = {k: v for k, v in self._parsed.items() if k in items}
        return models, errors

    def _fresh(self, key: str, raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], M | str]:
        try:
            cached: tuple[Mapping[str, Any], M | str] = (raw, self._model.from_dict(raw))
        except ValidationError as err:
            cached = (raw, str(err))
        self._parsed[key] = cached
        return cached

    def forget_missing(self, items: Mapping[str, Any]) -> None:
        """Drop what `items` no longer holds."""
        if len(self._parsed) > len(items) or any(k not in items for k in self._parsed):
            self._parsed = {k: v for k, v in self._parsed.items() if k in items}
