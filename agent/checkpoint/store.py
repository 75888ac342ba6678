"""The checkpoint file on disk: read it, replace it atomically, reconcile it with the boot.

A crash (or `kill -9`) at any point of a write leaves either the old file or the new one,
never a mix (`cdi.atomic.atomic_write`): the new content goes to a temp file in the same
directory, is fsynced, then renamed over the old one, and the directory is fsynced so the
rename itself survives a power loss. Mutations are read-modify-write by the caller under
the node lock.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from agent.checkpoint import codec
from agent.checkpoint.checkpoint_errors import CheckpointCorruptError, CheckpointReadError
from agent.checkpoint.model import Checkpoint
from cdi.atomic import atomic_write
from runtime.logsetup import vlog

log = logging.getLogger(__name__)

FILE_MODE = 0o600


class CheckpointStore:
    """One checkpoint file (`PLUGIN_DIR/checkpoint.json`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read(self) -> Checkpoint | None:
        """The stored checkpoint, or None when there is no file.

        Raises `CheckpointCorruptError` (naming the file) for content that is not a valid
        checkpoint and `CheckpointReadError` when the file cannot be read at all.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise CheckpointReadError(
                f"cannot read checkpoint {self.path}: {err.strerror or err}"
            ) from None
        try:
            return codec.decode(data)
        except CheckpointCorruptError as err:
            raise err.at(self.path) from None

    def write(self, cp: Checkpoint) -> None:
        """Replace the file with `cp` atomically and durably (mode 0600).

        The temp file is `.checkpoint.json.<random>.tmp` next to it (the plugin removes
        leftovers of a crash at start-up).
        """
        data = codec.encode(cp)
        self.path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        atomic_write(self.path, data, FILE_MODE)
        vlog(log, 6, "checkpoint file %s updated (%d claims)", self.path, len(cp.claims))

    def reconcile_boot_id(self, current_boot_id: str) -> Checkpoint:
        """The checkpoint valid for this boot, written back when it changed.

        No file or another boot's file -> a fresh empty checkpoint for this boot (a reboot
        undid every preparation); a file without boot id (older driver) -> keep its claims
        and record this boot; same boot -> as is. A corrupt file raises: fatal at startup.
        The same rules as the reference's `NewDeviceState`
        (https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/device_state.go).
        """
        if not current_boot_id:
            raise ValueError("current boot id must not be empty")
        cp = self.read()
        if cp is not None and cp.boot_id == current_boot_id:
            return cp
        if cp is not None and not cp.boot_id:
            log.info("checkpoint %s has no boot id: recording %s", self.path, current_boot_id)
            cp.boot_id = current_boot_id
        else:
            if cp is not None:
                log.info(
                    "checkpoint %s is from boot %s, this is boot %s: discarding its %d "
                    "claim entries",
                    self.path,
                    cp.boot_id,
                    current_boot_id,
                    len(cp.claims),
                )
            cp = Checkpoint(boot_id=current_boot_id)
        self.write(cp)
        return cp
