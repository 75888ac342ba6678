"""The kubelet plugin's unix sockets: private from the instant they are bound, and the
process umask untouched however many servers start at once (several agents share one
process in the in-process simulated cluster; a umask left at 0177 there made every
container started afterwards unable to enter its own root directory)."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from agent.plugin.grpcserver import ClaimRef, KubeletServers, PrepareResult, _bind_private


class NoClaims:
    async def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        return {}

    async def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]:
        return {}


def _umask() -> int:
    value = os.umask(0)
    os.umask(value)
    return value


@pytest.fixture
def usual_umask(set_umask: Callable[[int], int]) -> None:
    set_umask(0o022)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_socket_is_bound_private_before_it_is_opened_to_the_group(
    short_dir: Path, usual_umask: None
) -> None:
    async def body() -> None:
        server = grpc.aio.server()
        path = short_dir / "bound.sock"
        _bind_private(server, path)
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert _mode(path) == 0o600  # nobody but root can connect before the chmod
        assert _umask() == 0o022
        await server.stop(0)

    asyncio.run(body())


def test_servers_started_together_leave_the_umask_as_it_was(
    short_dir: Path, usual_umask: None
) -> None:
    async def body() -> None:
        servers = [
            KubeletServers(NoClaims(), short_dir / f"dra{i}.sock", short_dir / f"reg{i}.sock")
            for i in range(8)
        ]
        await asyncio.gather(*(s.start() for s in servers))
        try:
            assert _umask() == 0o022
            for s in servers:
                assert _mode(s.dra_socket) == 0o660
                assert _mode(s.registration_socket) == 0o660
        finally:
            await asyncio.gather(*(s.stop(0) for s in servers))

    asyncio.run(body())
