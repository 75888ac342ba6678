"""The base CDI spec: what an IMEX daemon container needs from the host driver.

Written once at startup as `k8s.compute-domain.nvidia.com-device_base.yaml` with one
device, `all`, which every daemon claim references (`…/device=all`). The daemon runs
`nvidia-imex` and `nvidia-imex-ctl` from the host's driver installation, so the device
gives the NVIDIA device nodes, those two binaries and NVML, and
`NVIDIA_VISIBLE_DEVICES=void` so that the NVIDIA runtime hook adds nothing on top.

Two sources, in order:

* `nvidia-ctk cdi generate --mode=management` when `nvidia-ctk` is on PATH: the same
  generator (nvcdi, management mode) the reference links in, so the spec matches it
  (`CreateStandardDeviceSpecFile` in
  https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/cdi.go).
* Otherwise, or if the toolkit fails, a builtin spec made from what the driver root
  holds. It is smaller (no ldcache or symlink hooks): exactly what the daemon runs.

Both are simplified, root-transformed and written with the minimal cdiVersion.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from agent.cdispecs.simplify import path_order, simplify_spec
from agent.cdispecs.transform import RootTransform
from agent.discovery.devnode import CharDevice, char_device_numbers
from agent.discovery.findfile import (
    IMEX_CTL_DIRS,
    IMEX_DIRS,
    NVML_LIBRARY,
    NVML_LIBRARY_DIRS,
    candidate_paths,
    find_file,
)
from agent.discovery.findfile import dev_root as default_dev_root
from api.names import (
    CDI_BASE_DEVICE,
    CDI_BASE_SPEC_ID,
    CDI_CLASS_DEVICE,
    CDI_KIND_DEVICE,
    CDI_VENDOR,
    ENV_NVIDIA_VISIBLE_DEVICES,
    IMEX_BINARY,
    IMEX_CTL_BINARY,
)
from cdi import (
    CDIError,
    ContainerEdits,
    Device,
    DeviceNode,
    Mount,
    Spec,
    minimum_version,
    spec_from_text,
    validate_spec,
    write_spec,
)

NVIDIA_CTK = "nvidia-ctk"
ENV_VISIBLE_DEVICES_VOID = f"{ENV_NVIDIA_VISIBLE_DEVICES}=void"
SOURCE_CTK = "nvidia-ctk"
SOURCE_BUILTIN = "builtin"
DEFAULT_CTK_TIMEOUT_S = 120.0

# The char devices nvcdi's management mode discovers under the dev root, and the
# names it leaves out (GPUDirect Storage, NVSwitch and NVLink management nodes).
DEVICE_GLOBS: tuple[str, ...] = (
    "/dev/nvidia*",
    "/dev/nvidia-caps/nvidia-cap*",
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-uvm",
    "/dev/nvidiactl",
    "/dev/nvidia-caps-imex-channels/channel*",
)
EXCLUDED_DEVICE_PREFIXES: tuple[str, ...] = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")
HOST_FILE_MOUNT_OPTIONS: tuple[str, ...] = ("ro", "nosuid", "nodev", "bind")

# (name, search dirs, container dir when found directly at the root as ROOT/NAME)
_HOST_FILES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (IMEX_BINARY, IMEX_DIRS, "/usr/bin"),
    (IMEX_CTL_BINARY, IMEX_CTL_DIRS, "/usr/bin"),
    (NVML_LIBRARY, NVML_LIBRARY_DIRS, "/usr/lib64"),
)

# What is a char device under the dev root, and its numbers (tests inject a fake).
CharDeviceProbe = Callable[[Path], CharDevice | None]


def _excluded(path: str) -> bool:
    return PurePosixPath(path).name.startswith(EXCLUDED_DEVICE_PREFIXES)


def find_device_nodes(
    dev_root: str | os.PathLike[str], char_device: CharDeviceProbe = char_device_numbers
) -> list[DeviceNode]:
    """The NVIDIA char devices under `<dev_root>/dev` that the base spec gives, sorted.

    `path` is the node's path in the container (`/dev/nvidia0`); `hostPath` is where it
    was found when that differs. `char_device` decides what is a char device and its
    numbers (tests inject one, since they cannot mknod).
    """
    root = Path(dev_root)
    nodes: dict[str, DeviceNode] = {}
    for pattern in DEVICE_GLOBS:
        for found in root.glob(pattern.lstrip("/")):
            path = "/" + found.relative_to(root).as_posix()
            if path in nodes or _excluded(path):
                continue
            dev = char_device(found)
            if dev is None:
                continue
            nodes[path] = DeviceNode(
                path=path,
                host_path=str(found) if str(found) != path else "",
                type=dev.type,
                major=dev.major,
                minor=dev.minor,
                file_mode=dev.file_mode,
            )
    return sorted(nodes.values(), key=lambda node: path_order(node.path))


def find_host_files(container_driver_root: str | os.PathLike[str]) -> tuple[list[Mount], list[str]]:
    """Read-only bind mounts of nvidia-imex, nvidia-imex-ctl and NVML, and what is missing.

    Each file is mounted at the path it was found at inside the driver root (its
    symlinks resolved on the host side), so `libnvidia-ml.so.1` keeps its soname.
    """
    root = Path(container_driver_root)
    mounts: list[Mount] = []
    missing: list[str] = []
    for name, dirs, default_dir in _HOST_FILES:
        found = find_file(root, name, dirs)
        if found is None:
            tried = ", ".join(candidate_paths(name, dirs))
            missing.append(f'{name}: not found under driver root "{root}" (looked in {tried})')
            continue
        container_path = found.path if found.path != "/" + name else f"{default_dir}/{name}"
        mounts.append(
            Mount(
                host_path=str(found.real_path),
                container_path=container_path,
                options=list(HOST_FILE_MOUNT_OPTIONS),
            )
        )
    return mounts, missing


def builtin_base_spec(
    container_driver_root: str | os.PathLike[str],
    dev_root: str | os.PathLike[str],
    *,
    char_device: CharDeviceProbe = char_device_numbers,
) -> tuple[Spec, list[str]]:
    """The base spec built from the driver root, and a line per thing that was not found.

    Never fails for lack of files: the device always has the env, so the spec stays
    valid, and the caller logs what is missing (the daemon will fail without it).
    """
    nodes = find_device_nodes(dev_root, char_device)
    mounts, missing = find_host_files(container_driver_root)
    if not nodes:
        dev_dir = Path(dev_root) / "dev"
        missing.insert(
            0, f'NVIDIA device nodes: none found under "{dev_dir}" (is the NVIDIA driver loaded?)'
        )
    device = Device(
        name=CDI_BASE_DEVICE,
        container_edits=ContainerEdits(
            env=[ENV_VISIBLE_DEVICES_VOID], device_nodes=nodes, mounts=mounts
        ),
    )
    return Spec(kind=CDI_KIND_DEVICE, devices=[device]), missing


class BaseSpecError(Exception):
    """nvidia-ctk could not produce a usable base spec."""


def ctk_command(
    ctk: str,
    container_driver_root: str | os.PathLike[str],
    dev_root: str | os.PathLike[str],
    hook_path: str = "",
) -> list[str]:
    """The `nvidia-ctk cdi generate` command line (management mode, JSON on stdout)."""
    argv = [
        ctk,
        "cdi",
        "generate",
        "--mode=management",
        f"--vendor={CDI_VENDOR}",
        f"--class={CDI_CLASS_DEVICE}",
        f"--driver-root={os.fspath(container_driver_root)}",
        f"--dev-root={os.fspath(dev_root)}",
    ]
    if hook_path:
        argv.append(f"--nvidia-cdi-hook-path={hook_path}")
    argv.append("--format=json")
    return argv


def _tail(data: bytes, limit: int = 2000) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def ctk_base_spec(
    ctk: str,
    container_driver_root: str | os.PathLike[str],
    dev_root: str | os.PathLike[str],
    hook_path: str = "",
    *,
    timeout: float = DEFAULT_CTK_TIMEOUT_S,
) -> Spec:
    """The spec `nvidia-ctk` generates, with `NVIDIA_VISIBLE_DEVICES=void` appended to the
    spec-level edits as the reference does; BaseSpecError when it cannot be had."""
    argv = ctk_command(ctk, container_driver_root, dev_root, hook_path)
    command = shlex.join(argv)
    try:
        proc = subprocess.run(
            argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise BaseSpecError(f"{command} did not finish within {timeout:g}s") from None
    except OSError as err:
        raise BaseSpecError(f"cannot run {command}: {err}") from None
    if proc.returncode != 0:
        raise BaseSpecError(
            f"{command} exited with status {proc.returncode}: {_tail(proc.stderr) or '(no output)'}"
        )
    try:
        spec = spec_from_text(proc.stdout.decode("utf-8"), is_json=True)
    except (CDIError, UnicodeDecodeError) as err:
        raise BaseSpecError(f"{command} printed no valid CDI spec: {err}") from None
    if spec.device(CDI_BASE_DEVICE) is None:
        names = ", ".join(dev.name for dev in spec.devices) or "none"
        raise BaseSpecError(f"{command} printed no device {CDI_BASE_DEVICE!r} (devices: {names})")
    edits = spec.container_edits
    env = [e for e in edits.env if not e.startswith(f"{ENV_NVIDIA_VISIBLE_DEVICES}=")]
    env.append(ENV_VISIBLE_DEVICES_VOID)
    # Our kind whatever the toolkit printed: the file name and the IDs kubelet gets use it.
    spec = dataclasses.replace(
        spec, kind=CDI_KIND_DEVICE, container_edits=dataclasses.replace(edits, env=env)
    )
    try:
        validate_spec(dataclasses.replace(spec, cdi_version=minimum_version(spec)))
    except CDIError as err:
        raise BaseSpecError(f"{command} printed an invalid CDI spec: {err}") from None
    return spec


@dataclass(frozen=True)
class BaseSpecResult:
    """What `write_base_spec` wrote, and what the plugin should log about it."""

    path: Path
    spec: Spec
    source: str  # SOURCE_CTK or SOURCE_BUILTIN
    missing: tuple[str, ...] = ()  # builtin only: what the driver root lacks
    ctk_error: str = ""  # why nvidia-ctk was not used although it is on PATH


def write_base_spec(
    cdi_root: str | os.PathLike[str],
    *,
    container_driver_root: str,
    host_driver_root: str,
    dev_root: str | os.PathLike[str] | None = None,
    hook_path: str = "",
    ctk_search_path: str | None = None,
    ctk_timeout: float = DEFAULT_CTK_TIMEOUT_S,
    char_device: CharDeviceProbe = char_device_numbers,
) -> BaseSpecResult:
    """Build, root-transform and atomically write the base spec; returns what was written.

    `dev_root` defaults to the driver root's devRoot (`agent.discovery.dev_root`);
    `ctk_search_path` is the PATH used to look for nvidia-ctk (default: this process's PATH).
    """
    if dev_root is None:
        dev_root = default_dev_root(container_driver_root)
    transform = RootTransform(container_driver_root, host_driver_root)

    def finish(spec: Spec) -> tuple[Spec, Path]:
        spec = transform.spec(simplify_spec(spec))
        spec = dataclasses.replace(spec, cdi_version=minimum_version(spec))
        path = write_spec(spec, cdi_root, CDI_BASE_SPEC_ID)
        return spec, path

    ctk_error = ""
    ctk = shutil.which(NVIDIA_CTK, path=ctk_search_path)
    if ctk is not None:
        try:
            spec, path = finish(
                ctk_base_spec(ctk, container_driver_root, dev_root, hook_path, timeout=ctk_timeout)
            )
        except BaseSpecError as err:
            ctk_error = str(err)
        except CDIError as err:
            ctk_error = f"the spec from {ctk} is invalid after the root transform: {err}"
        else:
            return BaseSpecResult(path=path, spec=spec, source=SOURCE_CTK)
    built, missing = builtin_base_spec(container_driver_root, dev_root, char_device=char_device)
    spec, path = finish(built)
    return BaseSpecResult(
        path=path,
        spec=spec,
        source=SOURCE_BUILTIN,
        missing=tuple(missing),
        ctk_error=ctk_error,
    )
