"""One container of a pod on the simulated kubelet: runs, probes, restarts, status.

`Container` keeps a container's program going by the pod's restartPolicy (Always,
OnFailure, Never) with kubelet's doubling back-off (the waiting reason is
CrashLoopBackOff meanwhile), runs its startup, readiness and liveness probes, and reports
the containerStatus kubelet would. Each run's output goes to `<name>.log`; the run before
moves to `<name>.previous.log` (`kubectl logs --previous`), older ones to
`<name>.history.log`. How a run is started is a
`ContainerExecutor` (real sandboxed processes by default, tasks at scale).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import math
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from sim.cluster import probes
from sim.cluster.containerconfig import ConfigError
from sim.cluster.sandbox import Launch, StartError

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def backoff(attempt: int, base: float, cap: float) -> float:
    """kubelet-style doubling delay: base, 2*base, 4*base, ... capped at `cap`."""
    return min(base * (2 ** min(attempt, 30)), cap)


class RunningContainer(Protocol):
    """A started container's main program."""

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def signal(self, sig: int) -> None:
        """Deliver `sig` to the container (all its processes); no-op once it is gone."""


class ContainerExecutor(Protocol):
    """Starts containers and runs exec probes in them."""

    async def start(self, launch: Launch, log_path: Path) -> RunningContainer:
        """Start the container (output appended to `log_path`); StartError if it cannot."""
        ...

    async def probe(
        self, container: RunningContainer, launch: Launch, argv: Sequence[str], timeout: float
    ) -> bool:
        """An exec probe in the running container: True if it exited 0 in time."""
        ...


class Timing(Protocol):
    """The kubelet knobs a container's supervision reads."""

    backoff_base: float
    backoff_cap: float
    probe_period_cap: float | None
    executor: ContainerExecutor


