"""Both API servers for the differential tests, started once for all of them."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Pair, Server

from sim.cluster import manifests
from sim.controlplane.base import Credentials
from sim.controlplane.binaries import available
from sim.controlplane.emulator import EmulatorControlPlane
from sim.controlplane.upstream import KubernetesControlPlane

CRD_DIR = manifests.CRD_DIR


class _Loop:
    """An event loop in a thread: the control planes' actors live there during the tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 120):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def _install_crds(admin: Credentials) -> None:
    api = admin.api_client()
    try:
        crds = [yaml.safe_load(p.read_text()) for p in sorted(CRD_DIR.glob("*.yaml"))]
        await asyncio.to_thread(manifests.apply, api, crds)
    finally:
        api.close()


@pytest.fixture(scope="session")
def pair() -> Iterator[Pair]:
    built, why = available()
    if not built:
        pytest.skip(f"the differential test needs kube-apiserver: {why}")
    root = Path(tempfile.mkdtemp(prefix="cd-diff-", dir="/tmp"))
    loop = _Loop()
    emulator = EmulatorControlPlane(root / "emulator")
    upstream = KubernetesControlPlane(root / "kubernetes")
    try:
        loop.run(emulator.start(install=_install_crds))
        loop.run(upstream.start(install=_install_crds))
        loop.run(upstream.wait_settled())
        yield Pair(
            Server("emulator", emulator.admin, lambda name: emulator.user(name)),
            Server("kubernetes", upstream.admin, lambda name: upstream.user(name)),
        )
    finally:
        loop.run(emulator.stop())
        loop.run(upstream.stop())
        loop.close()
        shutil.rmtree(root, ignore_errors=True)
