"""A node worker process: the node side of a share of the simulated cluster's nodes.

With `ClusterSpec(sim_workers=N)` (N > 1, in-process mode) the main process keeps the
control plane, the sim's scheduler and controllers and the driver's controller, and each
of N worker processes (started with `spawn`, see `nodeworkers`) runs, for each of its
nodes, what runs on that node: its `SimKubelet` and the in-process agent, IMEX daemon
containers and fake `nvidia-imex` it starts (one `InProcessHost` per worker), the host
IMEX daemon in host-managed mode, and any pod's processes (workloads, the controller if
it is scheduled here). One GIL per worker instead of one for the whole rack.

`main(conn, plan)` is the process's entry point. It tells the main process, over `conn`:
`("started", names)` once every node is registered and its kubelet started, or
`("failed", text)`; then `("state", {...})` whenever what the main process watches changed
(which agents registered with their kubelet, the controller's container if it runs
here, the host IMEX daemons' PIDs); `("answer", (id, value))` to an `("ask", (id, what))`;
and `("stopped", None)` after `("stop", None)` stopped every node. A closed pipe (the main
process is gone) or SIGTERM stop the nodes too, so a worker never outlives its cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import traceback
import warnings
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from api import names
from sim.cluster.cpumeter import CpuMeter
from sim.cluster.hostimex import HostImex
from sim.cluster.inprocess import InProcessHost
from sim.cluster.kubelet import SimKubelet
from sim.cluster.nodeplan import (
    KubeletSetup,
    NodePlan,
    ProgramRef,
    add_all,
    image_catalog,
    new_kubelet,
)
from sim.cluster.podprogram import PodProgram
from sim.cluster.workerlink import Link, LinkClosedError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
STATE_EVERY = 0.25  # seconds between looks at what the main process watches (all nodes)
WAITING_LOGS = 3  # agent log paths reported of nodes whose agent did not register yet
EXECUTOR_THREADS = 64  # as the main process's: every client call runs in a thread


@dataclass(frozen=True)
class WorkerPlan:
    """Everything one worker needs: its nodes, what their kubelets share, and what to
    build the image catalog and follow the driver's programs from."""

    number: int
    nodes: Sequence[NodePlan]
    setup: KubeletSetup
    verbosity: int
    agent_program: str
    controller_program: str
    objects: Sequence[Obj]  # the deploy manifests, edited for one machine
    controller: ProgramRef
    agent: ProgramRef
    # The kubelets watch their pods on the loop, not a thread each (SimKubelet's flag).
    async_pod_watch: bool = True
    # The driver's CPU time told from the sim's (sim/cluster/cpumeter.py; ask "cpu").
    cpu_meter: bool = False


@dataclass
class _Node:
    plan: NodePlan
    kubelet: SimKubelet
    agent: PodProgram
    host_imex: HostImex | None = None


