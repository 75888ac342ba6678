"""The three PATCH bodies kube-apiserver accepts: JSON merge, JSON patch, strategic merge.

JSON merge and JSON patch are here; strategic merge is in `strategic_patch`, and its errors
are this module's `PatchError`. Every function here works on copies: inputs are never mutated.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch
import jsonpointer

__all__ = [
    "PatchError",
    "apply_json_patch",
    "apply_merge_patch",
]


class PatchError(ValueError):
    """A patch the server refuses. `code` is the HTTP status the real server answers with:
    400 for a malformed body, 422 for a well-formed one that does not apply, 500 where the
    real server lets a strategicpatch error through unconverted (reason "Unknown"), 415 for a
    strategic merge patch on a kind that has no Go struct (custom resources)."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


class PatchTestFailedError(PatchError):
    """A JSON patch `test` operation that did not hold: the writer's precondition lost
    to a concurrent write, the JSON-patch form of a 409 conflict."""


# --- RFC 7386 JSON merge patch ----------------------------------------------------------------


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """application/merge-patch+json: objects merge recursively, null deletes, the rest replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    # Untouched members are shared with `target` so far; copy them so the caller owns the result.
    return {k: (copy.deepcopy(v) if k not in patch else v) for k, v in result.items()}


# --- RFC 6902 JSON patch ------------------------------------------------------------------


def _json_kind(value: Any) -> str:
    """How encoding/json names a JSON value's kind in its unmarshal errors."""
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "null"


def apply_json_patch(target: Any, ops: Any) -> Any:
    """application/json-patch+json. A body that is not a list of objects is a 400; an operation
    that cannot apply (a failing `test`, a missing path, an unknown op) is a 422, as with the
    evanphx/json-patch library the real server uses."""
    if not isinstance(ops, list | tuple):
        raise PatchError(
            f"json: cannot unmarshal {_json_kind(ops)} into Go value of type jsonpatch.Patch", 400
        )
    for op in ops:
        if not isinstance(op, Mapping):
            raise PatchError(
                f"json: cannot unmarshal {_json_kind(op)} into Go value of type "
                "jsonpatch.Operation",
                400,
            )
    ops = copy.deepcopy([dict(op) for op in ops])  # values would otherwise alias the result
    for op in ops:
        name = op.get("op")
        if not isinstance(name, str) or name not in jsonpatch.JsonPatch.operations:
            raise PatchError(f"Unexpected kind: {name if isinstance(name, str) else 'unknown'}")
        for member in ("path", *(("from",) if name in ("move", "copy") else ())):
            if not isinstance(op.get(member), str):
                raise PatchError(f"{name} operation: missing or invalid '{member}' member")
        if name in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"{name} operation: missing 'value' member")
    doc = copy.deepcopy(target)
    for op in ops:
        try:
            doc = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
        except jsonpatch.JsonPatchTestFailed:
            raise PatchTestFailedError(f"testing value {op['path']} failed: test failed") from None
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as err:
            name, where = op["op"], f'"{op["path"]}"'
            if name in ("move", "copy"):
                where = f'"{op["from"]}" to {where}'
            raise PatchError(f"{name} operation does not apply: {where}: {err}") from None
    return doc
