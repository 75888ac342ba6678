"""/proc/devices and the fabric-imex-mgmt capability file (`agent.discovery`).

Properties: for any file content (random text, random bytes, mutated real files),
`char_major` never raises and answers None or an int32 that is really on a
`<major> <name>` line of the character section; `read_char_major`,
`parse_capability` and `read_fabric_imex_mgmt` return in-range numbers or raise
`DiscoveryError` with a one-line message naming the file.
"""

from __future__ import annotations

import pytest
from fuzz_support import FUZZ, mutated, outcome
from hypothesis import example, given
from hypothesis import strategies as st

from agent.discovery import (
    DiscoveryError,
    char_major,
    parse_capability,
    read_char_major,
    read_fabric_imex_mgmt,
)
from agent.discovery.capability import MODE_MAX
from agent.discovery.devnode import MINOR_MAX

CAPS = "nvidia-caps"
CHANNELS = "nvidia-caps-imex-channels"
PROC_DEVICES = (
    "Character devices:\n  1 mem\n  4 /dev/vc/0\n195 nvidia\n234 nvidia-caps-imex-channels\n"
    "235 nvidia-caps\n\nBlock devices:\n  8 sd\n259 blkext\n236 nvidia-caps\n"
)
CAPABILITY = "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"

line_parts = st.sampled_from(
    [CAPS, CHANNELS, "nvidia", "Character devices:", "Block devices:", " ", "\t", "\n", "\r",
     "235", "-1", "2147483648", "0" * 30 + "7", "\u0663", "9" * 5000]
)
proc_like = st.lists(line_parts | st.text(max_size=8), max_size=25).map("".join)


def check_major(text: str, name: str) -> None:
    major = char_major(text, name)  # documented never to raise
    if major is not None:
        assert 0 <= major <= 2**31 - 1
        chars = text.split("Character devices:", 1)[1].split("Block devices:", 1)[0]
        assert name in chars


@FUZZ
@given(proc_like | st.text(max_size=80), st.sampled_from([CAPS, CHANNELS]))
@example("Character devices:\n" + "9" * 5000 + " nvidia-caps\n", CAPS)
@example("Character devices:\n\u0663 nvidia-caps\n", CAPS)
def test_char_major_any_text(text, name):
    check_major(text, name)


@FUZZ
@given(mutated(PROC_DEVICES), st.sampled_from([CAPS, CHANNELS]))
def test_read_char_major_mutated_file(tmp_path_factory, data, name):
    path = tmp_path_factory.mktemp("proc") / "devices"
    path.write_bytes(data)
    major, err = outcome(lambda: read_char_major(path, name), DiscoveryError)
    if err is not None:
        assert str(path) in str(err)
    else:
        assert major == char_major(data.decode("utf-8", errors="replace"), name)


cap_lines = st.lists(
    st.tuples(
        st.sampled_from(["DeviceFileMinor", "DeviceFileMode", "DeviceFileModify", "Other", ""]),
        st.sampled_from([":", ": ", " : ", "=", ""]),
        st.sampled_from(["1", "0", "256", "4095", "4096", "1048575", "1048576", "-1", "0x10",
                         "99999999999", "1.5", "", " 7 ", "\u0661", "9" * 5000])
        | st.text(max_size=6),
    ).map("".join),
    max_size=6,
).map("\n".join)


@FUZZ
@given(cap_lines | st.text(max_size=60))
@example("DeviceFileMinor: 9999999999\nDeviceFileMode: 1")
def test_parse_capability(text):
    info, _ = outcome(lambda: parse_capability(text, "cap"), DiscoveryError)
    if info is not None:
        assert 0 <= info.minor <= MINOR_MAX
        assert 0 <= info.mode <= MODE_MAX
        assert 0 <= info.modify <= 2**31 - 1


@FUZZ
@given(mutated(CAPABILITY), mutated(PROC_DEVICES))
def test_read_fabric_imex_mgmt_mutated_files(tmp_path_factory, cap, devices):
    root = tmp_path_factory.mktemp("caps")
    (root / "cap").write_bytes(cap)
    (root / "devices").write_bytes(devices)
    node, _ = outcome(
        lambda: read_fabric_imex_mgmt(root / "cap", root / "devices"), DiscoveryError
    )
    if node is not None:
        assert node.path == f"/dev/nvidia-caps/nvidia-cap{node.minor}"
        assert 0 <= node.major <= 2**31 - 1


def test_binary_garbage_files(tmp_path):
    (tmp_path / "cap").write_bytes(b"\xff\xfe\x00DeviceFileMinor:\xff1\n")
    (tmp_path / "devices").write_bytes(b"\x00" * 100)
    with pytest.raises(DiscoveryError, match="no DeviceFileMinor line"):
        read_fabric_imex_mgmt(tmp_path / "cap", tmp_path / "devices")
    with pytest.raises(DiscoveryError, match="no \"nvidia-caps\" character device"):
        read_char_major(tmp_path / "devices", CAPS)


@pytest.mark.parametrize(
    "text, name, expected",
    [
        ("Character devices:\n" + "9" * 5000 + " nvidia-caps\n", CAPS, None),  # no int() blow-up
        ("Character devices:\n\u0663 nvidia-caps\n", CAPS, None),  # Arabic-Indic digit
        ("Block devices:\n235 nvidia-caps\n", CAPS, None),  # only block devices
        ("Character devices:\n235 nvidia-caps-imex-channels\n", CAPS, None),  # prefix only
        ("Character devices:\r\n235 nvidia-caps\r\n", CAPS, None),  # CRLF: name is "nvidia-caps\r"
    ],
)
def test_nasty_proc_devices(text, name, expected):
    assert char_major(text, name) == expected
