"""The sim's container runtime on its own: what a container gets does not depend on the
state of the process that starts it (the simulated kubelet shares its process with the
in-process agents and the tests)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.cluster.sandbox import Launch, SandboxExecutor, can_sandbox

pytestmark = pytest.mark.skipif(bool(can_sandbox()), reason=can_sandbox() or "n/a")


@pytest.fixture
def private_umask() -> Iterator[None]:
    old = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(old)


def test_a_container_gets_umask_0022_whatever_its_starter_has(
    tmp_path: Path, private_umask: None
) -> None:
    """Under the starter's umask 0177 the writable layer would be mode 0600, and a
    non-root container could not even enter its own `/`."""
    script = "umask; cd / && touch /tmp/made && stat -c %a /tmp/made && id -u"

    async def body() -> str:
        state = tmp_path / "state"
        state.mkdir(mode=0o700)
        launch = Launch(
            argv=("sh", "-c", script), env={"PATH": "/usr/bin:/bin"}, uid=65532, gid=65532,
            cwd="/", state_dir=str(state),
        )  # fmt: skip
        log = tmp_path / "c.log"
        container = await SandboxExecutor().start(launch, log)
        assert await asyncio.wait_for(container.wait(), 30) == 0, log.read_text()
        return log.read_text()

    assert asyncio.run(body()).split() == ["0022", "644", "65532"]
