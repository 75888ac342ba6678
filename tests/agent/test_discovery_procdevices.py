"""/proc/devices parsing: the character section only, exact names, int32 majors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.discovery import DiscoveryError, char_major, read_char_major
from api import names

IMEX = names.PROC_DEVICES_IMEX_CHANNELS
CAPS = names.PROC_DEVICES_NVIDIA_CAPS

REAL = """Character devices:
  1 mem
  4 /dev/vc/0
 10 misc
195 nvidia
235 nvidia-caps-imex-channels
236 nvidia-caps
509 nvidia-nvswitch

Block devices:
  7 loop
  8 sd
"""


def test_real_table():
    assert char_major(REAL, IMEX) == 235
    assert char_major(REAL, CAPS) == 236
    assert char_major(REAL, "misc") == 10
    assert char_major(REAL, "nvidia") == 195


def test_prefix_name_never_matches_longer_name():
    text = "Character devices:\n235 nvidia-caps-imex-channels\n\nBlock devices:\n"
    assert char_major(text, CAPS) is None
    assert char_major(text, "nvidia-caps-imex") is None
    assert char_major("Character devices:\n236 nvidia-caps\n", IMEX) is None


def test_longer_name_does_not_match_shorter_line():
    assert char_major("Character devices:\n236 nvidia-caps-x\n", CAPS) is None


def test_block_section_ignored():
    text = "Character devices:\n  1 mem\n\nBlock devices:\n259 nvidia-caps-imex-channels\n"
    assert char_major(text, IMEX) is None


def test_no_character_header():
    assert char_major("235 nvidia-caps-imex-channels\n", IMEX) is None
    assert char_major("", IMEX) is None


def test_first_match_wins_and_missing_block_header_is_fine():
    text = "Character devices:\n100 nvidia-caps\n200 nvidia-caps"
    assert char_major(text, CAPS) == 100


@pytest.mark.parametrize(
    "line",
    [
        "abc nvidia-caps",
        "-5 nvidia-caps",
        "1_0 nvidia-caps",
        "٣ nvidia-caps",
        "12  nvidia-caps",
        "12\tnvidia-caps",
        "x12 nvidia-caps",
        "12 nvidia-caps ",
        "12 nvidia-caps\r",
        "nvidia-caps",
    ],
)
def test_malformed_lines_are_skipped(line):
    assert char_major(f"Character devices:\n{line}\n7 other\n", CAPS) is None
    # ...and a later well-formed line is still found.
    assert char_major(f"Character devices:\n{line}\n7 nvidia-caps\n", CAPS) == 7


def test_int32_range():
    assert char_major("Character devices:\n2147483647 nvidia-caps\n", CAPS) == 2**31 - 1
    assert char_major("Character devices:\n0000000000000236 nvidia-caps\n", CAPS) == 236
    assert char_major("Character devices:\n2147483648 nvidia-caps\n", CAPS) is None
    assert char_major("Character devices:\n" + "9" * 5000 + " nvidia-caps\n", CAPS) is None


def test_read_ok(tmp_path):
    path = tmp_path / "devices"
    path.write_text(REAL)
    assert read_char_major(path, IMEX) == 235


def test_read_missing_entry_says_what_to_do(tmp_path):
    path = tmp_path / "devices"
    path.write_text("Character devices:\n195 nvidia\n236 nvidia-caps\n\nBlock devices:\n")
    with pytest.raises(DiscoveryError) as err:
        read_char_major(path, IMEX)
    msg = str(err.value)
    assert f'{path} has no "nvidia-caps-imex-channels" character device' in msg
    assert ">= 570.158.01" in msg and "--proc-devices-path" in msg
    assert "\n" not in msg


def test_read_missing_caps_and_unknown_name(tmp_path):
    path = tmp_path / "devices"
    path.write_text("Character devices:\n\nBlock devices:\n")
    with pytest.raises(DiscoveryError, match='no "nvidia-caps" character device'):
        read_char_major(path, CAPS)
    with pytest.raises(DiscoveryError, match='no "foo" character device'):
        read_char_major(path, "foo")


def test_read_out_of_range(tmp_path):
    path = tmp_path / "devices"
    path.write_text("Character devices:\n4294967296 nvidia-caps-imex-channels\n")
    with pytest.raises(DiscoveryError, match="does not fit in int32"):
        read_char_major(path, IMEX)


def test_read_unreadable(tmp_path):
    with pytest.raises(DiscoveryError, match=r"cannot read .*--proc-devices-path"):
        read_char_major(tmp_path / "absent", IMEX)
    with pytest.raises(DiscoveryError, match="cannot read"):
        read_char_major(tmp_path, IMEX)  # a directory


def test_read_binary_garbage(tmp_path):
    path = tmp_path / "devices"
    path.write_bytes(b"Character devices:\n\xff\xfe 12 nvidia-caps\n12 nvidia-caps\n")
    assert read_char_major(path, CAPS) == 12


@given(text=st.text(), name=st.text(min_size=1))
def test_char_major_never_raises(text, name):
    result = char_major(text, name)
    assert result is None or 0 <= result <= 2**31 - 1


@given(major=st.integers(0, 2**31 - 1), pad=st.sampled_from(["", " ", "  "]))
def test_char_major_finds_any_int32(major, pad):
    text = f"Character devices:\n{pad}{major} {IMEX}\n{pad}{major + 1} {CAPS}\n\nBlock devices:\n"
    assert char_major(text, IMEX) == major
