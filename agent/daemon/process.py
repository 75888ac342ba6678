"""Supervise the `nvidia-imex -c <config>` child of the daemon (the reference's way, fixed).

The reference's supervisor is `ProcessManager` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-daemon/process.go.
What we do differently from the reference, and why:

* A crashed child is restarted after a capped exponential backoff with jitter, not once a
  second forever: a crash-looping IMEX must not flood the log or hammer its peers. The
  backoff resets once a child has run `stable_after` seconds.
* `stop()` escalates to SIGKILL after `grace` (for the whole process group the child leads,
  so nothing it spawned keeps our pipes open) and always reaps: no zombies, no hang on an
  IMEX that ignores SIGTERM.
* Child stdout/stderr go through our logger line by line, prefixed, so IMEX output is in the
  container log in our format; the pipes are drained to EOF before an exit is reported.
* A leftover `nvidia-imex` from a previous run of this container that still listens on our
  ports (https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/654) can be found and
  ended (strays.py `find_stray` / `kill_stray`) before we start ours.

How the child is started is an `ImexLauncher` (default: `SubprocessLauncher`, a real process
in its own process group). The simulated cluster at scale passes one that runs the fake IMEX
as a task in its own process instead, so hundreds of daemons fit on one machine while this
supervision code (backoff, escalation, reaping, output forwarding) stays the code under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, runtime_checkable

from agent.daemon.strays import kill_stray
from runtime.logsetup import vlog

log = logging.getLogger(__name__)

# A line longer than this is forwarded in pieces rather than breaking the reader.
_LINE_LIMIT = 1 << 20
# How long to wait for the pipes to reach EOF once the child is gone.
_DRAIN_TIMEOUT = 0.5
# Jittered delays lie in [(1 - _JITTER) * d, d]: still non-decreasing while doubling.
_JITTER = 0.2


class ImexStartError(RuntimeError):
    """The child could not be executed at all (missing binary, permissions)."""


class ImexChild(Protocol):
    """One started `nvidia-imex`: what `ImexProcess` does with it (the subset of
    `asyncio.subprocess.Process` it uses, plus killing the child's whole group)."""

    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None:
        """Deliver `sig`; ProcessLookupError when the child is already gone."""

    def kill_group(self) -> None:
        """SIGKILL the child and anything it started (its process group)."""


class ImexLauncher(Protocol):
    """Starts `nvidia-imex` children and ends strays of earlier runs (see module doc)."""

    async def spawn(
        self, command: Sequence[str], env: Mapping[str, str] | None, limit: int
    ) -> ImexChild:
        """Start `command` with `env` (None: ours), stdout/stderr readable with line
        `limit`; OSError when it cannot be started at all."""
        ...

    async def kill_stray(
        self, binary_name: str, *, ports: Iterable[int], addresses: Iterable[str] | None,
        exclude: Iterable[int] = (),
    ) -> list[int]:
        """End leftover `binary_name` daemons listening on `ports` at `addresses`, except
        the pids in `exclude` (a child just adopted)."""
        ...


@runtime_checkable
class AdoptingLauncher(ImexLauncher, Protocol):
    """A launcher whose children outlive their supervisor (agent placement): the next
    supervisor of the same domain adopts the child it recorded instead of starting one."""

    async def adopt(self, command: Sequence[str]) -> ImexChild | None:
        """The recorded child if it still runs `command`; None otherwise."""
        ...

    def forget(self) -> None:
        """The child was stopped on purpose: drop its record."""


class SubprocessChild:
    """An `asyncio.subprocess.Process` leading its own process group (its stdout/stderr
    None when they do not go to pipes)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def wait(self) -> int:
        return await self._proc.wait()

    def send_signal(self, sig: int) -> None:
        self._proc.send_signal(sig)

    def kill_group(self) -> None:
        # Only called while the child is unreaped or its group still has members, so the
        # pgid cannot have been reused by an unrelated process.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)


class SubprocessLauncher:
    """The default: a real process (its own session) and a psutil search for strays."""

    async def spawn(
        self, command: Sequence[str], env: Mapping[str, str] | None, limit: int
    ) -> ImexChild:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            limit=limit,
            # Its own process group: SIGKILL escalation reaches anything it spawned, and
            # a terminal's SIGINT to our group does not bypass our shutdown order.
            start_new_session=True,
        )
        return SubprocessChild(proc)

    async def kill_stray(
        self, binary_name: str, *, ports: Iterable[int], addresses: Iterable[str] | None,
        exclude: Iterable[int] = (),
    ) -> list[int]:
        return await kill_stray(binary_name, ports=ports, addresses=addresses, exclude=exclude)


# How long a SIGUSR1 waits after a fork: the window before the new program installs its
# handler (the sim's launcher traps it at once; seen killing a child signalled 0.0 s after
# its start). Nothing is lost: the signal is only deferred, and a child that starts reads
# the hosts file anyway.
SPAWN_SETTLE: Final = 0.2


@dataclass(eq=False)
class _Child:
    """One started process and the tasks that belong to it."""

    proc: ImexChild
    started: float
    readers: list[asyncio.Task[None]] = field(default_factory=list)
    watcher: asyncio.Task[None] | None = None
    stopping: bool = False  # we asked it to exit: its exit is not a crash
    last_reload: float | None = None  # loop time of the last SIGUSR1 sent to it
    reload_later: asyncio.Task[None] | None = None  # the one deferred SIGUSR1, if any
    reload_after: float = float("-inf")  # loop time before which a SIGUSR1 waits (SPAWN_SETTLE)

    @property
    def pid(self) -> int:
        return self.proc.pid


class ImexProcess:
    """Runs one `nvidia-imex` child, restarts it when it dies, stops it cleanly.

    All methods must be called from the event loop that runs the supervisor; start and stop
    are serialized by a lock so a restart can never race a stop.
    """

    def __init__(
        self,
        command: list[str],
        *,
        env: Mapping[str, str] | None = None,
        log_prefix: str = "nvidia-imex",
        grace: float = 10.0,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        stable_after: float = 30.0,
        rng: random.Random | None = None,
        launcher: ImexLauncher | None = None,
        on_crash: Callable[[int, float, int, float], None] | None = None,
        reload_interval: float = 5.0,
    ) -> None:
        """`on_crash(code, ran, restart, delay)` is called when the child exits although
        nobody asked it to: its exit status, how long it ran, the number of the restart now
        scheduled and its delay. It must not block; an exception from it is only logged.
        `reload_interval`: at most one SIGUSR1 per this many seconds (signal_reload)."""
        if not command:
            raise ValueError("command must not be empty")
        self.command = list(command)
        self.env = dict(env) if env is not None else None
        self.log_prefix = log_prefix
        self.grace = grace
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.stable_after = stable_after
        self._rng = rng or random.Random()
        self.launcher: ImexLauncher = launcher or SubprocessLauncher()
        self.on_crash = on_crash
        self._lock = asyncio.Lock()
        self._child: _Child | None = None
        self._wanted = False  # whether the child should be running (restart on exit)
        self._failures = 0  # consecutive short-lived runs: the backoff exponent
        self._restart_task: asyncio.Task[None] | None = None
        self.restarts = 0
        self.last_exit: int | None = None
        self.last_delay: float | None = None
        self.reload_interval = reload_interval
        self.reloads_sent = 0  # SIGUSR1s delivered
        self.reloads_coalesced = 0  # requests folded into a pending or recent SIGUSR1
        self.adopted = False  # the running child was started by an earlier supervisor

    # --- state ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """A child exists and has not exited yet."""
        return self._child is not None and self._child.proc.returncode is None

    @property
    def pid(self) -> int | None:
        """The running child's pid, or None."""
        return self._child.pid if self.running and self._child else None

    @property
    def started_at(self) -> float | None:
        """time.monotonic() when the running child was started, or None."""
        return self._child.started if self.running and self._child else None

    @property
    def restart_pending(self) -> bool:
        """The watchdog is waiting out a backoff before starting the child again."""
        return self._restart_task is not None and not self._restart_task.done()

    # --- control --------------------------------------------------------------------------

    async def ensure_started(self) -> bool:
        """Start the child unless it runs; True if a fresh process was started.

        While the watchdog waits out a backoff this returns False without starting: calling
        it on every update must not defeat the backoff of a crash-looping IMEX.
        """
        async with self._lock:
            self._wanted = True
            if self.running or self.restart_pending:
                return False
            await self._spawn()
            return True

    async def restart(self) -> None:
        """Stop the child (if any) and start a new one now, cancelling any pending backoff."""
        async with self._lock:
            self._wanted = True
            await self._cancel_restart()
            await self._terminate()
            await self._spawn()

    async def signal_reload(self) -> bool:
        """Have the child re-read the hosts file and reconnect its peers (SIGUSR1); False if
        no child runs.

        At most one SIGUSR1 per `reload_interval`: nvidia-imex acts on at most one reload
        per interval, so a burst of peer changes (many daemons joining at once) costs one
        signal now and one at the end of the interval that covers everything after it,
        instead of one per peer. Errors are only logged, as in the reference: a missed
        reload is not fatal.
        """
        child = self._child
        if child is None or not self.running:
            log.info("Not sending SIGUSR1: %s is not running", self.log_prefix)
            return False
        if child.reload_later is not None and not child.reload_later.done():
            self.reloads_coalesced += 1
            return True
        loop = asyncio.get_running_loop()
        now = loop.time()
        wait = max(0.0 if child.last_reload is None
                   else child.last_reload + self.reload_interval - now,
                   child.reload_after - now)
        if wait > 0:
            self.reloads_coalesced += 1
            vlog(log, 4, "SIGUSR1 to pid %d deferred by %.1fs", child.pid, wait)
            child.reload_later = loop.create_task(self._reload_later(child, wait))
            return True
        return self._send_reload(child)

    async def _reload_later(self, child: _Child, wait: float) -> None:
        await asyncio.sleep(wait)
        if self._child is child and self.running and not child.stopping:
            self._send_reload(child)

    def _send_reload(self, child: _Child) -> bool:
        child.last_reload = asyncio.get_running_loop().time()
        try:
            child.proc.send_signal(signal.SIGUSR1)
        except ProcessLookupError:
            log.warning("SIGUSR1 to pid %d failed: process is gone", child.pid)
            return False
        self.reloads_sent += 1
        log.info("Sent SIGUSR1 to %s pid %d", self.log_prefix, child.pid)
        return True

    async def stop(self) -> None:
        """SIGTERM, SIGKILL after `grace`, reap; idempotent, fine when never started."""
        async with self._lock:
            self._wanted = False
            await self._cancel_restart()
            await self._terminate()
            if isinstance(self.launcher, AdoptingLauncher):
                self.launcher.forget()

    async def adopt(self) -> bool:
        """Take over the child an earlier supervisor left running (agent placement), if
        the launcher recorded one that still runs our command; True if one runs now."""
        async with self._lock:
            if self.running:
                return True
            if not isinstance(self.launcher, AdoptingLauncher):
                return False
            proc = await self.launcher.adopt(self.command)
            if proc is None:
                return False
            self._wanted = True
            self._track(proc)
            self.adopted = True
            log.info("Adopted running %s pid %d", self.log_prefix, proc.pid)
            return True

    async def detach(self) -> None:
        """Stop supervising and leave the child running (the agent exits or restarts; its
        successor adopts the child). Nothing is signalled."""
        async with self._lock:
            self._wanted = False
            await self._cancel_restart()
            child, self._child = self._child, None
            if child is None:
                return
            child.stopping = True
            tasks = [t for t in (child.reload_later, child.watcher, *child.readers)
                     if t is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if child.proc.returncode is None:
                log.info("Leaving %s pid %d running", self.log_prefix, child.pid)

    # --- internals ------------------------------------------------------------------------

    async def _spawn(self) -> None:
        log.info("Start: %s", " ".join(self.command))
        try:
            proc = await self.launcher.spawn(self.command, self.env, _LINE_LIMIT)
        except OSError as err:
            raise ImexStartError(f"cannot start {self.command[0]}: {err}") from err
        log.info("Started process with pid %d", proc.pid)
        self._track(proc).reload_after = asyncio.get_running_loop().time() + SPAWN_SETTLE
        self.adopted = False

    def _track(self, proc: ImexChild) -> _Child:
        child = _Child(proc=proc, started=time.monotonic())
        loop = asyncio.get_running_loop()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                child.readers.append(loop.create_task(self._forward(stream, proc.pid)))
        child.watcher = loop.create_task(self._watch(child))
        self._child = child
        return child

    async def _forward(self, stream: asyncio.StreamReader, pid: int) -> None:
        """Log each line of one pipe until EOF; a partial last line is logged too."""
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # longer than the limit: forward what is buffered
                raw = await stream.read(_LINE_LIMIT)
            if not raw:
                return
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            log.info("%s[%d]: %s", self.log_prefix, pid, line)

    async def _watch(self, child: _Child) -> None:
        """Reap the child, drain its output, report the exit, schedule a restart if unwanted."""
        code = await child.proc.wait()
        await self._drain(child)
        self.last_exit = code
        ran = time.monotonic() - child.started
        # The reference daemon's words (its process.go), then which child and how long it ran.
        (log.info if code == 0 else log.warning)(
            "Child exited with code %d (%s pid %d, after %.1fs)", code, self.log_prefix,
            child.pid, ran)
        if child.stopping or not self._wanted or self._child is not child:
            return
        log.warning("Watchdog: child terminated unexpectedly (%s)", self.log_prefix)
        self._schedule_restart(ran)
        if self.on_crash is not None:
            try:
                self.on_crash(code, ran, self.restarts + 1, self.last_delay or 0.0)
            except Exception:
                log.exception("reporting the exit of %s failed", self.log_prefix)

    async def _drain(self, child: _Child) -> None:
        """Wait for both pipes to reach EOF; kill leftovers of the child's group if needed."""
        if not child.readers:
            return
        _, pending = await asyncio.wait(child.readers, timeout=_DRAIN_TIMEOUT)
        if pending:
            # Something the child spawned still holds the pipes open. Its group still has
            # members, so the pgid cannot have been reused by an unrelated process.
            log.warning("Killing leftovers of pid %d that keep its output open", child.pid)
            child.proc.kill_group()
            _, pending = await asyncio.wait(pending, timeout=_DRAIN_TIMEOUT)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def next_delay(self, ran: float) -> float:
        """Backoff before the next start, given how long the last child ran."""
        if ran >= self.stable_after:
            self._failures = 0
        nominal = min(self.backoff_max, self.backoff_base * 2.0**self._failures)
        self._failures = min(self._failures + 1, 62)  # keep 2**n a sane float
        return nominal * (1.0 - _JITTER * self._rng.random())

    def _schedule_restart(self, ran: float) -> None:
        delay = self.next_delay(ran)
        self.last_delay = delay
        log.info("Watchdog: starting %s again in %.2fs", self.log_prefix, delay)
        self._restart_task = asyncio.get_running_loop().create_task(self._restart_later(delay))

    async def _restart_later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        async with self._lock:
            if not self._wanted or self.running:
                return
            try:
                await self._spawn()
            except ImexStartError as err:
                # Transient (e.g. binary being replaced): retry with a longer delay.
                log.error("Watchdog: %s", err)
                self._schedule_restart(0.0)
                return
            self.restarts += 1

    async def _cancel_restart(self) -> None:
        task, self._restart_task = self._restart_task, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _terminate(self) -> None:
        """Stop the current child if it runs, then wait until its watcher is done."""
        child = self._child
        if child is None:
            return
        child.stopping = True
        if child.reload_later is not None:
            child.reload_later.cancel()
            await asyncio.gather(child.reload_later, return_exceptions=True)
        if child.proc.returncode is None:
            log.info("Stop: send SIGTERM to pid %d", child.pid)
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(self.grace):
                    await child.proc.wait()
            except TimeoutError:
                log.warning(
                    "pid %d still running %.1fs after SIGTERM: sending SIGKILL",
                    child.pid,
                    self.grace,
                )
                # Still unreaped, so the pgid is certainly the child's own group.
                child.proc.kill_group()
                await child.proc.wait()
        if child.watcher is not None:
            await asyncio.gather(child.watcher, return_exceptions=True)
