"""Crash-safe file replacement, because a runtime may read a spec while we rewrite it.

Readers see either the old file or the new one, never a torn write, and once a call
returns the change survives a power cut.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Persist the directory entry changes (create, rename, unlink) made in `directory`."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` and permissions `mode` in one atomic step.

    The temporary file is dot-prefixed in the same directory, so directory scanners
    that skip hidden files never see it and the final rename cannot cross filesystems.
    It is removed if anything fails, leaving the previous file untouched.
    """
    directory = path.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            # chmod before fsync so the mode is as durable as the content; fchmod
            # also ignores the umask, unlike a mode passed at creation.
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        tmp.replace(path)
    except BaseException:
        # Never let a failed cleanup hide the error that stopped the write.
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_directory(directory)


def remove_durably(path: Path) -> bool:
    """Delete `path` if present and persist the deletion; returns whether it existed.

    A missing file is not an error: removal is retried by reconcile loops, and the
    second attempt must succeed.
    """
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_directory(path.parent)
    return True


def make_dirs(path: Path, mode: int) -> None:
    """`path` and its missing parents, each created with `mode`: `mkdir(parents=True)`
    gives the parents 0777 less the process umask, which the caller does not control."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(mode=mode, exist_ok=True)
