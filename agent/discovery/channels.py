"""IMEX channel device nodes: `/dev/nvidia-caps-imex-channels/channel<i>`, one minor per channel."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agent.discovery.devnode import MINOR_MAX, CharDevice
from agent.discovery.procdevices import INT32_MAX, read_char_major
from api import names

# A channel node as CDI injects it.
ChannelNode = CharDevice

CHANNEL_FILE_MODE: Final = 0o666


@dataclass(frozen=True)
class ImexChannels:
    """The node's IMEX channels: a fixed count (the reference hard-codes 2048) under one major."""

    major: int
    count: int = names.MAX_IMEX_CHANNELS

    def __post_init__(self) -> None:
        if isinstance(self.major, bool) or not 0 <= self.major <= INT32_MAX:
            raise ValueError(f"IMEX channel major must be in 0..{INT32_MAX}, got {self.major!r}")
        if isinstance(self.count, bool) or not 1 <= self.count <= MINOR_MAX + 1:
            raise ValueError(
                f"IMEX channel count must be in 1..{MINOR_MAX + 1}, got {self.count!r}"
            )

    @classmethod
    def from_proc_devices(
        cls, proc_devices_path: Path | str, count: int = names.MAX_IMEX_CHANNELS
    ) -> ImexChannels:
        """Read the major from /proc/devices; DiscoveryError if the driver has no channels."""
        return cls(read_char_major(proc_devices_path, names.PROC_DEVICES_IMEX_CHANNELS), count)

    def ids(self) -> range:
        return range(self.count)

    def device_node(self, channel: int) -> ChannelNode:
        """The node for channel `channel` (minor = channel id, mode 0666)."""
        if isinstance(channel, bool) or not isinstance(channel, int):
            raise TypeError(f"IMEX channel id must be an int, got {channel!r}")
        if not 0 <= channel < self.count:
            raise ValueError(f"IMEX channel {channel} is out of range 0..{self.count - 1}")
        return CharDevice(
            path=names.channel_device_path(channel),
            major=self.major,
            minor=channel,
            file_mode=CHANNEL_FILE_MODE,
        )
