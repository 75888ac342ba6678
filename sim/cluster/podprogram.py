"""A driver program that runs in a pod (the controller, one node's agent), for tests.

The driver runs from its manifests: the controller Deployment's pod and each node's
kubelet-plugin DaemonSet pod are run by the nodes' kubelets. `PodProgram` finds the
container wherever its pod runs now and gives tests what an outage or an operator does to
it: kill the process (kubelet restarts it, RESTARTS goes up), stop it and keep it stopped
(`stop`/`start`: a fault of the node, not an API change), read its log (the previous run's
and the current one, as `kubectl logs --previous` and `kubectl logs` would).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from sim.cluster.containers import Container
from sim.cluster.kubelet import SimKubelet
from sim.cluster.podworker import PodWorker


class PodProgram:
    """One container of the pod(s) labelled `labels` in `namespace` on `kubelets()`."""

    def __init__(
        self,
        kubelets: Callable[[], Iterable[SimKubelet]],
        namespace: str,
        labels: Mapping[str, str],
        container: str,
        what: str,
        name: str = "",
    ) -> None:
        self._kubelets = kubelets
        self.name = name or container
        self.namespace = namespace
        self.labels = dict(labels)
        self.container_name = container
        self.what = what

    def worker(self) -> PodWorker | None:
        """The newest live pod worker of this program."""
        found: list[PodWorker] = []
        for kubelet in self._kubelets():
            for worker, _ in list(kubelet.workers.values()):
                pod = worker.pod()
                if worker.namespace != self.namespace or pod is None or worker.ending():
                    continue
                labels = pod["metadata"].get("labels") or {}
                if all(labels.get(k) == v for k, v in self.labels.items()):
                    found.append(worker)
        return found[-1] if found else None

    def container(self) -> Container | None:
        worker = self.worker()
        return worker.containers.get(self.container_name) if worker is not None else None

    @property
    def running(self) -> bool:
        c = self.container()
        return c is not None and c.proc is not None and c.proc.returncode is None

    @property
    def pid(self) -> int | None:
        c = self.container()
        proc: Any = c.proc if c is not None else None
        return getattr(proc, "pid", None) if self.running else None

    @property
    def returncode(self) -> int | None:
        c = self.container()
        return None if c is None or c.proc is None else c.proc.returncode

    @property
    def starts(self) -> int:
        """How many times its container started (kubelet's restart count plus one)."""
        c = self.container()
        return 0 if c is None else c.restart_count + int(c.proc is not None)

    @property
    def ready(self) -> bool:
        c = self.container()
        return c is not None and c.ready

    async def wait_running(self, timeout: float = 60.0, *, not_pid: int | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not self.running or (not_pid is not None and self.pid == not_pid):
            if time.monotonic() > deadline:
                tail = self.log_tail()
                raise RuntimeError(f"{self.what} is not running after {timeout}s:\n{tail}")
            await asyncio.sleep(0.05)

    def where(self) -> str:
        """Where the program is in its life, for a failure message."""
        worker = self.worker()
        if worker is None:
            return "no pod of it runs on any node yet"
        c = worker.containers.get(self.container_name)
        if c is None:
            return (f"pod {worker.key} has not started its containers "
                    f"(initialized: {worker.initialized})")  # fmt: skip
        last = f", last {c.last_state}" if c.last_state else ""
        return f"pod {worker.key}: restarts {c.restart_count}, state {c.state}{last}"

    async def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready:
            if time.monotonic() > deadline:
                tail = self.log_tail()
                raise RuntimeError(
                    f"{self.what} is not ready after {timeout:.0f}s ({self.where()}):\n{tail}"
                )
            await asyncio.sleep(0.05)

    async def kill(self) -> None:
        """SIGKILL, as a crash: the kubelet restarts the container (with back-off)."""
        c = self.container()
        if c is not None:
            await c.signal(signal.SIGKILL)

    async def restart(self, *, kill: bool = True, timeout: float = 60.0) -> None:
        """SIGKILL (or SIGTERM) the program and wait until the kubelet ran it again."""
        old = self.pid
        c = self.container()
        if c is not None:
            await c.signal(signal.SIGKILL if kill else signal.SIGTERM)
        await self.wait_running(timeout, not_pid=old)

    async def stop(self, timeout: float = 20.0) -> int | None:
        """Stop the program gracefully and keep it stopped (the container is held)."""
        c = self.container()
        if c is None:
            return None
        await c.hold(timeout)
        return c.proc.returncode if c.proc is not None else None

    async def start(self, timeout: float = 60.0) -> None:
        """Let a stopped program run again; returns once it runs."""
        c = self.container()
        if c is not None:
            c.release()
        await self.wait_running(timeout)

    @property
    def log_path(self) -> Path | None:
        c = self.container()
        return c.log_path if c is not None else None

    def log_text(self) -> str:
        """Every run's log, oldest first."""
        c = self.container()
        if c is None:
            return ""
        parts = []
        for path in (c.history_log, c.previous_log, c.log_path):
            try:
                parts.append(path.read_text(errors="replace"))
            except OSError:
                continue
        return "".join(parts)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]
