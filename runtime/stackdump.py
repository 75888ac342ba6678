"""SIGUSR2: write every thread's and every asyncio task's stack to a file, as the
reference's components write their goroutine stacks (its runbooks: `kill -USR2 1` in the
container, then read `/tmp/goroutine-stacks.dump`; /work/shared/reference/kubelet-plugin.md
section 1, daemon.md, controller.md). Same path, so those commands work against us; the
content is Python's stacks. If the file cannot be written, the dump goes to stderr.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
import stat
import sys
import threading
import traceback
from pathlib import Path
from typing import TextIO

log = logging.getLogger(__name__)

DUMP_PATH = Path("/tmp/goroutine-stacks.dump")


def render(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """Every thread's stack, then every pending task of `loop` with its coroutine stack."""
    out = io.StringIO()
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        out.write(f"thread {names.get(ident, '?')} ({ident}):\n")
        out.write("".join(traceback.format_stack(frame)))
        out.write("\n")
    if loop is not None:
        for task in asyncio.all_tasks(loop):
            out.write(f"task {task.get_name()} ({task.get_coro()!r}):\n")
            task.print_stack(file=out)
            out.write("\n")
    return out.getvalue()


def write(path: Path, text: str, fallback: TextIO | None = None) -> bool:
    """Write `text` to `path`, or to `fallback` (stderr) if that fails; True when the file
    was written. /tmp may be shared with other users (the systemd unit, the simulated
    cluster): never through a symlink, and an existing file is overwritten only if it is
    our own regular file with no other link (never someone's planted hard link)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as err:
        log.warning("cannot write %s (%s): stacks follow on stderr", path, err)
        (fallback or sys.stderr).write(text)
        return False
    with os.fdopen(fd, "w") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != os.geteuid():
            log.warning("not writing %s: not our own regular file with one link; stacks "
                        "follow on stderr", path)
            (fallback or sys.stderr).write(text)
            return False
        f.truncate(0)
        f.write(text)
    return True


def install(loop: asyncio.AbstractEventLoop, path: Path = DUMP_PATH) -> None:
    """Handle SIGUSR2 on `loop` (a process's main loop: entry points only)."""

    def dump() -> None:
        if write(path, render(loop)):
            log.info("Wrote: %s", path)  # the reference's words

    loop.add_signal_handler(signal.SIGUSR2, dump)
