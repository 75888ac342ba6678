"""`compute-domain-agent prestart`: the kubelet plugin's init container.

As the reference driver's kubelet-plugin-prestart.sh: the plugin needs the NVIDIA driver
under the driver root, and a driver container (the GPU Operator's) may install it only
after the plugin pod started, so the init container waits for it instead of letting the
plugin crash-loop. Every `--interval` it looks for an `nvidia-smi` and a
`libnvidia-ml.so.1` under the driver root as mounted in the container (`--driver-root`,
the files found as `agent.discovery.findfile` finds them: links resolved inside the
root), runs `nvidia-smi --version` with a clean environment that preloads the library it
found (in the container only the driver root holds it), and leaves with status 0 once
that exits 0. Each attempt prints one line of what it found; the first attempt and every
6th after it also print why it may be missing and what to check (`nvidiaDriverRoot` in the
Helm values). Only a usage error exits non-zero; SIGTERM (the pod deleted) exits 0, as the
reference's script does.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from agent.discovery.findfile import (
    LIBRARY_SEARCH_DIRS,
    NVIDIA_SMI,
    NVML_LIBRARY,
    FoundFile,
    find_file,
)
from api import names
from runtime.cli import Subcommands, env_option, parse_duration

# Where a driver root keeps nvidia-smi and the NVML library (the reference's script's
# places, and the plugin's library places too, so that what passes here the plugin finds).
SMI_DIRS: Final = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/opt/bin")
LIB_DIRS: Final = tuple(
    dict.fromkeys(
        (
            "/usr/lib64",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/lib64",
            "/usr/lib",
            "/lib",
            *LIBRARY_SEARCH_DIRS,
        )
    )
)
HINT_EVERY: Final = 6  # attempts between two hints (the first attempt gives one)
SMI_TIMEOUT: Final = 30.0  # seconds `nvidia-smi --version` may take (a sick GPU hangs it)
DEFAULT_INTERVAL: Final = 10.0
_LISTED: Final = 20  # entries of the driver root a hint lists

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class Found:
    """One look at the driver root."""

    smi: FoundFile | None
    lib: FoundFile | None
    error: str = ""  # why `nvidia-smi --version` failed ("" once it exited 0, or not run)
    version: str = ""  # the first line it printed

    @property
    def ok(self) -> bool:
        return self.smi is not None and self.lib is not None and not self.error


def check(root: Path, *, timeout: float = SMI_TIMEOUT, run: Runner = subprocess.run) -> Found:
    """Look for the files under `root`; when both are there, run `nvidia-smi --version`."""
    smi = find_file(root, NVIDIA_SMI, SMI_DIRS)
    lib = find_file(root, NVML_LIBRARY, LIB_DIRS)
    if smi is None or lib is None:
        return Found(smi, lib)
    env = {}
    # As the reference: nvidia-smi's only dependency, preloaded from the driver root. An
    # empty file is no library (ld.so would ignore it, with a warning): not preloaded.
    if _size(lib.real_path):
        env["LD_PRELOAD"] = str(lib.real_path)
    try:
        done = run(
            [str(smi.real_path), "--version"],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return Found(smi, lib, f"`nvidia-smi --version` did not finish within {timeout:g}s")
    except OSError as err:
        return Found(smi, lib, f"`nvidia-smi --version` could not run: {err.strerror or err}")
    output = (done.stdout or "") + (done.stderr or "")
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if done.returncode != 0:
        said = f": {lines[-1]}" if lines else ""
        return Found(smi, lib, f"`nvidia-smi --version` exited {done.returncode}{said}")
    return Found(smi, lib, version=lines[0] if lines else "")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _where(root: Path, found: FoundFile | None) -> str:
    return f"{root}{found.path}" if found is not None else "not found"


def describe(root: Path, host_root: str, found: Found) -> str:
    """The line one attempt prints."""
    parts = [
        f"{NVIDIA_SMI}: {_where(root, found.smi)}",
        f"{NVML_LIBRARY}: {_where(root, found.lib)}",
    ]
    if found.error:
        parts.append(found.error)
    return f"{root} ({host_root} on the host): " + ", ".join(parts)


def hint(root: Path, host_root: str, found: Found) -> str:
    """What to check, printed on the first attempt and every HINT_EVERY-th after it."""
    lines = []
    if found.smi is None or found.lib is None:
        lines.append(
            "Has the NVIDIA GPU driver been installed? It is expected under the driver root "
            f"(NVIDIA_DRIVER_ROOT={host_root} on the host, mounted at {root} here)."
        )
        lines.append(f"{root} holds: {_listing(root)}")
    else:
        lines.append(
            "nvidia-smi is there but does not answer: is the kernel module loaded and the "
            "driver container (if any) done installing?"
        )
    lines.append(
        f"NVIDIA_DRIVER_ROOT={host_root} is the driver root on the host: / for a "
        "host-installed driver, /run/nvidia/driver for the GPU Operator's driver container; "
        "set nvidiaDriverRoot in the Helm values"
    )
    return "\n".join(f"hint: {line}" for line in lines)


def _listing(root: Path) -> str:
    try:
        entries = sorted(entry.name for entry in root.iterdir())
    except OSError as err:
        return f"nothing ({err.strerror or err})"
    if not entries:
        return "nothing (empty)"
    more = f", ... ({len(entries) - _LISTED} more)" if len(entries) > _LISTED else ""
    return ", ".join(entries[:_LISTED]) + more


def wait_for_driver(
    root: Path,
    host_root: str,
    interval: float,
    out: TextIO,
    *,
    sleep: Callable[[float], None] = time.sleep,
    look: Callable[[Path], Found] = check,
) -> Found:
    """Look every `interval` seconds until the driver is there; what was found then."""
    attempt = 0
    while True:
        found = look(root)
        if found.ok:
            return found
        print(f"attempt {attempt + 1}: {describe(root, host_root, found)}", file=out, flush=True)
        if attempt % HINT_EVERY == 0:
            print(hint(root, host_root, found), file=out, flush=True)
        attempt += 1
        sleep(interval)


def add_command(sub: Subcommands, environ: Mapping[str, str] | None = None) -> None:
    parser = sub.add_parser(
        "prestart", help="wait until the NVIDIA driver is under the driver root",
        description="The kubelet plugin's init container: wait until nvidia-smi and "
        "libnvidia-ml.so.1 are under the driver root and `nvidia-smi --version` succeeds.",
    )  # fmt: skip
    env_option(parser, "--driver-root", "--container-driver-root",
               env=names.ENV_CONTAINER_DRIVER_ROOT, type=Path,
               default=Path(names.DEFAULT_CONTAINER_DRIVER_ROOT),
               help="where the host's driver root is mounted in this container",
               environ=environ)  # fmt: skip
    env_option(parser, "--nvidia-driver-root", "--host-driver-root",
               env=(names.ENV_NVIDIA_DRIVER_ROOT, names.ENV_HOST_DRIVER_ROOT),
               default=names.DEFAULT_HOST_DRIVER_ROOT,
               help="the driver root as the host sees it (for the messages only)",
               environ=environ)  # fmt: skip
    env_option(parser, "--interval", env="PRESTART_INTERVAL", type=parse_duration,
               default=DEFAULT_INTERVAL, help="how long to wait between two looks",
               environ=environ)  # fmt: skip
    parser.set_defaults(handler=run_prestart)


def _sigterm(_sig: int, _frame: object) -> None:
    print("received SIGTERM", flush=True)
    raise SystemExit(0)


def run_prestart(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _sigterm)
    return prestart(args, sys.stdout)


def prestart(args: argparse.Namespace, out: TextIO,
             sleep: Callable[[float], None] = time.sleep) -> int:
    """The init container's work, printing to `out`: also what the simulated cluster's
    in-process nodes run in a thread, with a `sleep` that ends it when the pod goes."""
    root = Path(args.driver_root)
    host_root = str(args.nvidia_driver_root) or names.DEFAULT_HOST_DRIVER_ROOT
    found = wait_for_driver(root, host_root, float(args.interval), out, sleep=sleep)
    version = f" ({found.version})" if found.version else ""
    print(
        f"NVIDIA driver found under {root} ({host_root} on the host): "
        f"{_where(root, found.smi)}{version}, {_where(root, found.lib)}",
        file=out,
        flush=True,
    )
    return 0
