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
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)
T = TypeVar("T")


def api_client(kubeconfig: str) -> client.ApiClient:
    """From a kubeconfig file, or the in-cluster service account when empty."""
    if kubeconfig:
        # Untyped in the client; it builds an ApiClient from that file.
        from_file: client.ApiClient = config.new_client_from_config(config_file=kubeconfig)
        return from_file
    config.load_incluster_config()
    return client.ApiClient()


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
