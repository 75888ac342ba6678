"""Locating driver files (NVML library, nvidia-smi, IMEX binaries) under a driver root.

The host's driver root is mounted into the agent's container, and distributions place
libraries and binaries in different directories, so each name has a list of places to try.
"""

from __future__ import annotations

import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from agent.discovery.errors import DiscoveryError
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


def _candidates(root: Path, name: str, search_dirs: Sequence[str]) -> list[Path]:
    return [root / name, *(root / d.lstrip("/") / name for d in search_dirs)]


def _regular_file(candidate: Path) -> Path | None:
    """The symlink-resolved candidate if it is a regular file.

    Absolute link targets resolve against the real filesystem root, not the driver root,
    exactly as the reference does.
    """
    try:
        resolved = candidate.resolve(strict=True)
        mode = resolved.stat().st_mode
    except (OSError, RuntimeError):  # missing, unreadable, or a symlink loop
        return None
    return resolved if stat.S_ISREG(mode) else None


def find_file(root: Path | str, name: str, search_dirs: Sequence[str]) -> Path:
    """First of ROOT/NAME, ROOT/<dir>/NAME that resolves to a regular file.

    Directories and dangling links are skipped. Raises DiscoveryError starting with
    `error locating "NAME"`.
    """
    root = Path(root)
    for candidate in _candidates(root, name, search_dirs):
        found = _regular_file(candidate)
        if found is not None:
            return found
    places = ", ".join(str(p.parent) for p in _candidates(root, name, search_dirs))
    raise DiscoveryError(
        f'error locating "{name}": no regular file of that name in {places}; check that the '
        f"host's NVIDIA driver root is mounted at {root} (--container-driver-root)"
    )


def dev_root(container_driver_root: Path | str) -> Path:
    """Where device nodes and host binaries live: the driver root if it has a `dev` directory,
    else the container's own `/` (a driver installed on the host itself)."""
    root = Path(container_driver_root)
    return root if (root / "dev").is_dir() else Path("/")


def find_nvml_library(container_driver_root: Path | str) -> Path:
    return find_file(container_driver_root, NVML_LIBRARY, NVML_LIBRARY_DIRS)


def find_nvidia_smi(container_driver_root: Path | str) -> Path:
    return find_file(container_driver_root, NVIDIA_SMI, NVIDIA_SMI_DIRS)


def find_imex_ctl(device_root: Path | str) -> Path:
    """nvidia-imex-ctl is looked up under the dev root (host-managed prepare only)."""
    return find_file(device_root, names.IMEX_CTL_BINARY, IMEX_CTL_DIRS)


def find_imex(root: Path | str) -> Path:
    return find_file(root, names.IMEX_BINARY, IMEX_DIRS)
