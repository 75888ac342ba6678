"""The fake's wire formats: one JSON object per line, on both the peer and command sockets.

Peer connections (SERVER_PORT): the dialer sends `hello`, the listener answers with its own
`hello`, then both send `hb` every heartbeat interval and `bye` when shutting down:
    {"t": "hello", "id": 1, "host": "node-1", "ip": "127.0.1.2", "version": "...",
     "map": "<nodes digest>", "instance": "<uuid>", "state": "READY"}
    {"t": "hb", "state": "READY", "links": {"0": "CONNECTED", "2": "NEVER_CONNECTED"}}
    {"t": "bye"}
Command service (IMEX_CMD_PORT / IMEX_CMD_UNIX_DOMAIN_PATH): one request line
`{"cmd": "query"}` or `{"cmd": "nodes"}`, one response line, then the server closes.
"""

from __future__ import annotations

import json
from typing import Any, Final

HELLO: Final = "hello"
HEARTBEAT: Final = "hb"
BYE: Final = "bye"
CMD_QUERY: Final = "query"
CMD_NODES: Final = "nodes"
MAX_LINE: Final = 1 << 20


class ProtocolError(Exception):
    """A line that is not one JSON object."""


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"not JSON: {line[:80]!r}") from exc
    if not isinstance(message, dict):
        raise ProtocolError(f"not a JSON object: {line[:80]!r}")
    return message
