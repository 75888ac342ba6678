"""The kernel's boot id: a checkpoint from another boot describes devices that no longer exist."""

from __future__ import annotations

import os
from pathlib import Path

from api import names


class BootIdError(Exception):
    """The boot id file is unreadable or empty; the agent cannot trust its checkpoint."""


def read_boot_id(path: str | os.PathLike[str] = names.DEFAULT_BOOT_ID_FILE) -> str:
    """The trimmed content of the boot id file (`--boot-id-path`)."""
    try:
        text = Path(path).read_bytes().decode("utf-8", "replace")
    except OSError as err:
        raise BootIdError(
            f"cannot read the node boot id from {path}: {err.strerror or err} "
            "(it tells a reboot apart from a restart; point --boot-id-path at a readable file)"
        ) from None
    boot_id = text.strip()
    if not boot_id:
        raise BootIdError(f"the node boot id file {path} is empty")
    return boot_id
