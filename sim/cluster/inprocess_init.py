"""The plugin pod's init container (`compute-domain-agent prestart`) in-process.

Part of the in-process host (sim/cluster/inprocess.py): the init container's work runs in
a thread, with a sleep that ends it when the pod goes, instead of a Python process per node.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import IO, Final, TextIO, cast

from agent import prestart

PRESTART_LOOK_S: Final = 0.1  # how soon an in-process init container sees its pod go


async def run_prestart(args: argparse.Namespace, out: IO[str], stop: asyncio.Event) -> int:
    """The plugin pod's init container (`compute-domain-agent prestart`) in a thread: a
    process of its own per node, a Python start each, was the larger part of a node's
    bring-up cost at 1,000 nodes. The pod's deletion (`stop`) ends it with status 0, as
    SIGTERM ends the process."""

    def sleep(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if stop.is_set():
                raise _PodGoneError
            time.sleep(min(PRESTART_LOOK_S, max(deadline - time.monotonic(), 0.0)))

    try:
        return await asyncio.to_thread(prestart.prestart, args, cast(TextIO, out), sleep)
    except _PodGoneError:
        print("received SIGTERM", file=out, flush=True)
        return 0


class _PodGoneError(Exception):
    """The in-process init container's pod went away."""
