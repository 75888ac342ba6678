"""Crash-safe file replacement, because a runtime may read a spec while we rewrite it, and
symlink-safe file access, because some of the directories root writes in are writable by
pods (a domain directory is every daemon pod's `/imexd`).

Readers see either the old file or the new one, never a torn write, and once a call
returns the change survives a power cut. Every operation works relative to a descriptor of
the parent directory opened without following a symlink, never follows a symlink in the
file's own name, and creates temporary files exclusively under unpredictable names, so a
link planted in the directory can neither redirect a write or a chmod nor leak what it
points to through a read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_ATTEMPTS = 16


class NotRegularFileError(OSError):
    """The name is a symlink, a FIFO, a device or a directory, where a file was expected."""


@contextlib.contextmanager
def directory_fd(directory: Path) -> Iterator[int]:
    """A descriptor of `directory`; ELOOP/ENOTDIR if its last component is a symlink."""
    fd = os.open(directory, _NOFOLLOW_DIR)
    try:
        yield fd
    finally:
        os.close(fd)


def read_file(path: Path, limit: int = 16 * 1024 * 1024) -> bytes:
    """The bytes of the regular file `path` (at most `limit`).

    FileNotFoundError if it is missing; NotRegularFileError if it is a symlink or anything
    but a regular file (a FIFO would block the reader, a device would be read as root)."""
    with directory_fd(path.parent) as dfd:
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dfd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise NotRegularFileError(errno.ELOOP, "is a symlink", str(path)) from None
            raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path))
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    """Persist the directory entry changes (create, rename, unlink) made in `directory`."""
    with directory_fd(directory) as fd:
        os.fsync(fd)


def _create_temp(dfd: int, name: str) -> tuple[int, str]:
    """A new file `.<name>.<random>.tmp` (O_EXCL: a planted link makes it fail, not follow)."""
    for _ in range(_TEMP_ATTEMPTS):
        tmp = f".{name}.{secrets.token_urlsafe(6)}.tmp"  # as long as mkstemp's names
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            return os.open(tmp, flags, 0o600, dir_fd=dfd), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", name)


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` and permissions `mode` in one atomic step.

    The temporary file is dot-prefixed in the same directory, so directory scanners
    that skip hidden files never see it and the final rename cannot cross filesystems.
    It is removed if anything fails, leaving the previous file untouched. A symlink at
    `path` is replaced by the file, never written through.
    """
    with directory_fd(path.parent) as dfd:
        fd, tmp = _create_temp(dfd, path.name)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                # chmod before fsync so the mode is as durable as the content; fchmod
                # also ignores the umask, unlike a mode passed at creation.
                os.fchmod(handle.fileno(), mode)
                os.fsync(handle.fileno())
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            # Never let a failed cleanup hide the error that stopped the write.
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        os.fsync(dfd)


def remove_durably(path: Path) -> bool:
    """Delete `path` if present and persist the deletion; returns whether it existed.

    A missing file is not an error: removal is retried by reconcile loops, and the
    second attempt must succeed.
    """
    try:
        with directory_fd(path.parent) as dfd:
            os.unlink(path.name, dir_fd=dfd)
            os.fsync(dfd)
    except FileNotFoundError:  # the file, or its directory, is not there
        return False
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


def write_if_changed(path: Path, data: bytes, mode: int = 0o644) -> bool:
    """`atomic_write` unless `path` already holds exactly `data` (a link or anything but a
    regular file there counts as different, and is replaced); True if it wrote."""
    try:
        if read_file(path) == data:
            return False
    except (FileNotFoundError, NotRegularFileError):
        pass
    atomic_write(path, data, mode)
    return True
