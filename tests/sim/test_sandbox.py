"""The sim's container runtime on its own: what a container gets does not depend on the
state of the process that starts it (the simulated kubelet shares its process with the
in-process agents and the tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sim.cluster.privileges import CAPABILITIES, DEFAULT_CAPABILITIES, privileges
from sim.cluster.sandbox import Launch, SandboxExecutor, can_sandbox

pytestmark = pytest.mark.skipif(bool(can_sandbox()), reason=can_sandbox() or "n/a")


@pytest.fixture
def private_umask(set_umask: Callable[[int], int]) -> None:
    set_umask(0o177)


def test_a_container_gets_umask_0022_whatever_its_starter_has(
    tmp_path: Path, private_umask: None
) -> None:
    """Under the starter's umask 0177 the writable layer would be mode 0600, and a
    non-root container could not even enter its own `/`."""
    script = "umask; cd / && touch /tmp/made && stat -c %a /tmp/made && id -u"
    assert _run(tmp_path, script, {"name": "c"}, uid=65532).split() == ["0022", "644", "65532"]


def _run(tmp_path: Path, script: str, container: dict[str, Any], uid: int = 0) -> str:
    """The output of `script` in a container with `container`'s securityContext."""

    async def body() -> str:
        state = tmp_path / "state"
        state.mkdir(mode=0o700)
        launch = Launch(
            argv=("sh", "-c", script), env={"PATH": "/usr/bin:/bin"}, uid=uid, gid=uid,
            state_dir=str(state), privileges=privileges(container),
        )  # fmt: skip
        log = tmp_path / "c.log"
        container_proc = await SandboxExecutor().start(launch, log)
        async with asyncio.timeout(30):
            assert await container_proc.wait() == 0, log.read_text()
        return log.read_text()

    return asyncio.run(body())


def _status(field: str) -> str:
    return f"grep '^{field}:' /proc/self/status | cut -f2"


def _mask(names: set[str]) -> int:
    return sum(1 << CAPABILITIES[n] for n in names)


def _host_bounding() -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines()
                if x.startswith("CapBnd:"))  # fmt: skip
    return int(line.split()[1], 16)


def _host_device() -> str | None:
    """A device node of this machine's /dev that no container gets by default."""
    for path in sorted(Path("/dev").iterdir()):
        if path.name in {"null", "zero", "full", "random", "urandom", "tty", "console"}:
            continue
        if path.is_char_device() or path.is_block_device():
            return str(path)
    return None


CAPS = f"{_status('CapEff')}; {_status('NoNewPrivs')}; test -w /sys && echo sys-rw || echo sys-ro"


def test_a_root_container_gets_the_runtime_default_capabilities_only(tmp_path: Path) -> None:
    eff, no_new_privs, sys_mode = _run(tmp_path, CAPS, {"name": "c"}).split()
    assert int(eff, 16) == _mask(set(DEFAULT_CAPABILITIES)) & _host_bounding()
    assert int(eff, 16) & _mask({"SYS_ADMIN", "NET_ADMIN"}) == 0
    assert (no_new_privs, sys_mode) == ("0", "sys-ro")


def test_a_privileged_container_gets_every_capability_the_host_devices_and_sys(
    tmp_path: Path,
) -> None:
    device = _host_device()
    script = f"{CAPS}; test -e {device or '/dev/null'} && echo has-device"
    ctx = {"securityContext": {"privileged": True}}
    eff, no_new_privs, sys_mode, has = _run(tmp_path, script, {"name": "c", **ctx}).split()
    assert int(eff, 16) == _host_bounding()
    assert (no_new_privs, sys_mode, has) == ("0", "sys-rw", "has-device")


def test_drop_all_add_one_and_no_privilege_escalation(tmp_path: Path) -> None:
    ctx = {"securityContext": {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["cap_net_bind_service"]},
    }}  # fmt: skip
    eff, no_new_privs, _ = _run(tmp_path, CAPS, {"name": "c", **ctx}).split()
    assert int(eff, 16) == _mask({"NET_BIND_SERVICE"})
    assert no_new_privs == "1"


def test_a_non_root_container_has_no_capability(tmp_path: Path) -> None:
    ctx = {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
    eff, _, _ = _run(tmp_path, CAPS, {"name": "c", **ctx}, uid=65532).split()
    assert int(eff, 16) == 0


def test_capability_names_are_read_as_the_runtime_reads_them() -> None:
    ctx = {"securityContext": {"capabilities": {"add": ["CAP_SYS_ADMIN", "net_admin", "BOGUS"],
                                                 "drop": ["chown", "CAP_KILL"]}}}  # fmt: skip
    got = privileges({"name": "c", **ctx}).capabilities
    assert got == (DEFAULT_CAPABILITIES | {"SYS_ADMIN", "NET_ADMIN"}) - {"CHOWN", "KILL"}
    assert privileges({"name": "c", "securityContext": {"privileged": True}}).numbers() is None
