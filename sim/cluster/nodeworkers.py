"""The main process's side of the node worker processes (`ClusterSpec(sim_workers=N)`).

`NodeWorkers` starts one `spawn`ed process per `WorkerPlan` (spawn, not fork: the main
process already runs threads, the emulator's client pools and the informers, and a forked
child would inherit their locks mid-use), follows what each reports (`nodeworker`'s
messages) and stops them: asked politely first, then SIGTERM, then SIGKILL of the worker
and of every process it had started, so a stop leaves nothing behind even when a worker
hangs. `WorkerProgram` is the driver's controller as the main process sees it when its
pod runs in a worker: its PID and readiness, and its log read from the node's files.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import time
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import psutil

from sim.cluster import nodeworker
from sim.cluster.nodeworker import WorkerPlan
from sim.cluster.workerlink import Link, LinkClosedError

Obj = dict[str, Any]
CHILDREN_EVERY = 2.0  # seconds between looks at a worker's child processes
STOP_GRACE = 60.0  # seconds a worker gets to stop its nodes (kubelets stop their pods)


class InWorkerError(RuntimeError):
    """Asked for an in-process object of a node that runs in a worker process."""


def in_worker_error(what: str) -> InWorkerError:
    return InWorkerError(
        f"{what} needs the node objects in this process, but the nodes run in sim worker "
        "processes: use ClusterSpec(sim_workers=1) (--sim-workers 1)"
    )


class InWorker:
    """Stands for a node's kubelet or agent that lives in a worker process: any use says
    so (`InWorkerError`) instead of failing later in a confusing way."""

    def __init__(self, what: str) -> None:
        self._what = what

    def __getattr__(self, name: str) -> Any:
        raise in_worker_error(f"{self._what}.{name}")


class _Worker:
    """One worker process and what it last reported."""

    def __init__(self, plan: WorkerPlan, process: BaseProcess, link: Link) -> None:
        self.plan = plan
        self.process = process
        self.link = link
        self.state: Obj = {}
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self.failure: str | None = None
        self.answers: dict[int, asyncio.Future[Any]] = {}
        self.reader: asyncio.Task[None] | None = None
        # (pid, start time) of the processes it started, as last seen (see _kill_all).
        self.children: set[tuple[int, float]] = set()
        self.children_seen = 0.0

    @property
    def name(self) -> str:
        return f"sim-worker-{self.plan.number}"


class NodeWorkers:
    """N node worker processes of one cluster."""

    def __init__(self) -> None:
        self.workers: list[_Worker] = []
        self._asks = itertools.count(1)
        self._changed = asyncio.Event()

    # --- start ---------------------------------------------------------------------------

    async def start(self, plans: Sequence[WorkerPlan]) -> None:
        """Start a worker per plan (they build their nodes side by side); returns once
        each reported its nodes registered and their kubelets started. Raises
        RuntimeError with the worker's traceback when one failed or exited."""
        context = multiprocessing.get_context("spawn")
        for plan in plans:
            ours, theirs = context.Pipe()
            process = context.Process(
                target=nodeworker.main, args=(theirs, plan),
                name=f"sim-worker-{plan.number}", daemon=True,
            )  # fmt: skip
            await asyncio.to_thread(process.start)
            theirs.close()
            link = Link(ours)
            link.open()
            worker = _Worker(plan, process, link)
            worker.reader = asyncio.get_running_loop().create_task(
                self._read(worker), name=f"{worker.name}-reader"
            )
            self.workers.append(worker)
        for worker in self.workers:
            waits = [asyncio.ensure_future(worker.started.wait()),
                     asyncio.ensure_future(worker.stopped.wait())]  # fmt: skip
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
            if not worker.started.is_set():
                raise RuntimeError(
                    f"{worker.name} (nodes {_span(worker.plan)}) failed to start its nodes:\n"
                    + (worker.failure or f"it exited with {worker.process.exitcode}")
                )

    async def _read(self, worker: _Worker) -> None:
        try:
            while True:
                kind, payload = await worker.link.recv()
                if kind == "state":
                    worker.state = payload
                    self._remember_children(worker)
                    self._changed.set()
                elif kind == "started":
                    worker.started.set()
                elif kind == "failed":
                    worker.failure = str(payload)
                elif kind == "answer":
                    ident, value = payload
                    future = worker.answers.pop(ident, None)
                    if future is not None and not future.done():
                        future.set_result(value)
                elif kind == "stopped":
                    break
        except LinkClosedError:
            pass
        finally:
            worker.stopped.set()
            self._changed.set()
            for future in worker.answers.values():
                if not future.done():
                    future.set_exception(RuntimeError(f"{worker.name} is gone"))

    def _remember_children(self, worker: _Worker, *, now: bool = False) -> None:
        """The worker's descendants, so a worker killed at stop takes them along (looked
        up at most every CHILDREN_EVERY seconds: it reads every process's /proc entry)."""
        if not now and time.monotonic() - worker.children_seen < CHILDREN_EVERY:
            return
        worker.children_seen = time.monotonic()
        with contextlib.suppress(psutil.Error):
            for kid in psutil.Process(worker.process.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    worker.children.add((kid.pid, kid.create_time()))

    # --- what they report ----------------------------------------------------------------

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers if w.process.pid is not None]

    def registered(self) -> set[str]:
        """Nodes whose agent registered with its kubelet (as last reported)."""
        return {n for w in self.workers for n in w.state.get("registered", ())}

    def waiting_logs(self) -> dict[str, str]:
        """Node -> the log file of its agent, for nodes whose agent is not registered."""
        return {n: p for w in self.workers for n, p in w.state.get("waiting", {}).items()}

    def controller(self) -> Obj | None:
        """The controller's container as the worker running its pod reports it."""
        found = [w.state["controller"] for w in self.workers if w.state.get("controller")]
        running = [c for c in found if c.get("running")]
        chosen: Obj | None = (running or found or [None])[-1]
        return chosen

    def host_imex_pids(self) -> dict[str, int]:
        return {n: p for w in self.workers for n, p in w.state.get("host_imex", {}).items()}

    def gone(self) -> list[str]:
        """Workers that exited before being asked to stop (with why, when known)."""
        return [f"{w.name}: {w.failure or f'exit {w.process.exitcode}'}"
                for w in self.workers if w.stopped.is_set()]  # fmt: skip

    async def changed(self, timeout: float) -> None:
        """Until a worker reports something new, or `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        self._changed.clear()

    async def ask(self, what: str, timeout: float = 10.0) -> list[Any]:
        """Every live worker's answer to `what` (e.g. "threads"), in worker order."""
        futures = []
        loop = asyncio.get_running_loop()
        for worker in self.workers:
            if worker.stopped.is_set():
                continue
            ident = next(self._asks)
            future: asyncio.Future[Any] = loop.create_future()
            worker.answers[ident] = future
            with contextlib.suppress(LinkClosedError):
                worker.link.send("ask", (ident, what))
            futures.append(future)
        async with asyncio.timeout(timeout):
            return list(await asyncio.gather(*futures))

    # --- stop ----------------------------------------------------------------------------

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Ask every worker to stop its nodes, wait for them, and make sure each process
        and everything it started is gone. Safe after a failed start."""
        for worker in self.workers:
            self._remember_children(worker, now=True)
            with contextlib.suppress(LinkClosedError):
                worker.link.send("stop", None)
        await asyncio.gather(*(self._stop_one(w, grace) for w in self.workers))
        self.workers.clear()

    async def _stop_one(self, worker: _Worker, grace: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await worker.stopped.wait()
        process = worker.process
        await asyncio.to_thread(process.join, 10.0)
        if process.is_alive():
            process.terminate()  # its SIGTERM handler stops the nodes once more
            await asyncio.to_thread(process.join, 10.0)
        if process.is_alive():
            process.kill()
            await asyncio.to_thread(process.join, 5.0)
        _kill_all(worker.children)
        if worker.reader is not None:
            worker.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker.reader
        worker.link.close()
        process.close()


class WorkerProgram:
    """The driver's controller whose pod runs in a node worker: the part of `PodProgram`
    the main process can answer from what the worker reports. Faults (kill, restart,
    stop) need the container itself: `sim_workers=1`."""

    def __init__(self, workers: NodeWorkers, what: str, name: str) -> None:
        self._workers = workers
        self.what = what
        self.name = name

    def _state(self) -> Obj:
        return self._workers.controller() or {}

    @property
    def pid(self) -> int | None:
        state = self._state()
        return state.get("pid") if state.get("running") else None

    @property
    def running(self) -> bool:
        return bool(self._state().get("running"))

    @property
    def ready(self) -> bool:
        return bool(self._state().get("ready"))

    def where(self) -> str:
        return str(self._state().get("where") or "no pod of it runs on any node yet")

    @property
    def log_path(self) -> Path | None:
        log = self._state().get("log")
        return Path(log) if log else None

    def log_text(self) -> str:
        path = self.log_path
        if path is None:
            return ""
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]

    async def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.what} is not ready after {timeout:.0f}s "
                                   f"({self.where()}):\n{self.log_tail()}")  # fmt: skip
            await self._workers.changed(min(0.5, max(0.01, deadline - time.monotonic())))

    async def restart(self, *, kill: bool = True, timeout: float = 60.0) -> None:
        raise in_worker_error(f"restarting {self.what}")

    async def kill(self) -> None:
        raise in_worker_error(f"killing {self.what}")

    async def stop(self, timeout: float = 20.0) -> int | None:
        raise in_worker_error(f"stopping {self.what}")

    async def start(self, timeout: float = 60.0) -> None:
        raise in_worker_error(f"starting {self.what}")


def _kill_all(processes: set[tuple[int, float]]) -> None:
    """SIGKILL whatever of `processes` still runs (a worker that did not stop its pods);
    a PID only while it still has the start time it had, so never a reused one."""
    for pid, started in processes:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.create_time() == started:
                proc.kill()


def _span(plan: WorkerPlan) -> str:
    names = [n.name for n in plan.nodes]
    return f"{names[0]}..{names[-1]}" if len(names) > 1 else ", ".join(names)
