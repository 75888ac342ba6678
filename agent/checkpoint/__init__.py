"""The node agent's crash-consistent record of prepared claims.

The file is the reference driver's `checkpoint.json`, byte for byte (same JSON, same
checksums), so a node can switch between the reference driver and ours in place.
"""

from agent.checkpoint.bootid import BootIdError, read_boot_id
from agent.checkpoint.checkpoint_errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointReadError,
)
from agent.checkpoint.codec import decode, encode
from agent.checkpoint.model import (
    TOMBSTONE_TTL,
    Checkpoint,
    ClaimEntry,
    ClaimState,
    PreparedDevice,
    PreparedGroup,
    non_admin_devices,
    same_status,
)
from agent.checkpoint.store import CheckpointStore

__all__ = [
    "TOMBSTONE_TTL",
    "BootIdError",
    "Checkpoint",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointReadError",
    "CheckpointStore",
    "ClaimEntry",
    "ClaimState",
    "PreparedDevice",
    "PreparedGroup",
    "decode",
    "encode",
    "non_admin_devices",
    "read_boot_id",
    "same_status",
]
