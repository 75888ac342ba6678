"""IMEX channel nodes and the fabric-imex-mgmt capability node."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.discovery import (
    CharDevice,
    DiscoveryError,
    ImexChannels,
    char_device_numbers,
    fabric_imex_mgmt_path,
    parse_capability,
    read_fabric_imex_mgmt,
)
from api import names

DEVICES = "Character devices:\n195 nvidia\n235 nvidia-caps-imex-channels\n236 nvidia-caps\n"
CAP = "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"


@pytest.fixture
def proc_devices(tmp_path: Path) -> Path:
    path = tmp_path / "devices"
    path.write_text(DEVICES)
    return path


def test_channels_from_proc_devices(proc_devices):
    channels = ImexChannels.from_proc_devices(proc_devices)
    assert channels.major == 235 and channels.count == names.MAX_IMEX_CHANNELS == 2048
    assert len(channels.ids()) == 2048
    node = channels.device_node(7)
    assert node == CharDevice("/dev/nvidia-caps-imex-channels/channel7", 235, 7, 0o666)
    assert node.file_mode == 438 and node.type == "c" and node.modify == 0
    assert channels.device_node(2047).minor == 2047


def test_channels_from_proc_devices_without_imex(tmp_path):
    path = tmp_path / "devices"
    path.write_text("Character devices:\n236 nvidia-caps\n")
    with pytest.raises(DiscoveryError, match="no IMEX channel support"):
        ImexChannels.from_proc_devices(path)


@pytest.mark.parametrize("channel", [-1, 2048, 10**9])
def test_channel_out_of_range(channel):
    with pytest.raises(ValueError, match=r"out of range 0\.\.2047"):
        ImexChannels(235).device_node(channel)


@pytest.mark.parametrize("channel", [True, 1.0, "1", None])
def test_channel_wrong_type(channel):
    with pytest.raises(TypeError):
        ImexChannels(235).device_node(channel)


@pytest.mark.parametrize(
    ("major", "count"), [(-1, 2048), (2**31, 2048), (235, 0), (235, 2**20 + 1), (True, 1)]
)
def test_channels_bounds(major, count):
    with pytest.raises(ValueError):
        ImexChannels(major, count)


def test_parse_capability():
    info = parse_capability(CAP)
    assert (info.minor, info.mode, info.modify) == (1, 0o400, 1)
    # Extra keys and lines are ignored, spaces trimmed, value split at the first colon only.
    info = parse_capability("Junk\nOther: a:b\n DeviceFileMinor :  12 \nDeviceFileMode: 292\n")
    assert (info.minor, info.mode, info.modify) == (12, 0o444, 0)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("DeviceFileMode: 256\n", "no DeviceFileMinor line"),
        ("DeviceFileMinor: 1\n", "no DeviceFileMode line"),
        ("DeviceFileMinor: x\nDeviceFileMode: 256\n", "DeviceFileMinor is 'x'"),
        ("DeviceFileMinor: -1\nDeviceFileMode: 256\n", "DeviceFileMinor is '-1'"),
        ("DeviceFileMinor: 1\nDeviceFileMode: 0o400\n", "DeviceFileMode is '0o400'"),
        ("DeviceFileMinor: 1\nDeviceFileMode: 99999\n", "DeviceFileMode is '99999'"),
        ("DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: y\n", "DeviceFileModify"),
        ("DeviceFileMinor: 1048576\nDeviceFileMode: 256\n", "up to 1048575"),
    ],
)
def test_parse_capability_errors(text, match):
    with pytest.raises(DiscoveryError, match=match):
        parse_capability(text, "cap")


def test_read_fabric_imex_mgmt(tmp_path, proc_devices):
    cap = tmp_path / "fabric-imex-mgmt"
    cap.write_text(CAP)
    node = read_fabric_imex_mgmt(cap, proc_devices)
    assert node == CharDevice("/dev/nvidia-caps/nvidia-cap1", 236, 1, 0o400, 1)
    assert node.path == names.nvcap_device_path(1)


def test_read_fabric_imex_mgmt_missing_file(tmp_path, proc_devices):
    with pytest.raises(DiscoveryError, match="cannot read the fabric-imex-mgmt capability"):
        read_fabric_imex_mgmt(tmp_path / "absent", proc_devices)


def test_read_fabric_imex_mgmt_missing_major(tmp_path):
    cap = tmp_path / "fabric-imex-mgmt"
    cap.write_text(CAP)
    devices = tmp_path / "devices"
    devices.write_text("Character devices:\n235 nvidia-caps-imex-channels\n")
    with pytest.raises(DiscoveryError, match='no "nvidia-caps" character device'):
        read_fabric_imex_mgmt(cap, devices)


def test_fabric_imex_mgmt_path():
    assert fabric_imex_mgmt_path("/driver-root", alt_proc_devices=False) == Path(
        "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
    )
    assert fabric_imex_mgmt_path("/driver-root", alt_proc_devices=True) == Path(
        "/driver-root/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
    )


def test_char_device_numbers(tmp_path):
    null = char_device_numbers(Path("/dev/null"))
    assert null is not None and (null.major, null.minor) == (1, 3)
    assert null.path == "/dev/null" and null.type == "c"
    (tmp_path / "f").write_text("x")
    assert char_device_numbers(tmp_path / "f") is None
    assert char_device_numbers(tmp_path) is None
    assert char_device_numbers(tmp_path / "missing") is None
