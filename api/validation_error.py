"""The one error type for rejected input, so callers can tell bad input from bugs."""

from __future__ import annotations


class ValidationError(ValueError):
    """Input that does not satisfy the contract; the message says what is wrong and how to fix it.

    Every decoder and validator in `api` raises this and nothing else for bad input, so a
    caller can turn it into a per-claim error or a startup message without catching broad
    exceptions.
    """
