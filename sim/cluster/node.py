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


def node_ip(index: int, network: str = "127.0.1") -> str:
    """`<network>.N` for node index N (1-based; 254 nodes at most)."""
    if not 1 <= index <= 254:
        raise ValueError(f"node index {index} out of range 1-254 (one {network}.N address each)")
    return f"{network}.{index}"


def random_network(rng: random.Random | None = None) -> str:
    """A loopback /24 of its own (127.A.B), so simulated clusters running side by side on
    one machine (two test runs, a demo next to `up`) never bind the same address and port."""
    r = rng or random.SystemRandom()
    return f"127.{r.randint(2, 254)}.{r.randint(0, 255)}"


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


@dataclass
class NodeHost:
    """The host directories of one node, created on construction."""

    root: Path
    name: str
    clique: int | None = None

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        for d in ("plugins", "registry", "cdi", "driver-root/dev", "pods", "bin"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "proc-devices").write_text(PROC_DEVICES)
        (self.root / "fabric-imex-mgmt").write_text(FABRIC_IMEX_MGMT)
        boot_id = self.root / "boot_id"
        if not boot_id.exists():
            boot_id.write_text(f"{uuid.uuid4()}\n")
        self.set_clique(self.clique)

    @property
    def clique_id(self) -> str:
        return clique_id(self.clique)

    def set_clique(self, clique: int | None) -> None:
        """What NVML reports from now on (the agent reads it at start and on refresh)."""
        self.clique = clique
        (self.root / "nvml.json").write_text(json.dumps(nvml_fixture(self.name, clique)))

    def reboot(self) -> None:
        """A new boot ID: the agent's checkpoint from the last boot no longer applies."""
        (self.root / "boot_id").write_text(f"{uuid.uuid4()}\n")

    def agent_args(self, kubeconfig: Path, namespace: str) -> list[str]:
        """`compute-domain-agent plugin` flags pointing every host path into this node."""
        r = self.root
        return [
            "--node-name", self.name,
            "--namespace", namespace,
            "--kubeconfig", str(kubeconfig),
            "--cdi-root", str(r / "cdi"),
            "--container-driver-root", str(r / "driver-root"),
            "--nvidia-driver-root", str(r / "driver-root"),
            "--kubelet-registrar-directory-path", str(r / "registry"),
            "--kubelet-plugins-directory-path", str(r / "plugins"),
            "--proc-devices-path", str(r / "proc-devices"),
            "--fabric-imex-mgmt-path", str(r / "fabric-imex-mgmt"),
            "--boot-id-path", str(r / "boot_id"),
            "--nvml-source", f"fixture:{r / 'nvml.json'}",
        ]  # fmt: skip

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugins" / names.DRIVER_NAME

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.root / "registry" / names.REGISTRATION_SOCKET_NAME

    @property
    def pods_dir(self) -> Path:
        return self.root / "pods"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    def cdi_files(self) -> list[str]:
        return sorted(p.name for p in self.cdi_dir.iterdir())
