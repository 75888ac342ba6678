"""List and watch: selectors, paged lists with continue tokens, and watch streaming."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from sim.apiserver import errors, list_options, table, versions
from sim.apiserver.field_selectors import FieldSelector, check_fields, parse_field_selector
from sim.apiserver.label_selectors import parse_label_selector
from sim.apiserver.store import (
    ADDED,
    DELETED,
    MODIFIED,
    Event,
    ExpiredError,
    Obj,
    Store,
    list_order,
)

if TYPE_CHECKING:
    from sim.apiserver.server import Target

JSON = "application/json"


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type=JSON)


def _fields(request: web.Request, t: Target) -> FieldSelector:
    return check_fields(
        t.info.group,
        t.info.plural,
        parse_field_selector(request.query.get("fieldSelector", "")),
        namespaced=t.info.namespaced,
        version=t.info.version,
    )


def selected_by(request: web.Request, t: Target) -> Callable[[Obj], bool]:
    labels = parse_label_selector(request.query.get("labelSelector", ""))
    fields = _fields(request, t)

    def selected(obj: Obj) -> bool:
        md = obj.get("metadata") or {}
        return labels.matches(md.get("labels")) and fields.matches(obj)

    return selected


def watch_index(request: web.Request, t: Target) -> tuple[str, str] | None:
    """The first equality of the watch's field selector, which the store files it under."""
    for r in _fields(request, t).requirements:
        if r.operator == "=":
            return r.field, r.value
    return None


def list_response(request: web.Request, t: Target, store: Store) -> web.Response:
    q = request.query
    list_options.validate(q, watch=False)
    selected = selected_by(request, t)
    rv_param, match = q.get("resourceVersion", ""), q.get("resourceVersionMatch", "")
    current_rv = store.resource_version
    if rv_param not in ("", "0"):
        try:
            wanted = int(rv_param)
        except ValueError:
            raise errors.bad_request(f"invalid resourceVersion {rv_param!r}") from None
        if wanted > current_rv:
            raise errors.ApiError(
                504, "Timeout", f"Too large resource version: {wanted}, current: {current_rv}"
            )
        if match == "Exact" and wanted < store.oldest_watchable:
            raise errors.gone(f"too old resource version: {wanted} ({store.oldest_watchable})")
    items = [o for o in store.list(t.info.key, t.namespace or None) if selected(o)]
    list_rv = str(current_rv)
    start = 0
    token = q.get("continue")
    if token:
        try:
            state = orjson.loads(base64.urlsafe_b64decode(token.encode()))
            list_rv, after = state["rv"], tuple(state["after"])
        except Exception:
            raise errors.bad_request("continue key is not valid") from None
        if int(list_rv) < store.oldest_watchable:
            raise errors.gone(
                "The provided continue parameter is too old to display a "
                "consistent list result. You can start a new list without "
                "the continue parameter."
            )
        start = next(
            (
                i
                for i, o in enumerate(items)
                if list_order(o["metadata"].get("namespace", ""), o["metadata"]["name"])
                > list_order(*after)
            ),
            len(items),
        )
    limit = int(q.get("limit", "0") or 0)
    page = items[start : start + limit] if limit > 0 else items[start:]
    list_meta: dict[str, Any] = {"resourceVersion": list_rv}
    if limit > 0 and start + limit < len(items):
        last = page[-1]["metadata"]
        state = {"rv": list_rv, "after": [last.get("namespace", ""), last["name"]]}
        list_meta["continue"] = base64.urlsafe_b64encode(orjson.dumps(state)).decode()
        list_meta["remainingItemCount"] = len(items) - start - limit
    elif not t.info.builtin:
        # A custom resource list is unstructured: its empty continue token stays in.
        list_meta["continue"] = ""
    if table.wants_table(request.headers.get("Accept", "")):
        include = table.include_object(q)
        return json_response(table.table(t.info, page, list_meta, include=include))
    return json_response(
        {
            "kind": t.info.list_kind,
            "apiVersion": t.info.api_version,
            "metadata": list_meta,
            "items": [versions.from_storage(t.info, o) for o in page]
            if versions.converted(t.info)
            else page,
        }
    )


