"""Why a checkpoint could not be used, worded for the operator who has to act on it."""

from __future__ import annotations

from os import PathLike

_CONSEQUENCE = (
    "it records which claims are prepared on this node; restore it from backup or, if no "
    "workload pods run on this node, move it aside and restart"
)


class CheckpointError(Exception):
    """Any failure to read the checkpoint; the agent must not start (or prepare) without it."""


class CheckpointCorruptError(CheckpointError):
    """The file exists but is not a valid checkpoint (bad JSON, checksum mismatch, truncated).

    Never answered by silently starting empty: the file is the only record of what is
    prepared on the node, so the message names the file and the two ways out.
    """

    def __init__(self, reason: str, path: str | PathLike[str] | None = None) -> None:
        self.reason = reason
        self.path = None if path is None else str(path)
        # "checkpoint is corrupted" first: the reference's words, which its upgrade guide
        # tells admins to grep for.
        where = "" if self.path is None else f" ({self.path})"
        super().__init__(f"checkpoint is corrupted{where}: {reason}: {_CONSEQUENCE}")

    def at(self, path: str | PathLike[str]) -> CheckpointCorruptError:
        """The same error, naming the file it came from."""
        return CheckpointCorruptError(self.reason, path)


class CheckpointReadError(CheckpointError):
    """The file exists but cannot be read (permissions, I/O error, a directory in its place)."""