class Container:
    """One container across its restarts (see the module doc)."""

    def __init__(
        self,
        kubelet: Timing,
        spec: Obj,
        make_launch: Callable[[], Awaitable[Launch]],
        log_dir: Path,
        on_change: Callable[[], None],
        *,
        grace: float,
        restart_policy: str,
        host: str,
        pod_name: str,
        announce: Callable[[Obj, str], Awaitable[None]] | None = None,
    ) -> None:
        self.kubelet = kubelet
        # The kubelet's Events of a run ("pull", "created", "started"), as its image
        # manager and runtime manager record them.
        self.announce = announce
        self.spec = spec
        self.name: str = spec["name"]
        self.make_launch = make_launch
        self.log_path = log_dir / f"{self.name}.log"
        self.previous_log = log_dir / f"{self.name}.previous.log"
        self.history_log = log_dir / f"{self.name}.history.log"
        self.on_change = on_change
        self.grace = grace  # for probe-triggered restarts, like terminationGracePeriod
        self.probe_passes: dict[str, int] = {}  # kind -> probes passed (tests pace by it)
        self.restart_policy = restart_policy
        self.host = host
        self.pod_name = pod_name
        self.ports = probes.container_ports(spec)
        self.launch: Launch | None = None
        self.proc: RunningContainer | None = None
        self.restart_count = 0
        self.started = False
        self.ready = False
        self.done = False  # terminated and not to be restarted (restartPolicy)
        self.state: Obj = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: Obj = {}
        self.stopping = False
        self.held = False  # a test's outage: stopped, and not restarted until released
        self._released = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._supervise(), name=f"container-{self.name}")

    async def _announce(self, phase: str) -> None:
        if self.announce is not None:
            await self.announce(self.spec, phase)

    def _restarts(self, code: int) -> bool:
        if self.restart_policy == "Never":
            return False
        return self.restart_policy != "OnFailure" or code != 0

    async def _supervise(self) -> None:
        """Run, wait, restart with back-off by the restart policy, until stopped."""
        failures = 0
        ran = False
        while not self.stopping:
            if self.held:
                self.state = {"waiting": {"reason": "ContainerHeld",
                                          "message": "stopped by the simulation"}}  # fmt: skip
                self.on_change()
                await self._released.wait()
                self._released.clear()
                self.restart_count += int(ran)
                failures = 0
            began = time.monotonic()
            code = await self._run_once()
            ran = ran or code is not None
            if self.stopping:
                return
            if self.held:
                continue
            if code is not None and not self._restarts(code):
                self.done = True
                self.on_change()
                return
            if time.monotonic() - began > 2 * self.kubelet.backoff_cap:
                failures = 0  # it ran well for a while: kubelet resets the back-off
            delay = backoff(failures, self.kubelet.backoff_base, self.kubelet.backoff_cap)
            failures += 1
            if code is not None:  # a config error keeps its own waiting reason
                self.state = {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {delay:g}s restarting failed container={self.name} "
                        f"pod={self.pod_name}",
                    }
                }
                self.on_change()
            await asyncio.sleep(delay)
            if code is not None:
                self.restart_count += 1

    async def _run_once(self) -> int | None:
        """One run; its exit code, or None when it could not even be configured."""
        try:
            self.launch = await self.make_launch()
        except ConfigError as err:
            self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(err)}}
            self.on_change()
            return None
        self._rotate_logs()
        probe_task: asyncio.Task[None] | None = None
        await self._announce("pull")
        await self._announce("created")
        try:
            self.proc = await self.kubelet.executor.start(self.launch, self.log_path)
        except (StartError, OSError) as err:
            self.proc = None
            self._set_terminated(128, "StartError", str(err))
            return 128
        await self._announce("started")
        self.state = {"running": {"startedAt": now()}}
        self.started = not self.spec.get("startupProbe")
        self.ready = self.started and not self.spec.get("readinessProbe")
        self.on_change()
        probe_task = asyncio.create_task(self._probe_all(), name=f"probes-{self.name}")
        try:
            code = await self.proc.wait()
            # As when a PID namespace's init exits: the rest of the container goes too.
            self.proc.signal(signal.SIGKILL)
        finally:
            probe_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe_task
        self._set_terminated(code, "Completed" if code == 0 else "Error", "")
        return code

    def _rotate_logs(self) -> None:
        """The last run's log becomes the previous one; older runs are kept, in order, in
        `<name>.history.log` (what a node's log rotation would have kept)."""
        if not self.log_path.exists():
            return
        if self.previous_log.exists():
            with self.history_log.open("ab") as history:
                history.write(self.previous_log.read_bytes())
        self.log_path.replace(self.previous_log)

    def _set_terminated(self, code: int, reason: str, message: str) -> None:
        terminated: Obj = {"exitCode": code, "reason": reason, "finishedAt": now()}
        started = (self.state.get("running") or {}).get("startedAt")
        if started:
            terminated["startedAt"] = started
        if message:
            terminated["message"] = message
        self.last_state = {"terminated": terminated}
        self.state = {"terminated": terminated}
        self.started = False
        self.ready = False
        self.on_change()

    # --- probes -------------------------------------------------------------------------

    def _period(self, probe: Mapping[str, Any], key: str, default: float) -> float:
        value = float(probe.get(key, default))
        cap = self.kubelet.probe_period_cap
        return min(value, cap) if cap is not None else value

    @staticmethod
    def _failure_threshold(probe: Mapping[str, Any], kind: str, period: float) -> int:
        """failureThreshold; for the probes that restart the container (startup, liveness)
        probed faster than their periodSeconds (the cap), as many more failures as keep
        their window (periodSeconds x failureThreshold) in wall time: a program that starts
        slowly on a loaded machine must not be restarted where the kubelet's own pace
        would have waited (readiness only flips Ready, and stays quick)."""
        threshold = int(probe.get("failureThreshold", 3))
        if kind == "readiness" or period <= 0:
            return threshold
        window = float(probe.get("periodSeconds", 10)) * threshold
        return max(threshold, math.ceil(window / period - 1e-9))

    async def _exec_probe(self, argv: Sequence[str], timeout: float) -> bool:
        if self.proc is None or self.launch is None:
            return False
        return await self.kubelet.executor.probe(self.proc, self.launch, argv, timeout)

    async def _probe_once(self, probe: Mapping[str, Any]) -> bool:
        return await probes.attempt(
            dict(probe), run_exec=self._exec_probe, host=self.host, ports=self.ports
        )

    async def _probe_all(self) -> None:
        """Startup first; then readiness (drives Ready) and liveness (restarts) together."""
        startup = self.spec.get("startupProbe")
        if startup and not await self._run_probe(startup, "startup"):
            return
        tasks = [
            asyncio.create_task(self._run_probe(p, kind))
            for kind in ("readiness", "liveness")
            if (p := self.spec.get(f"{kind}Probe"))
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    async def _run_probe(self, probe: Mapping[str, Any], kind: str) -> bool:
        """Loop one probe; returns True once a startup probe passed, False after a kill."""
        await asyncio.sleep(self._period(probe, "initialDelaySeconds", 0))
        period = self._period(probe, "periodSeconds", 10)
        failure_threshold = self._failure_threshold(probe, kind, period)
        success_threshold = int(probe.get("successThreshold", 1))
        successes = failures = 0
        proc = self.proc
        # Only while this run of the container lives (kubelet does not probe a dead one):
        # a probe loop must never outlive its run, even if a cancel was lost.
        while proc is not None and proc.returncode is None and not self.stopping:
            if await self._probe_once(probe):
                successes, failures = successes + 1, 0
                self.probe_passes[kind] = self.probe_passes.get(kind, 0) + 1
            else:
                successes, failures = 0, failures + 1
            if kind == "startup" and successes >= 1:
                self.started = True
                self.ready = not self.spec.get("readinessProbe")
                self.on_change()
                return True
            if kind == "readiness":
                if successes >= success_threshold and not self.ready:
                    self.ready = True
                    self.on_change()
                elif failures >= failure_threshold and self.ready:
                    self.ready = False
                    self.on_change()
            elif failures >= failure_threshold:  # startup or liveness: restart the container
                log.info("container %s failed its %s probe; restarting", self.name, kind)
                await self.signal(signal.SIGTERM)
                await asyncio.sleep(self.grace)
                await self.signal(signal.SIGKILL)
                return False
            await asyncio.sleep(period)
        return False

    # --- status and stopping -----------------------------------------------------------

    def status(self, image: str) -> Obj:
        entry: Obj = {
            "name": self.name,
            "image": image,
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
        }
        if self.last_state and "terminated" not in self.state:  # running again, or backing off
            entry["lastState"] = self.last_state
        return entry

    async def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.signal(sig)

    async def hold(self, grace: float) -> None:
        """Stop the container (SIGTERM, then SIGKILL after `grace`) and keep it stopped
        until `release`: an outage of one program that a test brings about."""
        self.held = True
        await self.signal(signal.SIGTERM)
        proc = self.proc
        if proc is not None and proc.returncode is None:
            try:
                async with asyncio.timeout(grace):
                    await proc.wait()
            except TimeoutError:
                await self.signal(signal.SIGKILL)
                await proc.wait()

    def release(self) -> None:
        """Start a held container again at once."""
        if self.held:
            self.held = False
            self._released.set()

    async def stop(self, grace: float) -> None:
        """SIGTERM, wait up to `grace` seconds, SIGKILL; no restart afterwards."""
        self.stopping = True
        await self.signal(signal.SIGTERM)
        if self.proc is not None:
            try:
                async with asyncio.timeout(grace):
                    await self.proc.wait()
            except TimeoutError:
                await self.signal(signal.SIGKILL)
                await self.proc.wait()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        # Nothing of the container outlives the pod: not a process spawned while the task
        # was being cancelled, not the orphans of an exec'd command.
        if self.proc is not None:
            self.proc.signal(signal.SIGKILL)
