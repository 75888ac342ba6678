"""Is the host's own nvidia-imex daemon ready? (the reference's probe, READY test fixed)

In host-managed IMEX mode the node runs `nvidia-imex.service` itself and the plugin only
checks it before handing out a channel: `nvidia-imex-ctl -q` over the daemon's
command socket prints `READY` once the daemon has joined its domain. The reference
(`checkHostIMEXReady` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/nvlib.go)
accepts any output *containing* `READY`, which includes `NOT_READY`; we require a line
that is exactly `READY`, as the CD daemon does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from agent.discovery.findfile import IMEX_CTL_DIRS, candidate_paths, find_file
from api.names import IMEX_CTL_BINARY

CHROOT = "chroot"
IMEX_CONFIG_FILE = "/etc/nvidia-imex/config.cfg"
IMEX_SERVICE = "nvidia-imex.service"
_OUTPUT_LIMIT = 2000


class HostImexNotReadyError(Exception):
    """The host IMEX daemon is not (yet) usable; retryable, the message says what to check."""

    permanent = False


def _hint(socket_path: str) -> str:
    return (
        f"check that {IMEX_SERVICE} is running and that {IMEX_CONFIG_FILE} sets "
        f"IMEX_CMD_ENABLED=1 and IMEX_CMD_UNIX_DOMAIN_PATH={socket_path}"
    )


def _shorten(output: str) -> str:
    output = output.strip()
    if not output:
        return "(no output)"
    return output if len(output) <= _OUTPUT_LIMIT else output[:_OUTPUT_LIMIT] + "…"


def is_ready_output(output: str) -> bool:
    """Whether `nvidia-imex-ctl -q` output says READY: some line is exactly `READY`."""
    return any(line.strip() == "READY" for line in output.splitlines())


class HostImexProbe:
    """Runs `nvidia-imex-ctl -q` against the host daemon's command socket.

    `dev_root` is the host root as the plugin sees it (the reference's devRoot).
    With `use_chroot` (production) the tool runs as `chroot <dev_root>
    /usr/bin/nvidia-imex-ctl -q --u=<socket>` (the path it was found at), so it uses the
    host's libraries; without (the simulated cluster,
    where the driver root is a plain directory) the binary found under `dev_root` is run
    directly, with the socket path taken inside `dev_root`.
    """

    def __init__(
        self,
        dev_root: Path,
        socket_path: str,
        *,
        use_chroot: bool = True,
        timeout: float = 10.0,
    ) -> None:
        self.dev_root = Path(dev_root)
        self.socket_path = socket_path
        self.use_chroot = use_chroot
        self.timeout = timeout

    def command(self) -> list[str]:
        """The command line to run; HostImexNotReadyError if nvidia-imex-ctl is missing."""
        found = find_file(self.dev_root, IMEX_CTL_BINARY, IMEX_CTL_DIRS)
        if found is None:
            tried = ", ".join(candidate_paths(IMEX_CTL_BINARY, IMEX_CTL_DIRS))
            raise HostImexNotReadyError(
                f'{IMEX_CTL_BINARY} not found under driver root "{self.dev_root}": '
                f"looked in {tried} (is nvidia-imex installed on this node?)"
            )
        if self.use_chroot:
            # The path it was found at, not the bare name: PATH inside the chroot is this
            # process's PATH, which need not list the dir (e.g. /opt/bin) it lives in.
            return [CHROOT, str(self.dev_root), found.path, "-q", f"--u={self.socket_path}"]
        socket = self.dev_root / self.socket_path.lstrip("/")
        return [str(found.real_path), "-q", f"--u={socket}"]

    async def check(self) -> None:
        """Return if the host daemon reports READY, else raise HostImexNotReadyError."""
        argv = self.command()
        hint = _hint(self.socket_path)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                # Its own process group, so a timeout kills anything it started too.
                start_new_session=True,
            )
        except OSError as err:
            raise HostImexNotReadyError(f"cannot run {argv[0]}: {err}") from None
        try:
            async with asyncio.timeout(self.timeout):
                out, _ = await proc.communicate()
        except TimeoutError:
            await _kill(proc)
            raise HostImexNotReadyError(
                f"{IMEX_CTL_BINARY} -q did not answer within {self.timeout:g}s; {hint}"
            ) from None
        except BaseException:
            await _kill(proc)
            raise
        output = out.decode("utf-8", errors="replace")
        if proc.returncode != 0:
            raise HostImexNotReadyError(
                f"{IMEX_CTL_BINARY} -q exited with status {proc.returncode}: "
                f"{_shorten(output)}; {hint}"
            )
        if not is_ready_output(output):
            raise HostImexNotReadyError(
                f"host nvidia-imex daemon not ready: {_shorten(output)}; {hint}"
            )


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    await proc.wait()
