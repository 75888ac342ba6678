"""The `/_sim` control endpoints: fault injection knobs and request counters."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from sim.apiserver import errors
from sim.apiserver.listwatch import json_response
from sim.apiserver.store import Store

if TYPE_CHECKING:
    from sim.apiserver.server import ApiServer


@dataclass
class Faults:
    """Knobs tests turn to make the emulator misbehave like a loaded or flaky real server."""

    latency_s: float = 0.0
    error_rate: float = 0.0
    error_code: int = 500
    seed: int | None = None
    rng: random.Random = field(default_factory=random.Random)

    def reseed(self) -> None:
        self.rng = random.Random(self.seed)


@dataclass
class Stats:
    """Request and watch counters, so tests and benchmarks can count writes, conflicts and
    what watches cost the server (the events and bytes it streamed, per user)."""

    requests: dict[str, int] = field(default_factory=dict)
    conflicts: int = 0
    # user name -> verb -> count ("conflict" counts 409s and failed JSON-patch tests, the
    # two ways an optimistic write loses a race): who made the writes.
    by_user: dict[str, dict[str, int]] = field(default_factory=dict)
    # user name -> "watchEvents" / "watchBytes": what that user's watches were sent.
    watch_by_user: dict[str, dict[str, int]] = field(default_factory=dict)
    # user name -> writes of Events among its writes: a report can set them aside.
    event_writes_by_user: dict[str, int] = field(default_factory=dict)
    # user name -> "METHOD resource[/subresource]" -> count: what a user's writes were to
    # (a benchmark says where its writes per join go).
    writes_by_user: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, verb: str, user: str = "") -> None:
        self.requests[verb] = self.requests.get(verb, 0) + 1
        mine = self.by_user.setdefault(user, {})
        mine[verb] = mine.get(verb, 0) + 1

    def conflict(self, user: str = "") -> None:
        self.conflicts += 1
        mine = self.by_user.setdefault(user, {})
        mine["conflict"] = mine.get("conflict", 0) + 1

    def watched(self, user: str, events: int, nbytes: int) -> None:
        """`events` watch frames (bookmarks included) of `nbytes` written to `user`'s watch."""
        mine = self.watch_by_user.setdefault(user, {"watchEvents": 0, "watchBytes": 0})
        mine["watchEvents"] += events
        mine["watchBytes"] += nbytes

    def event_write(self, user: str) -> None:
        """One of `user`'s writes (counted by `count` too) was to an Event."""
        self.event_writes_by_user[user] = self.event_writes_by_user.get(user, 0) + 1

    def write(self, user: str, method: str, resource: str) -> None:
        """One write request of `user` (PUT, POST, PATCH or DELETE) to `resource`."""
        mine = self.writes_by_user.setdefault(user, {})
        key = f"{method} {resource}"
        mine[key] = mine.get(key, 0) + 1

    def users(self) -> dict[str, dict[str, int]]:
        """user -> verb counts and, for users who watched, watchEvents and watchBytes; for
        users who wrote Events, eventWrites (of their create/update/patch/delete)."""
        out = {user: dict(verbs) for user, verbs in self.by_user.items()}
        for user, sent in self.watch_by_user.items():
            out.setdefault(user, {}).update(sent)
        for user, writes in self.event_writes_by_user.items():
            out.setdefault(user, {})["eventWrites"] = writes
        return out


def control(
    request: web.Request,
    parts: list[str],
    body: Any,
    *,
    faults: Faults,
    stats: Stats,
    store: Store,
) -> web.Response:
    """Serve `/_sim/<action>`; `body` is the parsed POST body (None otherwise)."""
    action = parts[0] if parts else ""
    if action == "faults" and request.method == "POST":
        body = body or {}
        faults.latency_s = float(body.get("latencySeconds", 0))
        faults.error_rate = float(body.get("errorRate", 0))
        faults.error_code = int(body.get("errorCode", 500))
        faults.seed = body.get("seed")
        faults.reseed()
        return json_response({"ok": True})
    if action == "close-watches" and request.method == "POST":
        return json_response({"closed": store.close_watches()})
    if action == "compact" and request.method == "POST":
        store.compact()
        return json_response({"compactedTo": store.resource_version})
    if action == "stats":
        return json_response(
            {
                "requests": stats.requests,
                "conflicts": stats.conflicts,
                "byUser": stats.users(),
                "writesByUser": stats.writes_by_user,
                "resourceVersion": store.resource_version,
                "watches": store.watcher_count,
            }
        )
    raise errors.ApiError(404, "NotFound", f"unknown control endpoint {request.path}")


def operate(server: ApiServer, op: str, args: dict[str, Any]) -> Any:
    """What the sim asks of its emulator, in the thread or process that runs it
    (`ServerThread.op`, `sim.apiserver.process.ServerProcess.op`): the counters, the
    fault knobs, dropping watches, compaction, and registering a user's token. Results are
    plain JSON values, so the same call works across a process boundary."""
    if op == "users":
        return server.stats.users()
    if op == "requests":
        return dict(server.stats.requests)
    if op == "writes":
        return {user: dict(w) for user, w in server.stats.writes_by_user.items()}
    if op == "faults":
        server.faults.error_rate = float(args.get("rate", 0.0))
        server.faults.error_code = int(args.get("code", 500))
        return None
    if op == "close_watches":
        return server.store.close_watches()
    if op == "compact":
        server.store.compact()
        return server.store.resource_version
    if op == "add_user":
        if server.authenticator is None:
            raise ValueError("this emulator has no token authenticator")
        server.authenticator.add_user(str(args["token"]), str(args["name"]),
                                      [str(g) for g in args.get("groups") or ()])
        return None
    raise ValueError(f"unknown emulator operation {op!r}")
