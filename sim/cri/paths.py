"""Which of a node's paths the upstream kubelet sees where, and where the runtime finds them.

Every simulated node shares this machine, so an upstream kubelet runs in a mount
namespace of its own (sim/cri/kubelet.py) in which the node's directories the kubelet and
the driver's manifests name (`/var/lib/kubelet`, the CDI spec directory) are bind mounts
of the node's file system (`NodeHost.fs`): the plugin socket the agent advertises at
`/var/lib/kubelet/plugins/...` is then the node's, and the kubelet's volumes (tmpfs
secrets, projected tokens) are mounted there. Containers are made in that namespace too.
Any other path the kubelet hands the runtime (a hostPath volume such as the driver root
`/`) is a path of the node, which this machine has under `NodeHost.fs`, as the simulated
kubelet's hostPath volumes do (sim/cluster/volumes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# What the kubelet's namespace binds from the node's file system, at the same paths.
SHARED: tuple[str, ...] = ("/var/lib/kubelet", "/var/run/cdi", "/etc/cdi")


def _under(path: PurePosixPath, top: PurePosixPath) -> bool:
    return path == top or top in path.parents


@dataclass(frozen=True)
class NodePaths:
    """A node's file system (`fs`) and the directories bound into its kubelet's view."""

    fs: Path
    shared: Sequence[str] = SHARED

    def binds(self) -> list[tuple[Path, str]]:
        """(this machine's directory, the kubelet's path) for every shared directory."""
        return [(self.fs / top.lstrip("/"), top) for top in self.shared]

    def in_namespace(self, path: str) -> str:
        """`path` from the kubelet as a path of the node's namespace: the shared
        directories and this machine's own paths under the node as they are, any other
        node path under `fs`."""
        pure = PurePosixPath("/" + path.lstrip("/"))
        if any(_under(pure, PurePosixPath(top)) for top in self.shared):
            return str(pure)
        if _under(pure, PurePosixPath(self.fs)):
            return str(pure)
        return str(self.fs / str(pure).lstrip("/")) if str(pure) != "/" else str(self.fs)

    def on_machine(self, path: str) -> Path:
        """Where this process (outside the kubelet's namespace) finds `path`: the shared
        directories under `fs` (bind mounts of them), anything else as in_namespace."""
        pure = PurePosixPath("/" + path.lstrip("/"))
        if _under(pure, PurePosixPath(self.fs)):
            return Path(pure)
        return self.fs / str(pure).lstrip("/")
