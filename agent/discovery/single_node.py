"""Single-node NVLink detection for gate FabricManagerPartitioning.

On an NVSwitch system partitioned by Fabric Manager, GPUs register with the fabric only when
their partition is activated, so an unregistered GPU there is not a fault.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

NVSWITCH_DEVICES: Final = "proc/driver/nvidia-nvswitch/devices"
INFINIBAND_CLASS: Final = "sys/class/infiniband"
SWITCH_MANAGEMENT_MARK: Final = b"SW_MNG"


def _has_entries(directory: Path) -> bool:
    try:
        return any(True for _ in directory.iterdir())
    except OSError:
        return False


def _managed_switch_port(infiniband: Path) -> bool:
    try:
        ports = sorted(infiniband.iterdir())
    except OSError:
        return False
    for port in ports:
        try:
            vpd = (port / "device" / "vpd").read_bytes()
        except OSError:  # missing, or a device whose VPD cannot be read
            continue
        if SWITCH_MANAGEMENT_MARK in vpd:
            return True
    return False


def is_single_node_nvlink(device_root: Path | str) -> bool:
    """True if the node has local NVSwitches or a switch-management InfiniBand port.

    Looked up under the dev root; unreadable or missing places count as absent.
    """
    root = Path(device_root)
    return _has_entries(root / NVSWITCH_DEVICES) or _managed_switch_port(root / INFINIBAND_CLASS)
