"""An informer whose event loop is gone ends its thread, even if nobody called stop():
otherwise it retries into interpreter shutdown, where a daemon thread writing its log line
to stderr aborts the process (a test run then fails after every test passed)."""

from __future__ import annotations

import asyncio
import time

from eventually import eventually

from runtime.informer import Informer


def test_thread_ends_once_its_loop_is_closed() -> None:
    calls = []

    def unreachable(**_: object) -> dict:
        calls.append(time.monotonic())
        raise ConnectionError("connection refused")

    loop = asyncio.new_event_loop()
    informer = Informer(loop, unreachable, lambda o: o["metadata"]["name"], "orphan")
    informer.start()
    # Retrying while the loop lives.
    eventually(lambda: len(calls) >= 2, "two attempts", timeout=5, interval=0.05)
    loop.close()  # its owner went away without stop()
    informer._thread.join(timeout=15)
    assert not informer._thread.is_alive()
