"""Numbers as kube-apiserver decodes a JSON body: an integer that fits int64 stays an
integer, a larger one becomes a float64 (apimachinery's unstructured JSON decoding), so
schema validation refuses it as a "number" instead of the store keeping a value that no
Go client, and not the emulator's own encoder, can read back."""

from __future__ import annotations

import re
from typing import Any, Final

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
# A body without a run of 19 digits holds no integer beyond int64: skip the walk.
LONG_NUMBER: Final = re.compile(rb"\d{19}")


def beyond_int64_as_float(value: Any) -> Any:
    """`value` with every integer outside int64 replaced by the nearest float."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if INT64_MIN <= value <= INT64_MAX else float(value)
    if isinstance(value, dict):
        return {k: beyond_int64_as_float(v) for k, v in value.items()}
    if isinstance(value, list):
        return [beyond_int64_as_float(v) for v in value]
    return value
