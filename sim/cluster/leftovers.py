"""What a deleted ComputeDomain must not leave behind, checked against the live cluster.

After the workloads and the ComputeDomain are deleted, a correct driver removes every
object it created, every node label, every CDI file of a claim and every IMEX process;
each thing still there is reported in words a user can act on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable
from pathlib import Path

import psutil
from kubernetes import client

from api import names
from runtime.kubecall import call
from sim.cluster.evidence import Snapshot

BASE_SPEC_SUFFIX = "device_base.yaml"


def _name(obj: dict) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace')}/{md['name']}" if md.get("namespace") else md["name"]


def _cd_label(obj: dict) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(names.LABEL_COMPUTE_DOMAIN)


async def object_leftovers(
    api: client.ApiClient, driver_namespace: str, uids: Collection[str], namespaces: Iterable[str]
) -> list[str]:
    """API objects and node labels of the ComputeDomains `uids` (and any pod or claim in the
    workload `namespaces`) that still exist."""
    snap = await Snapshot.take(api, driver_namespace)
    found: list[str] = []
    found += [f"ComputeDomain {_name(c)} still exists" for c in snap.cds if _uid(c) in uids]
    found += [
        f"ResourceClaimTemplate {_name(t)} still exists"
        for t in snap.templates
        if _cd_label(t) in uids
    ]
    workload_ns = set(namespaces)
    for pod in snap.pods:
        ns = (pod.get("metadata") or {}).get("namespace")
        if _cd_label(pod) in uids or ns in workload_ns:
            found.append(f"Pod {_name(pod)} still exists")
    for claim in snap.claims:
        ns = (claim.get("metadata") or {}).get("namespace")
        if _cd_label(claim) in uids or ns in workload_ns:
            found.append(f"ResourceClaim {_name(claim)} still exists")
    found += [
        f"ComputeDomainClique {_name(c)} still exists"
        for c in snap.cliques
        if (c.get("metadata") or {}).get("name", "").split(".", 1)[0] in uids
    ]
    found += [
        f"node {_name(n)} still has label {names.LABEL_COMPUTE_DOMAIN}={_cd_label(n)}"
        for n in snap.nodes
        if _cd_label(n) is not None
    ]
    apps = client.AppsV1Api(api)
    daemonsets = await call(apps.list_namespaced_daemon_set, driver_namespace)
    found += [
        f"DaemonSet {driver_namespace}/{ds.metadata.name} still exists"
        for ds in daemonsets.items
        if (ds.metadata.labels or {}).get(names.LABEL_COMPUTE_DOMAIN) in uids
    ]
    return found


def _uid(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def cdi_leftovers(cdi_dirs: dict[str, Path]) -> list[str]:
    """Claim CDI spec files (anything but the base spec) still on a node."""
    found = []
    for node, cdi_dir in sorted(cdi_dirs.items()):
        for path in sorted(cdi_dir.glob("*")):
            if not path.name.endswith(BASE_SPEC_SUFFIX):
                found.append(f"CDI spec {path.name} still on {node}")
    return found


def process_leftovers(root: Path, allowed: Collection[int] = ()) -> list[str]:
    """Processes (other than `allowed` PIDs and their children) that belong to the cluster
    under `root`: its path on their command line or in their environment."""
    marker = str(root)
    allowed_set = set(allowed)
    for pid in list(allowed_set):
        with contextlib.suppress(psutil.Error):
            allowed_set.update(c.pid for c in psutil.Process(pid).children(recursive=True))
    me = psutil.Process()
    # This process and whatever started it (a shell, `timeout`, make) name the root too.
    allowed_set.update(p.pid for p in [me, *me.parents()])
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "name"]):
        if proc.pid in allowed_set:
            continue
        try:
            cmdline = " ".join(proc.info["cmdline"] or ())
            env = proc.environ() if marker not in cmdline else {}
        except psutil.Error:
            continue
        if marker in cmdline or any(marker in v for v in env.values()):
            found.append(f"process {proc.pid} ({proc.info['name']}) still running: {cmdline[:120]}")
    return found
