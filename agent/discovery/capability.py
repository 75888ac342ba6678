"""The fabric-imex-mgmt capability: the device node an IMEX daemon needs to manage the fabric.

The driver publishes the node's minor and mode in a `Key: value` file under
/proc/driver/nvidia/capabilities; the major is that of `nvidia-caps` in /proc/devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agent.discovery.devnode import MINOR_MAX, CharDevice
from agent.discovery.discovery_error import DiscoveryError
from agent.discovery.procdevices import read_char_major
from api import names

# The capability node as CDI injects it into a daemon container.
CapDevice = CharDevice

KEY_MINOR: Final = "DeviceFileMinor"
KEY_MODE: Final = "DeviceFileMode"
KEY_MODIFY: Final = "DeviceFileModify"
MODE_MAX: Final = 0o7777
_INT_MAX: Final = 2**31 - 1


@dataclass(frozen=True)
class CapabilityInfo:
    """The numbers of one capability file (all written by the driver in decimal)."""

    minor: int
    mode: int
    modify: int = 0


def fabric_imex_mgmt_path(container_driver_root: Path | str, *, alt_proc_devices: bool) -> Path:
    """Where to read the capability: the host's /proc, or under the driver root in mock mode.

    With ALT_PROC_DEVICES_PATH set (mock/CI) the reference reads it below the container
    driver root, so a fake driver root can provide it.
    """
    cap = Path(names.FABRIC_IMEX_MGMT_CAPABILITY)
    if alt_proc_devices:
        return Path(container_driver_root) / cap.relative_to("/")
    return cap


def _decimal(source: str, key: str, value: str, maximum: int) -> int:
    if not (value.isascii() and value.isdigit()) or len(value) > 10 or int(value) > maximum:
        raise DiscoveryError(
            f"{source}: {key} is {value[:40]!r}, expected a decimal number up to {maximum}; "
            f"the file is not an NVIDIA capability file (check the driver installation)"
        )
    return int(value)


def parse_capability(text: str, source: str = "capability file") -> CapabilityInfo:
    """Parse `Key: value` lines; other lines and keys are ignored, as the driver may add some."""
    fields: dict[str, str] = {}
    for line in text.split("\n"):
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    for key in (KEY_MINOR, KEY_MODE):
        if key not in fields:
            raise DiscoveryError(
                f"{source} has no {key} line; the file is not an NVIDIA capability file "
                f"(check the driver installation and that /proc/driver/nvidia is the host's)"
            )
    return CapabilityInfo(
        minor=_decimal(source, KEY_MINOR, fields[KEY_MINOR], MINOR_MAX),
        mode=_decimal(source, KEY_MODE, fields[KEY_MODE], MODE_MAX),
        modify=_decimal(source, KEY_MODIFY, fields.get(KEY_MODIFY, "0"), _INT_MAX),
    )


def read_fabric_imex_mgmt(cap_path: Path | str, proc_devices_path: Path | str) -> CapDevice:
    """The fabric-imex-mgmt device node; DiscoveryError if the file or the major is missing.

    Used per daemon claim, so the caller treats the error as retryable rather than fatal.
    """
    try:
        text = Path(cap_path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise DiscoveryError(
            f"cannot read the fabric-imex-mgmt capability {cap_path}: {e.strerror or e}; the "
            f"NVIDIA driver on this node does not expose IMEX management (install a driver "
            f"with IMEX support, >= {names.MIN_DRIVER_VERSION_DNS_NAMES})"
        ) from e
    info = parse_capability(text, str(cap_path))
    major = read_char_major(proc_devices_path, names.PROC_DEVICES_NVIDIA_CAPS)
    return CharDevice(
        path=names.nvcap_device_path(info.minor),
        major=major,
        minor=info.minor,
        file_mode=info.mode,
        modify=info.modify,
    )
