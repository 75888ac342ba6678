"""What built-in and custom resource validation share on top of `jsonschema`.

jsonschema finds the violations; admission reports them as kube-apiserver does: at a
Kubernetes field path (`spec.nodes[0].name`), a required field at its own path, and in the
order the server walks an object (its keys as sent, a node's own checks before its fields,
missing required fields last).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from jsonschema import Draft4Validator, ValidationError, validators
from jsonschema.protocols import Validator

from sim.apiserver.field_errors import child, index

# A node's own checks, in the order kube-openapi runs them (before any of its fields).
_OWN_CHECKS: Final = (
    "type", "allOf", "anyOf", "oneOf", "not", "maxLength", "minLength", "pattern", "format",
    "multipleOf", "maximum", "minimum", "enum", "maxItems", "minItems", "uniqueItems",
    "maxProperties", "minProperties", "x-kubernetes-embedded-resource"
)
_RANK: Final = {name: i - len(_OWN_CHECKS) for i, name in enumerate(_OWN_CHECKS)}


class BelowError(ValidationError):
    """A violation about a field below the checked object (`below`): a missing required
    field, an embedded resource's apiVersion. Its `path` stays the object's."""

    def __init__(self, message: str, below: Sequence[str], **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.below = tuple(below)


def field_path(error: ValidationError, prefix: str = "") -> str:
    """The Kubernetes field path of a violation (`spec.nodes[0].name`), below `prefix`."""
    path = prefix
    for step in (*error.path, *getattr(error, "below", ())):
        path = index(path, step) if isinstance(step, int) else child(path, step)
    return path


def walk_position(root: Any, steps: Iterable[str | int]) -> list[float]:
    """Where a path lies in a walk of `root`: each step's place among its siblings as sent
    (a missing key after all the present ones)."""
    positions: list[float] = []
    node = root
    for step in steps:
        if isinstance(node, Mapping):
            positions.append(list(node).index(step) if step in node else math.inf)
            node = node.get(step)
        else:
            positions.append(step if isinstance(step, int) else math.inf)
            node = node[step] if isinstance(node, list) and isinstance(step, int) else None
    return positions


def in_walk_order(errors: Iterable[ValidationError], root: Any) -> list[ValidationError]:
    """The violations in the order kube-openapi reports them walking `root`."""

    def key(error: ValidationError) -> tuple[float, ...]:
        last = math.inf if error.validator == "required" else _RANK.get(str(error.validator), 0)
        return (*walk_position(root, error.path), last)

    return sorted(errors, key=key)


def required_keyword(missing: Callable[[Mapping[str, Any], str], bool]) -> Callable[..., Any]:
    """`required`, reporting each missing field at its own path; `missing` says what counts
    as missing (a null built-in field is Go's zero value, so it is missing too)."""

    def required(
        validator: Validator, names: list[str], instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        if isinstance(instance, Mapping):
            for name in names:
                if missing(instance, name):
                    yield BelowError(f"{name!r} is a required property", (name,))

    return required


def validator_class(
    keywords: Mapping[str, Callable[..., Any]], *, integer: Callable[[Any], bool] | None = None
) -> type[Validator]:
    """Draft 4 (whose keywords OpenAPI v3 schemas use) with Kubernetes' own keywords, and
    `integer` deciding what an integer is."""
    checker = Draft4Validator.TYPE_CHECKER
    if integer is not None:
        checker = checker.redefine("integer", lambda _, value: integer(value))
    return validators.extend(Draft4Validator, dict(keywords), type_checker=checker)
