"""One upstream kubelet per simulated node, on the node's CRI runtime (sim/cri/runtime.py).

The kubelet runs in a mount namespace of its own (`unshare --mount`) in which the node's
`/var/lib/kubelet` and CDI spec directories are bind mounts of the node's file system
(sim/cri/paths.py): its root dir, plugin watcher and DRA manager then work at the paths
the driver's manifests use, and several kubelets share this machine without seeing each
other's plugins. The mount points are created on this machine where missing (empty
directories; nothing is mounted outside the kubelets' namespaces).

Flags that fit a machine shared by several kubelets and no pod network: cgroupfs without
per-QoS cgroups and node-allocatable enforcement (`cgroupsPerQOS: false`,
`enforceNodeAllocatable: []`: the kubelets would otherwise fight over the same
kubepods hierarchy), no swap check (`failSwapOn: false`), no eviction or image GC
thresholds (the machine's disk and memory are every node's), the serving port on the
node's own loopback address, healthz and the read-only port off, pod logs under the
node's file system.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.cri.paths import NodePaths

CLUSTER_DNS = "10.0.0.10"  # in sim/controlplane/upstream.py's SERVICE_RANGE
MOUNT_SCRIPT = (
    'set -e; while [ "$1" != "--" ]; do mkdir -p "$2"; mkdir -p "$1"; '
    'mount --bind "$1" "$2"; shift 2; done; shift; exec "$@"'
)


@dataclass(frozen=True)
class KubeletFiles:
    """What one kubelet is given: its credentials and the CA that signs API clients."""

    kubeconfig: Path
    serving_cert: Path
    serving_key: Path
    client_ca: Path


def kubelet_config(node_ip: str, port: int, files: KubeletFiles, runtime_socket: Path,
                   pod_logs: Path) -> dict[str, object]:
    """The KubeletConfiguration (kubelet.config.k8s.io/v1beta1) of one node (module doc)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "tlsCertFile": str(files.serving_cert),
        "tlsPrivateKeyFile": str(files.serving_key),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(files.client_ca)}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "failCgroupV1": False,  # this machine mounts cgroup v1; 1.35+ refuses it by default
        "evictionHard": {"memory.available": "0%", "nodefs.available": "0%",
                         "imagefs.available": "0%", "nodefs.inodesFree": "0%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "localStorageCapacityIsolation": False,
        "podLogsDirectory": str(pod_logs),
        "nodeStatusUpdateFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "serializeImagePulls": False,
        "resolvConf": "",
        "clusterDomain": "cluster.local",
        # An address in the Service range (no DNS server answers there; pods here resolve
        # through /etc/hosts): without one the kubelet warns MissingClusterDNS on every pod.
        "clusterDNS": [CLUSTER_DNS],
        "shutdownGracePeriod": "0s",
        "protectKernelDefaults": False,
    }


class UpstreamKubelet:
    """The kubelet process of one node (module doc); `binary` is `make k8s`'s kubelet."""

    def __init__(self, binary: Path, *, node_name: str, node_ip: str, port: int,
                 paths: NodePaths, state_dir: Path, files: KubeletFiles,
                 runtime_socket: Path, verbosity: int = 2,
                 extra_args: Sequence[str] = ()) -> None:
        self.binary = binary
        self.node_name = node_name
        self.node_ip = node_ip
        self.port = port
        self.paths = paths
        self.state_dir = state_dir
        self.files = files
        self.runtime_socket = runtime_socket
        self.verbosity = verbosity
        self.extra_args = list(extra_args)
        self.process: asyncio.subprocess.Process | None = None
        self.log_path = state_dir / "kubelet.log"

    @property
    def namespace(self) -> str:
        """The kubelet's mount namespace (containers are made from it); "" when stopped."""
        if self.process is None or self.process.returncode is not None:
            return ""
        return f"/proc/{self.process.pid}/ns/mnt"

    def argv(self) -> list[str]:
        config = self.state_dir / "kubelet-config.json"
        pod_logs = self.paths.fs / "var" / "log" / "pods"
        pod_logs.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(kubelet_config(
            self.node_ip, self.port, self.files, self.runtime_socket, pod_logs), indent=1))
        binds: list[str] = []
        for source, target in self.paths.binds():
            source.mkdir(parents=True, exist_ok=True)
            binds += [str(source), target]
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", MOUNT_SCRIPT,
                "kubelet-ns", *binds, "--", str(self.binary),
                f"--config={config}", f"--kubeconfig={self.files.kubeconfig}",
                f"--hostname-override={self.node_name}", f"--node-ip={self.node_ip}",
                f"--v={self.verbosity}", *self.extra_args]

    async def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        argv = self.argv()
        with self.log_path.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})

    async def stop(self, *, kill: bool = False) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            async with asyncio.timeout(15):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

