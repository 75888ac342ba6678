"""One simulated node's host: the directories and fixture files a real GB200 node has.

A real node gives the agent kubelet's plugin and registry directories, a CDI root, the
driver root with `/proc/devices`, the fabric management capability, a boot ID and NVML;
here each lives under the node's own root directory, so many nodes share one machine
without seeing each other. Each node also gets its own loopback address (127.A.B.N: all of
127/8 reaches `lo` on Linux without configuration) that its daemon pods use as pod IP.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from api import names

CLUSTER_UUID: Final = "0f2a6e3c-1111-2222-3333-444455556666"
"""The NVLink fabric's cluster UUID that every simulated GPU reports."""
CHANNEL_MAJOR: Final = 234
CAPS_MAJOR: Final = 238
PROC_DEVICES: Final = (
    f"Character devices:\n  1 mem\n{CAPS_MAJOR} nvidia-caps\n"
    f"{CHANNEL_MAJOR} nvidia-caps-imex-channels\n\nBlock devices:\n  8 sd\n"
)
FABRIC_IMEX_MGMT: Final = "DeviceFileMinor: 7\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
DRIVER_VERSION: Final = "580.82.07"
GPUS_PER_NODE: Final = 4


def clique_id(clique: int | None) -> str:
    """The clique ID NVML reports for GPUs of clique `clique` ("" without fabric)."""
    return "" if clique is None else f"{CLUSTER_UUID}.{clique}"


# A cluster owns NETWORK_BLOCK consecutive loopback /24s starting at its network's (a /20
# where random_network chose it): node N gets host (N-1) % 254 + 1 of the ((N-1) // 254)th.
NETWORK_BLOCK: Final = 16
MAX_NODES: Final = NETWORK_BLOCK * 254


def node_ip(index: int, network: str = "127.0.1") -> str:
    """The address of node index N (1-based): `<network>.N` for the first 254, then on in
    the following /24s (up to MAX_NODES, without leaving the network's 127.A)."""
    first, a, b = network.split(".")
    block, host = divmod(index - 1, 254)
    if not 1 <= index <= MAX_NODES or int(b) + block > 255:
        raise ValueError(f"node index {index} out of range: {network}.x holds nodes 1-254, "
                         f"and the /24s after it up to 127.{a}.255 (at most {MAX_NODES})")
    return f"{first}.{a}.{int(b) + block}.{host + 1}"


def random_network(rng: random.Random | None = None) -> str:
    """The first /24 of a loopback /20 of its own (127.A.B, B a multiple of 16), so
    simulated clusters running side by side on one machine (two test runs, a demo next to
    `up`) never bind the same address and port, however many nodes each has."""
    r = rng or random.SystemRandom()
    return f"127.{r.randint(2, 254)}.{NETWORK_BLOCK * r.randrange(256 // NETWORK_BLOCK)}"


def nvml_fixture(node: str, clique: int | None, gpus: int = GPUS_PER_NODE) -> dict[str, Any]:
    """The NVML answers of the node: GB200 GPUs in `clique`, or an H100 without fabric.

    GPU UUIDs derive from the node name, so they stay the same across clique changes.
    """
    if clique is None:
        gpu_list = [{"name": "NVIDIA H100", "uuid": "GPU-1", "fabric": "NOT_SUPPORTED"}]
    else:
        gpu_list = [
            {
                "name": "NVIDIA GB200",
                "uuid": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{i}')}",
                "fabric": {
                    "clusterUuid": CLUSTER_UUID,
                    "cliqueId": clique,
                    "state": "COMPLETED",
                    "status": "SUCCESS",
                },
            }
            for i in range(gpus)
        ]
    return {"driverVersion": DRIVER_VERSION, "gpus": gpu_list}


# Where a node keeps what the agent reads, as paths of the node ("/" is `NodeHost.fs`).
PROC_DEVICES_PATH: Final = "/proc/devices"
FABRIC_IMEX_MGMT_PATH: Final = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
BOOT_ID_PATH: Final = "/proc/sys/kernel/random/boot_id"
NVML_FIXTURE_PATH: Final = "/etc/compute-domain-sim/nvml.json"
NVIDIA_SMI_PATH: Final = "/usr/bin/nvidia-smi"
NVML_LIBRARY_PATH: Final = "/usr/lib64/libnvidia-ml.so.1"
# The fake nvidia-smi: POSIX sh builtins only (prestart runs it with an empty environment,
# no PATH), answering `--version` as nvidia-smi 580 does and anything else with one line.
FAKE_NVIDIA_SMI: Final = f"""#!/bin/sh
# nvidia-smi: the simulated node's driver (sim.cluster.node), not NVIDIA's.
if [ "$1" = "--version" ]; then
    printf '%s\\n' 'NVIDIA-SMI version  : {DRIVER_VERSION}' \\
        'NVML version        : {DRIVER_VERSION.rsplit(".", 1)[0]}' \\
        'DRIVER version      : {DRIVER_VERSION}' 'CUDA Version        : 13.0'
    exit 0
fi
printf '%s\\n' 'NVIDIA-SMI {DRIVER_VERSION}  Driver Version: {DRIVER_VERSION}  CUDA Version: 13.0'
"""


