"""Kubernetes calls shared by the agent and the controller: one client, blocking calls off
the event loop, retries while the API server is busy, and one readable line per API error.

The `kubernetes` client is synchronous; each process has one event loop. Every call goes
through `call()` (a worker thread), so nothing blocks RPCs or reconciles.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from runtime.logsetup import v_level, vlog

log = logging.getLogger(__name__)
T = TypeVar("T")


def api_client(kubeconfig: str) -> client.ApiClient:
    """From a kubeconfig file, or the in-cluster service account when empty; each request
    logged at V6 (`log_responses`)."""
    if kubeconfig:
        # Untyped in the client; it builds an ApiClient from that file.
        from_file: client.ApiClient = config.new_client_from_config(config_file=kubeconfig)
        return log_responses(from_file)
    config.load_incluster_config()
    return log_responses(client.ApiClient())


def log_responses(api: client.ApiClient) -> client.ApiClient:
    """Log each HTTP exchange of `api` at V6 as client-go's round_trippers.go does
    (`"Response" verb="GET" url="..." status="200 OK" milliseconds=3`), the line the
    reference's admins and tests read at -v 6. A watch is logged when its headers come."""
    rest: Any = api.rest_client  # untyped in the client
    request: Callable[..., Any] = rest.request

    def logged(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if not log.isEnabledFor(v_level(6)):
            return request(method, url, *args, **kwargs)
        start = time.monotonic()
        status = "<error>"
        try:
            response = request(method, url, *args, **kwargs)
            status = f"{response.status} {response.reason or ''}".strip()
            return response
        except ApiException as err:
            status = f"{err.status} {err.reason or ''}".strip()
            raise
        finally:
            vlog(log, 6, '"Response" verb="%s" url="%s" status="%s" milliseconds=%d', method,
                 url, status, (time.monotonic() - start) * 1000)

    rest.request = logged
    return api


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.to_thread(fn, *args, **kwargs)


TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


def is_transient(err: BaseException) -> bool:
    """A busy or flaky API server (429/5xx) or a connection that failed: worth retrying."""
    if isinstance(err, ApiException):
        return err.status in TRANSIENT_STATUSES
    return isinstance(err, (urllib3.exceptions.HTTPError, ConnectionError))


async def call_retrying(fn: Callable[..., T], *args: Any, within: float = 60.0,
                        **kwargs: Any) -> T:
    """`call`, retried with jittered exponential backoff while the error is transient, for
    up to `within` seconds. For requests whose repetition is harmless: reads, and writes
    that a retry turns into a clear answer (a PUT with a resourceVersion gets 409, a
    repeated create 409 AlreadyExists)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    delay = 0.1
    while True:
        try:
            return await call(fn, *args, **kwargs)
        except Exception as err:
            if not is_transient(err) or loop.time() + delay > end:
                raise
            log.info("%s: %s; retrying in %.1fs", getattr(fn, "__name__", "API call"),
                     error_text(err), delay)
        await asyncio.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, 5.0)


def status_of(err: Exception) -> int | None:
    return err.status if isinstance(err, ApiException) else None


def error_text(err: Exception) -> str:
    """One line for a log: `404 NotFound: <the server's message>` instead of the client's
    multi-line dump of headers and body."""
    if not isinstance(err, ApiException):
        return f"{type(err).__name__}: {err}"
    message = ""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        message = str(json.loads(err.body or "{}").get("message") or "")
    return f"{err.status} {err.reason}" + (f": {message}" if message else "")
