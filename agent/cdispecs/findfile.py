"""Finding a driver file under a driver root the way the reference's findFile does, but safely.

The reference tries `ROOT/NAME`, then `ROOT/<dir>/NAME` for each search dir, resolves
symlinks and keeps the first regular file. It resolves absolute link targets against the
plugin container's own root, so a host link `/usr/lib64/libnvidia-ml.so.1 ->
/usr/lib64/libnvidia-ml.so.570.86` is not found under `/driver-root`. We resolve every
link inside ROOT instead, as `chroot ROOT readlink -f` would.
"""

from __future__ import annotations

import stat
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BINARY_DIRS: tuple[str, ...] = ("/opt/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")
LIBRARY_DIRS: tuple[str, ...] = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
)
# Linux gives up after 40 links (ELOOP); so do we.
_MAX_LINKS = 40


@dataclass(frozen=True)
class FoundFile:
    """A file found under a root.

    `path` is where it was looked up, as seen inside the root (`/usr/bin/nvidia-imex`);
    `real_path` is the regular file it resolves to, as a path in this process's
    filesystem (`/driver-root/usr/bin/nvidia-imex`).
    """

    path: str
    real_path: Path


def candidate_paths(name: str, dirs: Sequence[str]) -> list[str]:
    """The in-root paths tried for `name`, in order: `/NAME`, then `<dir>/NAME`."""
    return ["/" + name] + [f"{d.rstrip('/')}/{name}" for d in dirs]


def resolve_in_root(root: Path, path: str) -> Path | None:
    """`path` (inside `root`) with every symlink resolved inside `root`, or None.

    `..` never climbs above `root`, and absolute link targets start again at `root`.
    None when a component is missing, unreadable or the links loop.
    """
    base = Path(root)
    todo = deque(part for part in path.split("/") if part)
    done: list[str] = []
    links = 0
    while todo:
        part = todo.popleft()
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        current = base.joinpath(*done, part)
        try:
            mode = current.lstat().st_mode
            if not stat.S_ISLNK(mode):
                done.append(part)
                continue
            links += 1
            if links > _MAX_LINKS:
                return None
            target = str(current.readlink())
        except OSError:
            return None
        if target.startswith("/"):
            done = []
        todo.extendleft(reversed([p for p in target.split("/") if p]))
    return base.joinpath(*done)


def find_file(root: Path, name: str, dirs: Sequence[str]) -> FoundFile | None:
    """The first candidate of `candidate_paths` that resolves to a regular file, or None."""
    for path in candidate_paths(name, dirs):
        real = resolve_in_root(root, path)
        if real is None:
            continue
        try:
            if stat.S_ISREG(real.stat().st_mode):
                return FoundFile(path=path, real_path=real)
        except OSError:
            continue
    return None
