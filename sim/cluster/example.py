"""The demo's built-in workload, and the user's own manifest file in its place.

The built-in example is what a user of a GB200 rack writes first: one ComputeDomain and
one pod per node of one NVLink clique, each pod asking for the domain's channel through
the ResourceClaimTemplate the ComputeDomain names, pinned to the clique by node affinity
on the `nvidia.com/gpu.clique` label the agent publishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from api import names

Obj = dict[str, Any]

NAMESPACE: Final = "default"
CD_NAME: Final = "demo"
SUPPORTED_KINDS: Final = ("ComputeDomain", "Pod", "Job", "Namespace")


def builtin(
    clique_id: str | Sequence[str] | None,
    pods: int,
    allocation_mode: str = "Single",
    *,
    name: str = CD_NAME,
    namespace: str = NAMESPACE,
    node: str | None = None,
) -> list[Obj]:
    """A ComputeDomain `name` and `pods` workload pods `<name>-worker-<i>` using its channel,
    pinned by node affinity to clique `clique_id` or to any of several (None: anywhere), or
    to one `node`."""
    cd: Obj = {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "numNodes": pods,
            "channel": {
                "resourceClaimTemplate": {"name": f"{name}-channel"},
                "allocationMode": allocation_mode,
            },
        },
    }
    workers = [workload_pod(f"{name}-worker-{i}", name, namespace) for i in range(pods)]
    for pod in workers:
        if clique_id is not None:
            pod["spec"]["affinity"] = _clique_affinity(clique_id)
        if node is not None:
            pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return [cd, *workers]


def _clique_affinity(clique_id: str | Sequence[str]) -> Obj:
    values = [clique_id] if isinstance(clique_id, str) else list(clique_id)
    term = {"key": names.LABEL_GPU_CLIQUE, "operator": "In", "values": values}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [term]}]
            }
        }
    }


def workload_pod(name: str, cd_name: str, namespace: str = NAMESPACE) -> Obj:
    """A pod whose one container uses the channel claim of ComputeDomain `cd_name`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": cd_name}},
        "spec": {
            "resourceClaims": [
                {"name": "imex-channel", "resourceClaimTemplateName": f"{cd_name}-channel"}
            ],
            "containers": [
                {
                    "name": "worker",
                    "image": "ubuntu:24.04",
                    "command": ["sleep", "infinity"],
                    "resources": {"claims": [{"name": "imex-channel"}]},
                }
            ],
        },
    }


def load(path: Path) -> list[Obj]:
    """The objects of a user's YAML file (ComputeDomains, Pods, Jobs, Namespaces), checked
    enough to give a clear error before anything is created."""
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    except OSError as err:
        raise ValueError(f"cannot read workload file {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"workload file {path} is not valid YAML: {err}") from None
    objects: list[Obj] = []
    for i, doc in enumerate(docs, start=1):
        where = f"{path}, document {i}"
        if not isinstance(doc, dict):
            raise ValueError(f"{where}: expected a Kubernetes object (a mapping)")
        kind = doc.get("kind")
        if kind not in SUPPORTED_KINDS:
            raise ValueError(
                f"{where}: kind {kind!r} is not supported here; use {', '.join(SUPPORTED_KINDS)}"
            )
        if not isinstance(doc.get("metadata"), dict) or not doc["metadata"].get("name"):
            raise ValueError(f"{where}: {kind} has no metadata.name")
        objects.append(doc)
    if not any(o["kind"] == names.KIND_COMPUTE_DOMAIN for o in objects):
        raise ValueError(f"workload file {path} has no ComputeDomain")
    return objects
