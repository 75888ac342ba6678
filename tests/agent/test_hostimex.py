"""The host-managed IMEX readiness probe, against fake `nvidia-imex-ctl` scripts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from eventually import eventually

from agent.hostimex import HostImexNotReadyError, HostImexProbe, is_ready_output

SOCKET = "/etc/nvidia-imex/imex_ctrl.sock"


def make_ctl(root: Path, body: str, where: str = "usr/bin") -> Path:
    """A fake nvidia-imex-ctl under `root/where` that records its arguments, then runs `body`."""
    ctl = root / where / "nvidia-imex-ctl"
    ctl.parent.mkdir(parents=True, exist_ok=True)
    ctl.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{root}/ctl-args"\n{body}\n')
    ctl.chmod(0o755)
    return ctl


def check(probe: HostImexProbe) -> None:
    asyncio.run(probe.check())


def probe_for(root: Path, timeout: float = 10.0) -> HostImexProbe:
    return HostImexProbe(root, SOCKET, use_chroot=False, timeout=timeout)


def test_ready(tmp_path):
    make_ctl(tmp_path, "echo READY")
    check(probe_for(tmp_path))
    assert (tmp_path / "ctl-args").read_text().splitlines() == [
        "-q",
        f"--u={tmp_path}/etc/nvidia-imex/imex_ctrl.sock",
    ]


def test_ready_among_other_lines_and_whitespace(tmp_path):
    make_ctl(tmp_path, 'echo "connecting..." >&2\nprintf "  READY \\r\\n"')
    check(probe_for(tmp_path))


@pytest.mark.parametrize("output", ["NOT_READY", "READY?", "NOT READY", "ready", ""])
def test_not_ready_output(tmp_path, output):
    make_ctl(tmp_path, f'printf "%s\\n" "{output}"')
    with pytest.raises(HostImexNotReadyError) as err:
        check(probe_for(tmp_path))
    message = str(err.value)
    assert message.startswith(f"host nvidia-imex daemon not ready: {output or '(no output)'}")
    assert "IMEX_CMD_ENABLED=1" in message
    assert f"IMEX_CMD_UNIX_DOMAIN_PATH={SOCKET}" in message
    assert "/etc/nvidia-imex/config.cfg" in message
    assert "nvidia-imex.service" in message


def test_failing_ctl_reports_status_and_output(tmp_path):
    make_ctl(tmp_path, 'echo "connect: connection refused" >&2\nexit 1')
    with pytest.raises(HostImexNotReadyError) as err:
        check(probe_for(tmp_path))
    message = str(err.value)
    assert "nvidia-imex-ctl -q exited with status 1: connect: connection refused" in message
    assert "nvidia-imex.service is running" in message
    assert err.value.permanent is False


def test_failing_ctl_that_prints_ready_is_still_an_error(tmp_path):
    make_ctl(tmp_path, "echo READY\nexit 2")
    with pytest.raises(HostImexNotReadyError, match="status 2"):
        check(probe_for(tmp_path))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_timeout_kills_the_ctl_and_what_it_started(tmp_path):
    make_ctl(tmp_path, f'sleep 30 &\necho $! > "{tmp_path}/child"\nwait\necho READY')
    started = time.monotonic()
    with pytest.raises(HostImexNotReadyError) as err:
        check(probe_for(tmp_path, timeout=0.5))
    assert time.monotonic() - started < 5
    assert "did not answer within 0.5s" in str(err.value)
    assert "IMEX_CMD_ENABLED=1" in str(err.value)
    child = int((tmp_path / "child").read_text())
    eventually(lambda: not _alive(child), "the ctl's child ended", timeout=5, interval=0.05)


def test_missing_ctl(tmp_path):
    with pytest.raises(HostImexNotReadyError) as err:
        check(HostImexProbe(tmp_path, SOCKET))  # chroot mode: nothing is executed
    message = str(err.value)
    assert message.startswith(f'nvidia-imex-ctl not found under driver root "{tmp_path}": ')
    assert message.endswith("(is nvidia-imex installed on this node?)")
    assert "/usr/sbin/nvidia-imex-ctl" in message


def test_a_directory_is_not_the_ctl(tmp_path):
    (tmp_path / "usr/bin/nvidia-imex-ctl").mkdir(parents=True)
    with pytest.raises(HostImexNotReadyError, match="not found under driver root"):
        check(probe_for(tmp_path))


def test_ctl_that_cannot_be_executed(tmp_path):
    ctl = make_ctl(tmp_path, "echo READY")
    ctl.chmod(0o644)
    with pytest.raises(HostImexNotReadyError, match="cannot run"):
        check(probe_for(tmp_path))


def test_ctl_found_in_a_later_bin_dir(tmp_path):
    make_ctl(tmp_path, "echo READY", where="sbin")
    check(probe_for(tmp_path))


def test_chroot_command_line(tmp_path):
    make_ctl(tmp_path, "echo READY", where="opt/bin")
    probe = HostImexProbe(tmp_path, "/run/imex.sock")
    assert probe.command() == [
        "chroot",
        str(tmp_path),
        "/opt/bin/nvidia-imex-ctl",
        "-q",
        "--u=/run/imex.sock",
    ]


def test_chroot_failure_is_not_ready(tmp_path):
    # The root has no /bin/sh for the script, or we may not chroot: either way it fails.
    make_ctl(tmp_path, "echo READY")
    with pytest.raises(HostImexNotReadyError, match="exited with status"):
        check(HostImexProbe(tmp_path, SOCKET, timeout=10))


@pytest.mark.parametrize(
    ("output", "ready"),
    [
        ("READY", True),
        ("READY\n", True),
        ("  READY \r\n", True),
        ("log line\nREADY\n", True),
        ("NOT_READY\n", False),
        ("NOT READY", False),
        ("READY_SOON", False),
        ("ready", False),
        ("", False),
    ],
)
def test_is_ready_output(output, ready):
    assert is_ready_output(output) is ready
