"""The checkpoint file on disk: corrupt files are reported, writes are atomic, boots reconcile."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.checkpoint import (
    BootIdError,
    Checkpoint,
    CheckpointCorruptError,
    CheckpointReadError,
    CheckpointStore,
    ClaimEntry,
    ClaimState,
    PreparedDevice,
    PreparedGroup,
    encode,
    read_boot_id,
)

BOOT = "0f2a6e3c-1111-2222-3333-444455556666"
OTHER_BOOT = "9b1d0000-aaaa-bbbb-cccc-ddddeeeeffff"
FRESH = (
    b'{"checksum":1083090442,"v1":{},"v2":{"checksum":2652663942,'
    b'"nodeBootID":"0f2a6e3c-1111-2222-3333-444455556666"}}'
)


def sample(boot_id: str = BOOT) -> Checkpoint:
    device = PreparedDevice("channel", 0, ["channel"], "node-a", "channel-0", ["x/claim=u-c"])
    return Checkpoint(
        boot_id=boot_id,
        claims={
            "done": ClaimEntry(
                ClaimState.PREPARE_COMPLETED,
                {"allocation": {"devices": {"results": []}}},
                [PreparedGroup("channel", "cd", [device])],
                "w",
                "ns",
            ),
            "gone": ClaimEntry(
                ClaimState.PREPARE_ABORTED,
                {},
                aborted_at=datetime(2025, 1, 1, tzinfo=UTC),
            ),
        },
    )


def others_in(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != "checkpoint.json")


# --- read / write ------------------------------------------------------------------------------


def test_missing_file_reads_as_none(tmp_path):
    assert CheckpointStore(tmp_path / "checkpoint.json").read() is None


def test_write_then_read(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoint.json")
    store.write(sample())
    assert store.read() == sample()
    assert (tmp_path / "checkpoint.json").read_bytes() == encode(sample())
    assert others_in(tmp_path) == []


def test_file_mode_is_0600(tmp_path):
    path = tmp_path / "checkpoint.json"
    CheckpointStore(path).write(sample())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_write_creates_the_plugin_directory(tmp_path):
    path = tmp_path / "plugins" / "compute-domain.nvidia.com" / "checkpoint.json"
    CheckpointStore(path).write(Checkpoint(boot_id=BOOT))
    assert path.read_bytes() == FRESH


def test_write_replaces_atomically(tmp_path):
    path = tmp_path / "checkpoint.json"
    store = CheckpointStore(path)
    store.write(Checkpoint(boot_id=BOOT))
    inode = path.stat().st_ino
    store.write(sample())
    assert path.stat().st_ino != inode  # a new file renamed into place, not rewritten in place
    assert store.read() == sample()


def test_crash_before_rename_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.json"
    store = CheckpointStore(path)
    store.write(Checkpoint(boot_id=BOOT))
    seen = []

    def crash(src, dst, **_dir_fds):
        seen.append(Path(src).name)
        raise OSError(5, "simulated crash")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        store.write(sample())
    monkeypatch.undo()
    assert path.read_bytes() == FRESH
    assert others_in(tmp_path) == []
    assert seen and seen[0].startswith(".checkpoint.json.")


def test_crash_while_writing_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.json"
    store = CheckpointStore(path)
    store.write(Checkpoint(boot_id=BOOT))

    def crash(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="No space left"):
        store.write(sample())
    monkeypatch.undo()
    assert path.read_bytes() == FRESH
    assert others_in(tmp_path) == []


def test_unreadable_file_is_a_read_error(tmp_path):
    (tmp_path / "checkpoint.json").mkdir()
    with pytest.raises(CheckpointReadError, match=r"cannot read checkpoint .*checkpoint\.json"):
        CheckpointStore(tmp_path / "checkpoint.json").read()


# --- corrupt files -------------------------------------------------------------------------


def corrupt_variants() -> list:
    good = encode(sample())
    middle = good.index(b'"PoolName":"node-a"') + len(b'"PoolName":"node-')
    flipped = bytearray(good)
    flipped[middle] = ord("b")
    wrong_checksum = good.replace(b'{"checksum":', b'{"checksum":1', 1)
    return [
        pytest.param(bytes(flipped), "checksum mismatch", id="corrupted-byte"),
        pytest.param(good[: len(good) // 2], "truncated", id="truncated"),
        pytest.param(good[:-1], "truncated", id="last-byte-missing"),
        pytest.param(b"", "empty file", id="empty"),
        pytest.param(wrong_checksum, "checksum mismatch", id="wrong-checksum"),
        pytest.param(b"\x00" * 64, "not valid JSON", id="zeros"),
    ]


@pytest.mark.parametrize(("data", "reason"), corrupt_variants())
def test_corrupt_file_raises_naming_the_file_and_leaves_it_untouched(tmp_path, data, reason):
    path = tmp_path / "checkpoint.json"
    path.write_bytes(data)
    before = path.stat()
    with pytest.raises(CheckpointCorruptError) as info:
        CheckpointStore(path).read()
    message = str(info.value)
    assert message.startswith(f"checkpoint is corrupted ({path}): ")
    assert reason in message
    assert "restore it from backup" in message and "move it aside and restart" in message
    assert "\n" not in message
    assert info.value.path == str(path)
    assert path.read_bytes() == data
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert others_in(tmp_path) == []


def test_corrupt_file_is_never_reset_by_reconciliation(tmp_path):
    path = tmp_path / "checkpoint.json"
    path.write_bytes(b'{"checksum":1,"v1":{}}')
    with pytest.raises(CheckpointCorruptError):
        CheckpointStore(path).reconcile_boot_id(BOOT)
    assert path.read_bytes() == b'{"checksum":1,"v1":{}}'


# --- boot id reconciliation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "expected", "rewritten"),
    [
        pytest.param(None, Checkpoint(boot_id=BOOT), True, id="no-file-fresh-written"),
        pytest.param(sample(boot_id=""), sample(boot_id=BOOT), True,
                     id="no-boot-id-keeps-claims-records-boot"),
        pytest.param(sample(boot_id=BOOT), sample(boot_id=BOOT), False, id="same-boot-kept"),
        pytest.param(sample(boot_id=OTHER_BOOT), Checkpoint(boot_id=BOOT), True,
                     id="other-boot-discarded"),
        pytest.param(Checkpoint(boot_id=OTHER_BOOT), Checkpoint(boot_id=BOOT), True,
                     id="other-boot-empty"),
    ],
)  # fmt: skip
def test_boot_id_reconciliation(tmp_path, stored, expected, rewritten):
    path = tmp_path / "checkpoint.json"
    store = CheckpointStore(path)
    if stored is not None:
        store.write(stored)
        before = path.stat().st_ino
    got = store.reconcile_boot_id(BOOT)
    assert got == expected
    assert store.read() == expected
    if stored is not None:
        assert (path.stat().st_ino != before) is rewritten


def test_reconciliation_of_a_missing_file_writes_the_vector(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoint.json")
    store.reconcile_boot_id(BOOT)
    assert (tmp_path / "checkpoint.json").read_bytes() == FRESH


def test_reconciliation_rejects_an_empty_boot_id(tmp_path):
    with pytest.raises(ValueError, match="boot id"):
        CheckpointStore(tmp_path / "checkpoint.json").reconcile_boot_id("")


# --- boot id file ------------------------------------------------------------------------------


def test_read_boot_id_trims(tmp_path):
    path = tmp_path / "boot_id"
    path.write_text(f"  {BOOT}\n")
    assert read_boot_id(path) == BOOT


def test_read_boot_id_of_this_machine():
    if not Path("/proc/sys/kernel/random/boot_id").exists():
        pytest.skip("no /proc boot id here")
    assert len(read_boot_id()) == 36


@pytest.mark.parametrize(
    ("content", "match"),
    [(None, "cannot read the node boot id from .*boot_id"), ("\n", "is empty")],
)
def test_read_boot_id_errors(tmp_path, content, match):
    path = tmp_path / "boot_id"
    if content is not None:
        path.write_text(content)
    with pytest.raises(BootIdError, match=match):
        read_boot_id(path)
