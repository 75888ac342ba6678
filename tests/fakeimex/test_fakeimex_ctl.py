"""`nvidia-imex-ctl` when there is nothing to talk to, or no usable config."""

from __future__ import annotations

from fakeimex_helpers import Domain, free_port, ip


def test_nothing_listening_is_a_clear_failure(domain: Domain):
    port = free_port()
    result = domain.ctl("-i", ip(1), str(port), "-q")
    assert result.returncode == 1 and result.stdout == ""
    assert f"cannot connect to the IMEX daemon command service at {ip(1)}:{port}" in result.stderr
    assert "Connection refused" in result.stderr

    result = domain.ctl("-q", f"--u={domain.root}/absent.sock")
    assert result.returncode == 1
    assert "absent.sock: No such file or directory" in result.stderr


def test_config_problems_exit_255(domain: Domain):
    result = domain.ctl("-c", str(domain.root / "missing.cfg"), "-q")
    assert result.returncode == 255
    assert "Unable to open configuration file at" in result.stderr

    disabled = domain.config("off", ip(1), IMEX_CMD_ENABLED=0)
    result = domain.ctl("-c", str(disabled), "-N", "-j")
    assert result.returncode == 255
    assert "IMEX_CMD_ENABLED is not 1" in result.stderr


def test_usage(domain: Domain):
    assert domain.ctl().returncode == 2
    result = domain.ctl("-i", ip(1), "-s")
    assert result.returncode == 2 and "not implemented" in result.stderr
