"""The simulated container runtime's init: what runc does between fork and exec.

Run as root by the sim kubelet (`python -I sandbox_init.py run|join SPEC_FILE`), never
imported by the driver. Standard library only, so it starts in a few milliseconds.

`run` makes the container: a private mount and UTS namespace; the root file system an
overlay whose lower layer is the host's `/` and whose upper layer is a tmpfs (writes stay
in the container, and mount points can be made anywhere without touching the host); a
fresh `/proc`, the host's `/sys` (read-only unless privileged); a tmpfs `/dev` with the
usual nodes plus exactly the device nodes of the spec (a privileged container: every host
device as well), made with mknod; the spec's bind mounts; then chroot, the capability
bounding set, the user and groups, and exec of the command with exactly the spec's
environment.

`join` runs a command inside a running container (exec probes, `kubectl exec`): it enters
the container's mount and UTS namespaces and its root, as `nsenter -t PID -m -u -r` does.

Errors before exec go to the status pipe (the STATUS_FD argument, close-on-exec): the
kubelet reads nothing there when exec succeeded and the reason when it did not, as a
container runtime reports a failed start (StartError).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import stat
import sys
from pathlib import Path, PurePosixPath
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
CONTAINER_UMASK = 0o022
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
# The nodes every container's /dev has (runc's default devices), with the host's numbers.
DEFAULT_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
SKIPPED_DEV_DIRS = {("/dev", "pts"), ("/dev", "shm"), ("/dev", "mqueue"), ("/dev", "fd")}

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """The container could not be set up; the message is what the kubelet reports."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source} on {target}",
    )


def _inside(root: str, path: str) -> str:
    """`path` of the container as a host path under `root`, symlinks resolved inside the
    root (as runc's securejoin): a link to `/run` must not lead to the host's /run."""
    base = Path(root)
    current = base
    parts = [p for p in PurePosixPath(path).parts if p != "/"]
    links = 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent if current != base else base
            continue
        candidate = current / part
        if not candidate.is_symlink():
            current = candidate
            continue
        links += 1
        if links > 40:
            raise SetupError(f"too many levels of symbolic links in {path}")
        target = PurePosixPath(candidate.readlink())
        if target.is_absolute():
            current = base
            parts = list(target.parts[1:]) + parts
        else:
            parts = list(target.parts) + parts
    return str(current)


def _make_target(target: str, is_dir: bool) -> None:
    """The mount point of a bind mount: a directory, or an empty file for a file."""
    if is_dir:
        Path(target).mkdir(parents=True, exist_ok=True)
        return
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(target):
        Path(target).touch()


def _host_devices() -> list[dict[str, Any]]:
    """Every device node of the host's /dev, what a privileged container gets (as
    containerd's HostDevices lists them: not those under pts, shm, mqueue)."""
    found = []
    for top, dirs, files in os.walk("/dev"):
        dirs[:] = [d for d in dirs if (top, d) not in SKIPPED_DEV_DIRS]
        for name in files:
            path = f"{top}/{name}"
            info = os.lstat(path)
            if path == "/dev/console" or not (
                stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
            ):
                continue
            found.append({
                "path": path, "type": "b" if stat.S_ISBLK(info.st_mode) else "c",
                "major": os.major(info.st_rdev), "minor": os.minor(info.st_rdev),
                "mode": stat.S_IMODE(info.st_mode), "uid": info.st_uid, "gid": info.st_gid,
            })  # fmt: skip
    return found