class NodeWorker:
    """The nodes of one worker, started one after the other as the main process would."""

    def __init__(self, plan: WorkerPlan, meter: CpuMeter | None = None) -> None:
        self.plan = plan
        self.meter = meter
        self.host = InProcessHost(plan.verbosity)
        self.images = image_catalog(
            Path(plan.agent_program), Path(plan.controller_program), plan.objects
        )
        self.nodes: dict[str, _Node] = {}
        self.controller = PodProgram(
            lambda: [n.kubelet for n in self.nodes.values()],
            plan.controller.namespace, plan.controller.labels, plan.controller.container,
            "the controller", "controller",
        )  # fmt: skip

    async def start(self) -> None:
        self.host.open()
        await add_all(self.plan.nodes, self._add)
        # In plan order, whichever finished first (what reports and stops walk).
        ordered = {plan.name: self.nodes[plan.name] for plan in self.plan.nodes}
        self.nodes.clear()
        self.nodes.update(ordered)

    async def _add(self, plan: NodePlan) -> None:
        tls = await asyncio.to_thread(plan.tls.context) if plan.tls is not None else None
        kubelet = new_kubelet(
            plan, self.plan.setup, self.images, tls=tls, executor=self.host.executor,
            async_pod_watch=self.plan.async_pod_watch,
        )
        await kubelet.register()
        ref = self.plan.agent
        agent = PodProgram(
            lambda: [kubelet], ref.namespace, ref.labels, ref.container,
            f"the agent on {plan.name}", f"agent-{plan.name}",
        )  # fmt: skip
        node = _Node(plan, kubelet, agent)
        if plan.host_imex_peers is not None:
            node.host_imex = HostImex(plan.host, plan.ip)
        self.nodes[plan.name] = node
        kubelet.start()
        if node.host_imex is not None:
            await node.host_imex.start(peers=list(plan.host_imex_peers or ()))

    def state(self) -> Obj:
        """What the main process watches: registered agents, the controller, host IMEX."""
        registered = sorted(
            name for name, n in self.nodes.items()
            if names.DRIVER_NAME in n.kubelet.watcher.plugins
        )  # fmt: skip
        # The agent logs of a few nodes still waiting, for the main process's error message.
        done = set(registered)
        unregistered = [name for name in self.nodes if name not in done]
        waiting = {
            name: str(self.nodes[name].agent.log_path or "")
            for name in unregistered[:WAITING_LOGS]
        }
        controller: Obj | None = None
        if self.controller.container() is not None:
            path = self.controller.log_path
            controller = {
                "pid": self.controller.pid,
                "ready": self.controller.ready,
                "running": self.controller.running,
                "where": self.controller.where(),
                "log": str(path) if path is not None else "",
            }
        host_imex = {
            name: n.host_imex.process.pid
            for name, n in self.nodes.items()
            if n.host_imex is not None and n.host_imex.process is not None
            and n.host_imex.process.pid is not None
        }
        return {"registered": registered, "waiting": waiting, "controller": controller,
                "host_imex": host_imex}

    def answer(self, what: str) -> Any:
        if what == "threads":
            return thread_counts()
        if what == "cpu" and self.meter is not None:
            return self.meter.seconds()
        raise ValueError(f"a node worker does not know {what!r}")

    async def stop(self) -> None:
        """What `SimCluster` does to its own nodes: kubelets (and what runs on them),
        the in-process daemons, then the hosts' IMEX daemons."""
        nodes = list(self.nodes.values())
        await asyncio.gather(*(n.kubelet.stop() for n in nodes), return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.host.close()
        await asyncio.gather(
            *(n.host_imex.stop() for n in nodes if n.host_imex is not None),
            return_exceptions=True,
        )
        for n in nodes:
            n.kubelet.api.close()


def thread_counts() -> dict[str, int]:
    """This process's threads, by name with the digits and suffixes taken out (what kind
    of thread each is), plus the total under "total"."""
    kinds: Counter[str] = Counter()
    for thread in threading.enumerate():
        kind = thread.name.split("-node-", 1)[0].split(" (", 1)[0].rstrip("0123456789_-")
        kinds[kind or "unnamed"] += 1
    return {"total": threading.active_count(), **dict(kinds.most_common())}


def main(conn: Connection, plan: WorkerPlan) -> None:
    """The worker process's entry point (multiprocessing target)."""
    # Ctrl-C reaches the whole process group: the main process decides when nodes stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s %(levelname)s sim-worker-{plan.number}: %(message)s",
    )
    asyncio.run(_serve(conn, plan))


def _watch_children_by_pidfd(loop: asyncio.AbstractEventLoop) -> None:
    """Child processes (workload containers, init containers, exec probes) reaped through
    a pidfd on the loop, instead of Python 3.11's default of one waiting thread each
    (3.12 does this by default and deprecates choosing)."""
    if not hasattr(os, "pidfd_open"):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(loop)
        asyncio.set_child_watcher(watcher)


async def _serve(conn: Connection, plan: WorkerPlan) -> None:
    loop = asyncio.get_running_loop()
    _watch_children_by_pidfd(loop)
    executor = ThreadPoolExecutor(max_workers=EXECUTOR_THREADS, thread_name_prefix="sim")
    loop.set_default_executor(executor)
    link = Link(conn)
    link.open()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    worker: NodeWorker | None = None
    reporter: asyncio.Task[None] | None = None
    meter = CpuMeter() if plan.cpu_meter else None
    if meter is not None:
        meter.install()
    try:
        worker = NodeWorker(plan, meter)
        reporter = loop.create_task(_report(link, worker), name="worker-state")
        listener = loop.create_task(_listen(link, worker, stop), name="worker-requests")
        starting = loop.create_task(worker.start(), name="worker-start")
        stopping = loop.create_task(stop.wait())
        await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()
            _send(link, "state", worker.state())
            _send(link, "started", sorted(worker.nodes))
            await stop.wait()
        else:
            starting.cancel()
            with contextlib.suppress(BaseException):
                await starting
        listener.cancel()
        stopping.cancel()
    except Exception:
        _send(link, "failed", traceback.format_exc())
    finally:
        if reporter is not None:
            reporter.cancel()
        if worker is not None:
            await worker.stop()
        _send(link, "stopped", None)
        link.close()
        executor.shutdown(wait=False, cancel_futures=True)


async def _listen(link: Link, worker: NodeWorker, stop: asyncio.Event) -> None:
    while True:
        try:
            kind, payload = await link.recv()
        except LinkClosedError:  # the main process is gone: nothing may outlive it
            stop.set()
            return
        if kind == "stop":
            stop.set()
            return
        if kind == "ask":
            ident, what = payload
            try:
                value = worker.answer(what)
            except Exception as err:
                value = {"error": str(err)}
            _send(link, "answer", (ident, value))


async def _report(link: Link, worker: NodeWorker) -> None:
    last: Obj | None = None
    while True:
        await asyncio.sleep(STATE_EVERY)
        state = worker.state()
        if state != last:
            _send(link, "state", state)
            last = state


def _send(link: Link, kind: str, payload: Any) -> None:
    with contextlib.suppress(LinkClosedError):
        link.send(kind, payload)
