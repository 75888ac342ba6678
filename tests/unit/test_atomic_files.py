"""cdi.atomic in a directory someone else can write: links are replaced or refused, never
followed; temporary names cannot be guessed; a FIFO does not block a reader."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cdi.atomic import NotRegularFileError, atomic_write, read_file, remove_durably


def test_a_link_at_the_target_is_replaced_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"secret")
    victim.chmod(0o600)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "file").symlink_to(victim)
    atomic_write(shared / "file", b"ours", 0o644)
    assert victim.read_bytes() == b"secret" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not (shared / "file").is_symlink() and (shared / "file").read_bytes() == b"ours"


def test_planted_temporary_names_are_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"secret")
    shared = tmp_path / "shared"
    shared.mkdir()
    for guess in (".file.tmp", ".file.AAAAAAAA.tmp", "file.tmp"):
        (shared / guess).symlink_to(victim)
    atomic_write(shared / "file", b"ours")
    assert victim.read_bytes() == b"secret"
    assert {p.name for p in shared.iterdir()} == {"file", ".file.tmp", ".file.AAAAAAAA.tmp",
                                                  "file.tmp"}


def test_a_linked_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OSError):
        atomic_write(tmp_path / "link" / "file", b"x")
    assert list(real.iterdir()) == []


def test_read_file_refuses_links_fifos_and_directories(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"secret")
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    os.mkfifo(tmp_path / "fifo")  # nobody writes it: a blocking open would hang
    (tmp_path / "dir").mkdir()
    for name in ("link", "fifo", "dir"):
        with pytest.raises(NotRegularFileError):
            read_file(tmp_path / name)
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path / "missing")
    assert read_file(tmp_path / "secret") == b"secret"
    assert read_file(tmp_path / "secret", limit=3) == b"sec"


def test_remove_takes_the_link_not_its_target(tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"keep")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert remove_durably(tmp_path / "link") is True
    assert (tmp_path / "target").read_bytes() == b"keep"
    assert remove_durably(tmp_path / "link") is False
