"""Where `make k8s` put the upstream components, and which release they are.

The release is the `k8s.io/kubernetes` requirement of `upstream/go.mod` (one place pins
it); the binaries live in `.cache/k8s/<release>/` of the repository, one executable with
a link per component name (`upstream/main.go`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
GO_MOD: Final = REPO / "upstream" / "go.mod"
CACHE: Final = REPO / ".cache" / "k8s"
COMPONENTS: Final = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
)
# Overrides the directory (a relocated checkout, an installed copy of the components).
ENV_DIR: Final = "COMPUTE_DOMAIN_SIM_K8S_DIR"


class ComponentsMissingError(RuntimeError):
    """The upstream components are not built; the message says how to build them."""


def pinned_version(go_mod: Path = GO_MOD) -> str:
    """`v1.37.2`: the Kubernetes release `upstream/go.mod` pins."""
    match = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)\s*$", go_mod.read_text(), re.M)
    if match is None:
        raise ComponentsMissingError(f"{go_mod} does not require k8s.io/kubernetes")
    return match.group(1)


@dataclass(frozen=True)
class Components:
    """The built components of one release."""

    version: str
    directory: Path

    def path(self, name: str) -> Path:
        if name not in COMPONENTS:
            raise ValueError(f"unknown component {name!r} (one of {', '.join(COMPONENTS)})")
        return self.directory / name


def locate() -> Components:
    """The pinned release's components, or ComponentsMissingError naming the command to run."""
    override = os.environ.get(ENV_DIR)
    version = pinned_version()
    directory = Path(override) if override else CACHE / version
    missing = [c for c in COMPONENTS if not os.access(directory / c, os.X_OK)]
    if missing:
        raise ComponentsMissingError(
            f"the upstream Kubernetes components ({', '.join(missing)}) are not built in "
            f"{directory}: run `make k8s` in {REPO} (Go from upstream/go.mod; a cold build "
            "takes several minutes), or use --control-plane emulator"
        )
    return Components(version, directory)


def available() -> tuple[bool, str]:
    """(True, "") when the components are built, else (False, why not)."""
    try:
        locate()
    except ComponentsMissingError as err:
        return False, str(err)
    return True, ""
