"""Locating driver files (NVML library, nvidia-smi, IMEX binaries) under a driver root.

The host's driver root is mounted into the agent's container, and distributions place
libraries and binaries in different directories, so each name has a list of places to try.

Like the reference's findFile, NAME under ROOT tries `ROOT/NAME`, then `ROOT/<dir>/NAME`
for each search dir, resolves symlinks and keeps the first regular file. Unlike it, every
link is resolved inside ROOT, as `chroot ROOT readlink -f` would: the reference resolves
absolute link targets against the plugin container's own root, so a host link
`/usr/lib64/libnvidia-ml.so.1 -> /usr/lib64/libnvidia-ml.so.570.86` is not found under
`/driver-root`, and a link could point out of the root.
"""

from __future__ import annotations

import stat
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agent.discovery.discovery_error import DiscoveryError
from api import names

NVML_LIBRARY: Final = "libnvidia-ml.so.1"
NVIDIA_SMI: Final = "nvidia-smi"

LIBRARY_SEARCH_DIRS: Final = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
)
BINARY_SEARCH_DIRS: Final = ("/opt/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")

NVML_LIBRARY_DIRS: Final = LIBRARY_SEARCH_DIRS
NVIDIA_SMI_DIRS: Final = BINARY_SEARCH_DIRS
IMEX_CTL_DIRS: Final = BINARY_SEARCH_DIRS
IMEX_DIRS: Final = BINARY_SEARCH_DIRS

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


def candidate_paths(name: str, search_dirs: Sequence[str]) -> list[str]:
    """The in-root paths tried for `name`, in order: `/NAME`, then `<dir>/NAME`."""
    return ["/" + name] + [f"{d.rstrip('/')}/{name}" for d in search_dirs]


def resolve_in_root(root: Path | str, path: str) -> Path | None:
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


def find_file(root: Path | str, name: str, search_dirs: Sequence[str]) -> FoundFile | None:
    """The first of `candidate_paths` that resolves (inside `root`) to a regular file.

    Directories, dangling or looping links and unreadable places are skipped; None when
    no candidate is a regular file.
    """
    for path in candidate_paths(name, search_dirs):
        real = resolve_in_root(root, path)
        if real is None:
            continue
        try:
            if stat.S_ISREG(real.stat().st_mode):
                return FoundFile(path=path, real_path=real)
        except OSError:
            continue
    return None


def require_file(root: Path | str, name: str, search_dirs: Sequence[str]) -> Path:
    """`find_file`'s file as an absolute path without links, for files the agent must have.

    Raises DiscoveryError starting with `error locating "NAME"` when there is none.
    """
    found = find_file(root, name, search_dirs)
    if found is not None:
        return found.real_path.resolve()
    root = Path(root)
    places = ", ".join(
        str((root / path.lstrip("/")).parent) for path in candidate_paths(name, search_dirs)
    )
    raise DiscoveryError(
        f'error locating "{name}": no regular file of that name in {places}; check that the '
        f"host's NVIDIA driver root is mounted at {root} (--container-driver-root)"
    )


def dev_root(container_driver_root: Path | str) -> Path:
    """The reference's devRoot, where device nodes and host binaries live: the driver root
    if it has a `dev` directory, else the container's own `/` (a driver installed on the
    host itself)."""
    root = Path(container_driver_root)
    return root if (root / "dev").is_dir() else Path("/")


def find_nvml_library(container_driver_root: Path | str) -> Path:
    return require_file(container_driver_root, NVML_LIBRARY, NVML_LIBRARY_DIRS)


def find_nvidia_smi(container_driver_root: Path | str) -> Path:
    return require_file(container_driver_root, NVIDIA_SMI, NVIDIA_SMI_DIRS)


def find_imex_ctl(device_root: Path | str) -> Path:
    """nvidia-imex-ctl is looked up under the dev root (host-managed prepare only)."""
    return require_file(device_root, names.IMEX_CTL_BINARY, IMEX_CTL_DIRS)


def find_imex(root: Path | str) -> Path:
    return require_file(root, names.IMEX_BINARY, IMEX_DIRS)
