"""The host's own `nvidia-imex` service on one node, for host-managed mode.

In host-managed mode the admin runs IMEX on every node (systemd `nvidia-imex.service`,
its nodes config listing the rack's nodes) and the agent only asks it, through
`nvidia-imex-ctl` on the control socket, whether it is READY. This runs the fake
`nvidia-imex` the same way, with the control socket and the `nvidia-imex-ctl` program
where the agent looks for them: inside the node's driver root.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Final

from sim.cluster.node import NodeHost
from sim.cluster.processes import ManagedProcess, free_port

SOCKET: Final = "/etc/nvidia-imex/imex_ctrl.sock"


class HostImex:
    """Start, stop and reconfigure one node's host IMEX daemon."""

    def __init__(self, host: NodeHost, address: str) -> None:
        """`nvidia-imex` and `nvidia-imex-ctl` are the node's, in its /usr/bin."""
        self.host = host
        self.address = address
        self.driver_root = host.fs
        self.socket_path = host.path(SOCKET)
        self.process: ManagedProcess | None = None
        self.knobs: dict[str, str] = {}

    async def start(self, peers: Sequence[str], **knobs: str) -> None:
        """Run it with `peers` (addresses, ours included) and FAKE_IMEX_* `knobs`, e.g.
        FAKE_IMEX_NEVER_READY="1"; it opens its control socket right away."""
        self.knobs = dict(knobs)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        nodes = self.host.root / "host-imex-nodes.cfg"
        nodes.write_text("".join(f"{p}\n" for p in peers or [self.address]))
        config = self.host.root / "host-imex.cfg"
        config.write_text(
            f"DAEMONIZE=0\nBIND_INTERFACE_IP={self.address}\n"
            f"SERVER_PORT={free_port(self.address)}\nIMEX_NODE_CONFIG_FILE={nodes}\n"
            "IMEX_WAIT_FOR_QUORUM=RECOVERY\nIMEX_CMD_ENABLED=1\nIMEX_CMD_PORT=\n"
            f"IMEX_CMD_UNIX_DOMAIN_PATH={self.socket_path}\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_IMEX_")}
        env |= {"FAKE_IMEX_HEARTBEAT": "0.2", **self.knobs}
        self.process = ManagedProcess(
            f"host-imex-{self.host.name}",
            [self.driver_root / "usr" / "bin" / "nvidia-imex", "-c", config],
            self.host.root / "host-imex.log",
            env,
        )
        await self.process.start()
        for _ in range(300):
            if self.socket_path.exists():
                return
            if not self.process.running:
                break
            await asyncio.sleep(0.05)
        raise RuntimeError(
            f"host nvidia-imex on {self.host.name} did not open {self.socket_path}: "
            + self.process.log_tail()
        )

    async def stop(self) -> None:
        if self.process is not None:
            await self.process.stop(10)
            self.process = None

    async def restart(self, peers: Sequence[str], **knobs: str) -> None:
        """As `systemctl restart nvidia-imex` after the admin changed its settings."""
        await self.stop()
        await self.start(peers, **knobs)