def _devices(root: str, devices: list[dict[str, Any]], privileged: bool) -> None:
    dev = Path(_inside(root, "/dev"))
    dev.mkdir(parents=True, exist_ok=True)
    _mount("tmpfs", str(dev), "tmpfs", MS_NOSUID, "mode=755,size=65536k")
    for name in DEFAULT_DEVICES:
        found = Path("/dev", name).stat()
        os.mknod(dev / name, stat.S_IFCHR | 0o666, found.st_rdev)
        (dev / name).chmod(0o666)
    if privileged:  # a node already made (a default, or a host device) is skipped below
        devices = [*_host_devices(), *devices]
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        (dev / name).symlink_to(target)
    for sub in ("pts", "shm"):
        (dev / sub).mkdir(exist_ok=True)
    _mount("shm", str(dev / "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for node in devices:
        path = Path(_inside(root, node["path"]))
        if not str(path).startswith(f"{dev}/"):
            raise SetupError(f"device node {node['path']} is not under /dev")
        if os.path.lexists(path):  # made already: a default node, or named twice
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        kind = stat.S_IFBLK if node.get("type") == "b" else stat.S_IFCHR
        mode = int(node.get("mode") or 0o666) & 0o7777
        try:
            os.mknod(path, kind | mode, os.makedev(int(node["major"]), int(node["minor"])))
        except OSError as err:
            raise SetupError(f"mknod {node['path']}: {err.strerror}") from None
        path.chmod(mode)
        os.chown(path, int(node.get("uid", 0)), int(node.get("gid", 0)))


def _bind(root: str, mount: dict[str, Any]) -> None:
    source, target = mount["source"], _inside(root, mount["target"])
    if mount.get("type") == "tmpfs":
        Path(target).mkdir(parents=True, exist_ok=True)
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        return
    try:
        is_dir = stat.S_ISDIR(Path(source).stat().st_mode)
    except OSError as err:
        raise SetupError(f"mount source {source}: {err.strerror}") from None
    _make_target(target, is_dir)
    _mount(source, target, None, MS_BIND | MS_REC)
    if mount.get("readonly"):
        _mount(source, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)


def _traversable(root: str, paths: list[str]) -> None:
    """Let every user reach `paths` (the image's programs and their interpreter): an
    ancestor directory without o+x gets it, in the container's writable layer only."""
    for path in paths:
        for ancestor in list(PurePosixPath(path).parents)[:-1]:
            current = Path(_inside(root, str(ancestor)))
            try:
                mode = current.stat().st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                current.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def _rootfs(spec: dict[str, Any]) -> str:
    state = Path(spec["state_dir"])
    layer, root = str(state / "layer"), str(state / "rootfs")
    Path(layer).mkdir(parents=True, exist_ok=True)
    Path(root).mkdir(parents=True, exist_ok=True)
    _mount("tmpfs", layer, "tmpfs", 0, "mode=755")
    for sub in ("upper", "work"):
        Path(layer, sub).mkdir()
    options = f"lowerdir=/,upperdir={layer}/upper,workdir={layer}/work"
    _mount("overlay", root, "overlay", 0, options)
    _mount("proc", _inside(root, "/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    sys_dir = _inside(root, "/sys")
    _mount("/sys", sys_dir, None, MS_BIND | MS_REC)
    if not spec.get("privileged"):  # runc mounts sysfs read-only unless privileged
        _mount("/sys", sys_dir, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    targets = [m["target"] for m in spec.get("mounts") or []]
    _traversable(root, [*spec.get("traverse", []), *targets])
    _devices(root, spec.get("devices") or [], bool(spec.get("privileged")))
    for mount in spec.get("mounts") or []:
        _bind(root, mount)
    if spec.get("readonly_root"):
        _mount(root, root, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    return root


def _become(spec: dict[str, Any]) -> None:
    """Root inside, then the container's user: the capability bounding set first (root
    gets exactly it at exec; another user gets no capability), then groups, gid, uid."""
    keep = spec.get("capabilities")
    if keep is not None:  # None: privileged, every capability
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
        for cap in sorted(set(range(last + 1)) - {int(c) for c in keep}):
            _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    os.setgroups([int(g) for g in spec.get("groups") or []])
    os.setgid(int(spec.get("gid", 0)))
    os.setuid(int(spec.get("uid", 0)))
    if spec.get("no_new_privs"):  # allowPrivilegeEscalation: false
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _chdir(cwd: str, create: bool) -> None:
    try:
        if create:
            Path(cwd).mkdir(parents=True, exist_ok=True)
        os.chdir(cwd)
    except OSError as err:
        raise SetupError(f"working directory {cwd}: {err.strerror}") from None


def _die_with_parent(parent: int) -> None:
    """SIGKILL when the kubelet's process goes, however it goes: no container outlives the
    simulated cluster. Set after the user change, which clears it."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    if parent and os.getppid() != parent:  # it went before this was set
        os._exit(137)


def _exec(spec: dict[str, Any]) -> None:
    _die_with_parent(int(spec.get("parent_pid") or 0))
    argv = [str(a) for a in spec["argv"]]
    env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
    if not argv:
        raise SetupError("no command: the image has no entrypoint and the pod gives none")
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as err:
        if err.errno == errno.ENOENT:
            raise SetupError(
                f'exec: "{argv[0]}": executable file not found in $PATH'
            ) from None
        raise SetupError(f'exec: "{argv[0]}": {err.strerror}') from None


def run(spec: dict[str, Any]) -> None:
    if spec.get("host_namespace"):
        # The node's mount namespace (an upstream kubelet's, sim/cri): the volumes it
        # mounted are there, not in this machine's namespace.
        fd = os.open(spec["host_namespace"], os.O_RDONLY | os.O_CLOEXEC)
        _check(_libc.setns(fd, CLONE_NEWNS), "setns the node's mount namespace")
        os.close(fd)
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    if spec.get("hostname"):
        name = spec["hostname"].encode()
        _check(_libc.sethostname(name, len(name)), "sethostname")
    root = _rootfs(spec)
    os.chroot(root)
    os.chdir("/")
    _become(spec)
    _chdir(spec.get("cwd") or "/", create=not spec.get("readonly_root"))
    _exec(spec)


def join(pid: int, spec: dict[str, Any]) -> None:
    """Enter the namespaces and root of container process `pid`, then exec."""
    root_fd = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY)
    for ns, flag in (("mnt", CLONE_NEWNS), ("uts", CLONE_NEWUTS)):
        fd = os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY)
        _check(_libc.setns(fd, flag), f"setns {ns}")
        os.close(fd)
    os.fchdir(root_fd)
    os.chroot(".")
    os.close(root_fd)
    _become(spec)
    _chdir(spec.get("cwd") or "/", create=False)
    _exec(spec)


def main(argv: list[str]) -> int:
    """`run SPEC [STATUS_FD]` or `join PID SPEC [STATUS_FD]`."""
    args = argv[1:]
    if not args or args[0] not in ("run", "join") or len(args) < (2 if args[0] == "run" else 3):
        print("usage: sandbox_init.py run SPEC [STATUS_FD] | join PID SPEC [STATUS_FD]",
              file=sys.stderr)
        return 2
    rest = args[1:] if args[0] == "run" else args[2:]
    status_fd = int(rest[1]) if len(rest) > 1 else -1
    if status_fd >= 0:  # EOF for the kubelet once exec succeeded
        os.set_inheritable(status_fd, False)
    # A container starts with umask 0022 (the OCI runtime default), whatever the
    # kubelet's process had: the writable layer and the container's files depend on it.
    os.umask(CONTAINER_UMASK)
    try:
        spec = json.loads(Path(rest[0]).read_bytes())
        if args[0] == "run":
            run(spec)
        else:
            join(int(args[1]), spec)
    except (SetupError, OSError) as err:
        message = str(err) if isinstance(err, SetupError) else f"{err.filename}: {err.strerror}"
        if status_fd >= 0:
            os.write(status_fd, message.encode())
        else:
            print(message, file=sys.stderr)
        return 128
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