@dataclass
class NodeHost:
    """One node's file system, created on construction: `fs` is the node's "/", holding
    kubelet's plugin and registry directories and the CDI root at their real paths, the
    driver root's programs (the fake `nvidia-imex`, installed by the cluster; a fake
    `nvidia-smi` and `libnvidia-ml.so.1` unless `driver` is False, see `install_driver`),
    and the files a GB200 node's kernel and driver expose (`/proc/devices`, the fabric
    management capability, the boot ID) and the NVML answers; `pods` is where the node's
    kubelet keeps its pods."""

    root: Path
    name: str
    clique: int | None = None
    driver: bool = True  # False: a node whose NVIDIA driver is not installed (yet)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        for d in (self.registry_dir, self.plugins_dir, self.cdi_dir, self.fs / "dev",
                  self.pods_dir, self.fs / "usr" / "bin"):  # fmt: skip
            d.mkdir(parents=True, exist_ok=True)
        self.path(PROC_DEVICES_PATH).parent.mkdir(parents=True, exist_ok=True)
        self.path(PROC_DEVICES_PATH).write_text(PROC_DEVICES)
        self.path(FABRIC_IMEX_MGMT_PATH).parent.mkdir(parents=True, exist_ok=True)
        self.path(FABRIC_IMEX_MGMT_PATH).write_text(FABRIC_IMEX_MGMT)
        boot_id = self.path(BOOT_ID_PATH)
        boot_id.parent.mkdir(parents=True, exist_ok=True)
        if not boot_id.exists():
            boot_id.write_text(f"{uuid.uuid4()}\n")
        self.path(NVML_FIXTURE_PATH).parent.mkdir(parents=True, exist_ok=True)
        self.set_clique(self.clique)
        if self.driver:
            self.install_driver()

    @property
    def fs(self) -> Path:
        """The node's root file system (hostPath volumes and CDI host paths live here)."""
        return self.root / "fs"

    def path(self, node_path: str) -> Path:
        """Where the node's `node_path` is on this machine."""
        return self.fs / node_path.lstrip("/")

    @property
    def clique_id(self) -> str:
        return clique_id(self.clique)

    def set_clique(self, clique: int | None) -> None:
        """What NVML reports from now on (the agent reads it at start and on refresh)."""
        self.clique = clique
        self.path(NVML_FIXTURE_PATH).write_text(json.dumps(nvml_fixture(self.name, clique)))

    def install_driver(self) -> None:
        """What the kubelet plugin's init container (`compute-domain-agent prestart`) waits
        for under the driver root (the node's "/"): an `nvidia-smi` that answers
        `--version` and exits 0, and a `libnvidia-ml.so.1` (empty: nothing loads it, the
        agent reads its NVML answers from the fixture). Every simulated node has GPUs (an
        H100 without fabric, GB200s in a clique), so each has the driver."""
        smi = self.path(NVIDIA_SMI_PATH)
        smi.parent.mkdir(parents=True, exist_ok=True)
        smi.write_text(FAKE_NVIDIA_SMI)
        smi.chmod(0o755)
        lib = self.path(NVML_LIBRARY_PATH)
        lib.parent.mkdir(parents=True, exist_ok=True)
        lib.touch()

    def remove_driver(self) -> None:
        """The driver uninstalled (or not installed yet): `prestart` waits again."""
        for path in (NVIDIA_SMI_PATH, NVML_LIBRARY_PATH):
            self.path(path).unlink(missing_ok=True)

    def reboot(self) -> None:
        """A new boot ID: the agent's checkpoint from the last boot no longer applies."""
        self.path(BOOT_ID_PATH).write_text(f"{uuid.uuid4()}\n")

    @staticmethod
    def hardware_env(driver_root: str = names.DEFAULT_CONTAINER_DRIVER_ROOT) -> dict[str, str]:
        """What tells a kubelet-plugin container to read its node's simulated kernel and
        GPU files through its driver-root mount instead of the machine's /proc and NVML."""
        return {
            "PROC_DEVICES_PATH": f"{driver_root}{PROC_DEVICES_PATH}",
            "FABRIC_IMEX_MGMT_PATH": f"{driver_root}{FABRIC_IMEX_MGMT_PATH}",
            "BOOT_ID_PATH": f"{driver_root}{BOOT_ID_PATH}",
            "NVML_SOURCE": f"fixture:{driver_root}{NVML_FIXTURE_PATH}",
        }

    @property
    def registry_dir(self) -> Path:
        return self.path(names.KUBELET_REGISTRY_DIR)

    @property
    def plugins_dir(self) -> Path:
        return self.path(names.KUBELET_PLUGINS_DIR)

    @property
    def plugin_dir(self) -> Path:
        return self.plugins_dir / names.DRIVER_NAME

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / names.REGISTRATION_SOCKET_NAME

    @property
    def pods_dir(self) -> Path:
        return self.root / "pods"

    @property
    def cdi_dir(self) -> Path:
        return self.path(names.DEFAULT_CDI_ROOT)

    def cdi_files(self) -> list[str]:
        return sorted(p.name for p in self.cdi_dir.iterdir())