async def watch_stream(
    request: web.Request,
    t: Target,
    *,
    store: Store,
    streams: set[web.StreamResponse],
    watch_timeout: float,
    bookmark_interval: Callable[[], float],
    sent: Callable[[int, int], None] | None = None,
) -> web.StreamResponse:
    """Stream watch events; `bookmark_interval` is read on every wait, so tests can tune it.
    `sent(events, bytes)` is told of every write, so the server can count watch traffic."""
    q = request.query
    list_options.validate(q, watch=True)
    selected = selected_by(request, t)
    as_table = table.wants_table(request.headers.get("Accept", ""))
    include = table.include_object(q) if as_table else "Metadata"
    headers = True  # the first Table event carries the column definitions, no later one
    bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
    timeout = float(q.get("timeoutSeconds") or watch_timeout)
    watcher = store.watch(t.info.key, t.namespace or None, watch_index(request, t))
    response = web.StreamResponse(headers={"Content-Type": JSON})
    response.enable_chunked_encoding()
    await response.prepare(request)
    streams.add(response)

    def frame(kind: str, obj: Obj) -> bytes:
        nonlocal headers
        if as_table and kind in (ADDED, MODIFIED, DELETED):
            rv = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            obj = table.table(t.info, [obj], rv, include=include, headers=headers)
            headers = False
        elif kind in (ADDED, MODIFIED, DELETED):
            obj = versions.from_storage(t.info, obj)
        return orjson.dumps({"type": kind, "object": obj}) + b"\n"

    async def write(frames: list[bytes]) -> None:
        data = b"".join(frames)
        await response.write(data)
        if sent is not None:
            sent(len(frames), len(data))

    try:
        last_rv = store.resource_version
        opening, ended = _opening(t, store, selected, frame, q, bookmarks=bookmarks)
        if opening:
            await write(opening)
        if ended:
            return response
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            wait = min(remaining, bookmark_interval()) if bookmarks else remaining
            try:
                async with asyncio.timeout(wait):
                    event = await watcher.queue.get()
            except TimeoutError:
                if not watcher.queue.empty():
                    # The wait ran out just as an event arrived (a busy loop runs both in
                    # one turn). A bookmark now would carry a version past that event, and
                    # a client resuming from it after this watch ends would never get it.
                    continue
                if bookmarks:
                    mark = {
                        "kind": t.info.kind,
                        "apiVersion": t.info.api_version,
                        "metadata": {"resourceVersion": str(store.resource_version)},
                    }
                    await write([frame("BOOKMARK", mark)])
                continue
            if event is None:
                break  # closed by a fault or shutdown
            if event.rv <= last_rv:
                continue
            kind, obj = filter_event(event, selected)
            if kind:
                await write([frame(kind, obj)])
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    except RuntimeError as err:
        # The server ended this stream (stop()) while a write was on its way.
        if "write_eof" not in str(err):
            raise
    finally:
        store.unwatch(watcher)
        streams.discard(response)
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await response.write_eof()
    return response


def _error_frame(err: errors.ApiError) -> list[bytes]:
    return [orjson.dumps({"type": "ERROR", "object": err.status_object()}) + b"\n"]


def _opening(
    t: Target,
    store: Store,
    selected: Callable[[Obj], bool],
    frame: Callable[[str, Obj], bytes],
    q: Any,
    *,
    bookmarks: bool,
) -> tuple[list[bytes], bool]:
    """The frames a watch sends before the changes, and whether it ends there (an ERROR).

    Without `sendInitialEvents` a watch from resourceVersion "" or "0" starts with every
    object as ADDED, one from a later version with the changes since; with it (a watch
    list, sim/apiserver/list_options.py) the current objects, then the bookmark that ends
    them; `sendInitialEvents=false` sends only what changes after the given version.
    """
    rv_param = q.get("resourceVersion", "")
    initial = list_options.send_initial_events(q)
    current = store.resource_version
    since: int | None = None
    if rv_param not in ("", "0"):
        try:
            since = int(rv_param)
        except ValueError:
            raise errors.bad_request(f"invalid resourceVersion {rv_param!r}") from None
    if initial or (initial is None and since is None):
        if initial and since is not None and since > current:
            message = f"Timeout: Too large resource version: {since}, current: {current}"
            return _error_frame(errors.ApiError(504, "Timeout", message)), True
        out = [frame(ADDED, o) for o in store.list(t.info.key, t.namespace or None)
               if selected(o)]  # fmt: skip
        if initial and bookmarks:
            end = list_options.initial_events_end(t.info.kind, t.info.api_version, current)
            out.append(frame("BOOKMARK", end))
        return out, False
    if since is None:
        return [], False
    try:
        backlog = store.events_since(t.info.key, t.namespace or None, since)
    except ExpiredError as err:
        return _error_frame(errors.gone(str(err))), True
    changes = (filter_event(e, selected) for e in backlog)
    return [frame(k, o) for k, o in changes if k], False


def filter_event(event: Event, selected: Callable[[Obj], bool]) -> tuple[str | None, Obj]:
    """Selector transitions as the watch cache reports them."""
    now_in = selected(event.obj)
    if event.type == MODIFIED:
        was_in = event.old is not None and selected(event.old)
        if now_in and was_in:
            return MODIFIED, event.obj
        if now_in:
            return ADDED, event.obj
        if was_in and event.old is not None:
            # The object as it was (still matching), at the new resourceVersion: a watcher
            # learns which selected object left (kube-apiserver's watch cache does this).
            gone = {**event.old, "metadata": {**event.old.get("metadata", {}),
                    "resourceVersion": event.obj["metadata"].get("resourceVersion")}}
            return DELETED, gone
        return None, event.obj
    return (event.type if now_in else None), event.obj
