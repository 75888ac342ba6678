"""Containers as real processes in their own mount namespace (the sim's container runtime).

`SandboxExecutor` is the simulated kubelet's default `ContainerExecutor`: each container
is a process started through `sandbox_init.py` (see there for what the container gets),
as root, which then becomes the container's user; exec probes and `kubectl exec` join the
running container's namespaces. The isolation is a file-system view, a UTS name and a
user: no PID, network or cgroup isolation, no seccomp, no capability drop. It is meant
for the driver and for workloads an admin trusts, not for untrusted manifests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sim.cluster.privileges import Privileges

INIT = Path(__file__).with_name("sandbox_init.py")


class StartError(Exception):
    """A container could not be started; the message is the runtime's reason."""


@dataclass(frozen=True)
class Mount:
    """A bind mount (or a tmpfs when `type` is "tmpfs") into the container."""

    source: str
    target: str
    readonly: bool = False
    type: str = "bind"


@dataclass(frozen=True)
class Device:
    """A device node made in the container's /dev."""

    path: str
    type: str
    major: int
    minor: int
    mode: int = 0o666
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class Launch:
    """Everything needed to run one container, resolved from the pod spec."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    uid: int = 0
    gid: int = 0
    groups: tuple[int, ...] = ()
    cwd: str = "/"
    hostname: str = ""
    mounts: tuple[Mount, ...] = ()
    devices: tuple[Device, ...] = ()
    readonly_root: bool = False
    privileges: Privileges = field(default_factory=Privileges)
    state_dir: str = ""  # where the container's root and writable layer are mounted
    # For executors without mount namespaces (in-process): credentials as a file path.
    kubeconfig: str = ""
    image_known: bool = False  # the project's image (in-process executors run those)
    # Paths every user must reach (the image's programs and interpreter; see sandbox_init).
    traverse: tuple[str, ...] = ()
    # The mount namespace (a /proc/PID/ns/mnt path) the container is made from; "" is
    # this process's. An upstream kubelet's volumes exist only in its own (sim/cri).
    host_namespace: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def host_path(self, container_path: str) -> str | None:
        """The host path mounted at `container_path`, if any."""
        for mount in self.mounts:
            if mount.target == container_path and mount.type == "bind":
                return mount.source
        return None

    def spec(self, argv: Sequence[str] | None = None) -> dict[str, Any]:
        """What sandbox_init.py reads: this container, or `argv` run inside it."""
        return {
            "argv": list(argv if argv is not None else self.argv),
            "env": dict(self.env),
            "uid": self.uid,
            "gid": self.gid,
            "groups": list(self.groups),
            "cwd": self.cwd,
            "hostname": self.hostname,
            "mounts": [asdict(m) for m in self.mounts],
            "devices": [asdict(d) for d in self.devices],
            "readonly_root": self.readonly_root,
            "capabilities": self.privileges.numbers(),
            "privileged": self.privileges.privileged,
            "no_new_privs": self.privileges.no_new_privs,
            "state_dir": self.state_dir,
            "traverse": list(self.traverse),
            "host_namespace": self.host_namespace,
            "parent_pid": os.getpid(),
        }


def _write_spec(spec: Mapping[str, Any], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="spec-", suffix=".json", dir=directory)
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    return Path(name)


def _namespace(pid: int) -> str:
    try:
        return str(Path(f"/proc/{pid}/ns/mnt").readlink())
    except OSError:
        return ""


def namespace_members(namespace: str) -> list[int]:
    """The processes in mount namespace `namespace` (`mnt:[inode]`): a container's, its
    main process's children and everything exec'd into it."""
    if not namespace:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _namespace(int(entry.name)) == namespace:
            found.append(int(entry.name))
    return found


class SandboxContainer:
    """A started container: its main process, and its mount namespace, by which every
    process of the container is found when it is killed (there is no PID namespace).

    The namespace is held open until the container is killed for good: a namespace's
    inode number is reused once it is freed, and a stale one would name another
    container's processes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        try:
            self._held = os.open(f"/proc/{proc.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._held = -1
        self.namespace = _namespace(proc.pid) if self._held >= 0 else ""

    def _release(self) -> None:
        if self._held >= 0:
            os.close(self._held)
            self._held = -1
        self.namespace = ""

    def __del__(self) -> None:
        self._release()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def wait(self) -> int:
        return await self.proc.wait()

    def signal(self, sig: int) -> None:
        """`sig` to the main process's group; SIGKILL to every process of the container,
        even after the main one ended (an exec'd command's orphans die with it)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
        if sig == 9:
            for pid in namespace_members(self.namespace):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            if self.proc.returncode is not None:  # the container is gone for good
                self._release()


async def _spawn(
    init_args: list[str],
    spec: Mapping[str, Any],
    spec_dir: Path,
    *,
    stdin: Any,
    stdout: Any,
    stderr: Any,
) -> asyncio.subprocess.Process:
    """Start `sandbox_init.py <init_args> SPEC STATUS_FD`; StartError with the runtime's
    reason when it fails before exec."""
    path = _write_spec(spec, spec_dir)
    read_end, write_end = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", str(INIT), *init_args, str(path), str(write_end),
            stdin=stdin, stdout=stdout, stderr=stderr,
            pass_fds=(write_end,), start_new_session=True, env={},
        )  # fmt: skip
    except OSError as err:
        os.close(read_end)
        raise StartError(f"cannot start the container runtime: {err}") from None
    finally:
        os.close(write_end)
    try:
        reason = await asyncio.to_thread(_read_all, read_end)
    except BaseException:
        # Cancelled (the pod is stopping) after the process was forked: it must not
        # outlive the pod, and nobody else knows it exists.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        raise
    finally:
        path.unlink(missing_ok=True)
    if reason:
        await proc.wait()
        raise StartError(reason)
    return proc


def _read_all(fd: int) -> str:
    """Read the status pipe to EOF and close it (here: the caller may be cancelled while
    this thread still reads)."""
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")


class SandboxExecutor:
    """Runs containers, exec probes and execs as sandboxed processes (module doc)."""

    async def start(self, launch: Launch, log_path: Path) -> SandboxContainer:
        with log_path.open("ab") as out:
            proc = await _spawn(
                ["run"], launch.spec(), Path(launch.state_dir),
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        return SandboxContainer(proc)

    async def start_piped(self, launch: Launch) -> SandboxContainer:
        """Start the container with its stdout and stderr as pipes (`proc.stdout`,
        `proc.stderr`): a CRI runtime writes them to the kubelet's log in its format."""
        proc = await _spawn(
            ["run"], launch.spec(), Path(launch.state_dir), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return SandboxContainer(proc)

    async def exec(
        self, container: Any, launch: Launch, argv: Sequence[str], *, stdin: Any = None,
        stdout: Any = None, stderr: Any = None,
    ) -> asyncio.subprocess.Process:  # fmt: skip
        """Start `argv` inside the running `container` with its user and env."""
        pid = getattr(container, "pid", None)
        if pid is None or container.returncode is not None:
            raise StartError("container not running")
        return await _spawn(
            ["join", str(pid)], launch.spec(argv=argv), Path(launch.state_dir),
            stdin=asyncio.subprocess.DEVNULL if stdin is None else stdin,
            stdout=asyncio.subprocess.DEVNULL if stdout is None else stdout,
            stderr=asyncio.subprocess.DEVNULL if stderr is None else stderr,
        )  # fmt: skip

    async def probe(
        self, container: Any, launch: Launch, argv: Sequence[str], timeout: float
    ) -> bool:
        """An exec probe: True if `argv` exited 0 within `timeout` seconds."""
        try:
            proc = await self.exec(container, launch, argv)
        except StartError:
            return False
        try:
            async with asyncio.timeout(timeout):
                return await proc.wait() == 0
        except TimeoutError:
            return False
        finally:
            # Timed out, or the pod stopped (cancelled) with the probe still running: a
            # probe never outlives its container.
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(proc.wait())


def can_sandbox() -> str:
    """"" when this process may create containers, else why not."""
    if os.geteuid() != 0:
        return (
            "the simulated kubelet runs containers in their own mount namespace with real "
            "device nodes, which needs root: run the sim as root"
        )
    return ""
