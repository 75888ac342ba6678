"""The deploy manifests edited for a simulated cluster on one machine, as an admin would
edit them for one machine: nothing else of the driver's configuration changes.

The agent reads the node's simulated kernel and GPU files through its driver-root mount
(`NodeHost.hardware_env`), binds its health and metrics ports to its pod IP (every node
shares this machine's network), cleans up every 2 s and tells kubelet to retry after 8 s;
the controller binds to its pod IP and resyncs every 10 s. The caller's `agent_env` and
`controller_env` are merged over that (a test editing the DaemonSet or Deployment).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from api import names
from sim.cluster.node import NodeHost

Obj = dict[str, Any]


def for_one_machine(
    objects: Sequence[Obj],
    verbosity: int,
    *,
    host_managed: bool,
    agent_env: Mapping[str, str],
    controller_env: Mapping[str, str],
) -> list[Obj]:
    """A copy of `objects` with the edits of the module doc."""
    out = copy.deepcopy(list(objects))
    plugin = _container(out, "DaemonSet")
    driver_root = _env_value(plugin, names.ENV_CONTAINER_DRIVER_ROOT) or (
        names.DEFAULT_CONTAINER_DRIVER_ROOT
    )
    agent = {
        names.ENV_HEALTHCHECK_ADDRESS: "$(POD_IP)",
        names.ENV_HTTP_ENDPOINT: "$(POD_IP):8081",
        names.ENV_GPU_CLIQUE_LABEL_ENABLED: "true",
        "CLEANUP_INTERVAL": "2s",
        # kubelet hears why a claim waits (an Event on the pod) after 8 s, not 45 s.
        "PREPARE_TIMEOUT": "8s",
        "LOG_VERBOSITY": str(verbosity),
        **NodeHost.hardware_env(driver_root),
    }
    if host_managed:  # the fake nvidia-imex-ctl runs this machine's Python
        agent["IMEX_CTL_CHROOT"] = "false"
    _set_env(plugin, {**agent, **agent_env})
    controller = {
        names.ENV_HTTP_ENDPOINT: "$(POD_IP):8080",
        names.ENV_LOG_VERBOSITY_CD_DAEMON: str(verbosity),
        "RESYNC_INTERVAL": "10s",
    }
    _set_env(_container(out, "Deployment"), {**controller, **controller_env})
    return out


def _container(objects: Sequence[Obj], kind: str) -> Obj:
    found = [o for o in objects if o.get("kind") == kind]
    if len(found) != 1:
        raise ValueError(f"the deploy manifests hold {len(found)} {kind} objects; expected one")
    container: Obj = found[0]["spec"]["template"]["spec"]["containers"][0]
    return container


def _env_value(container: Obj, name: str) -> str | None:
    for item in container.get("env") or ():
        if item.get("name") == name and item.get("value") is not None:
            return str(item["value"])
    return None


def _set_env(container: Obj, values: Mapping[str, str]) -> None:
    """Set `values` in the container's env (replacing entries of the same name), with
    POD_IP from the downward API first so that `$(POD_IP)` expands."""
    env = [e for e in container.get("env") or () if e.get("name") not in values]
    env = [e for e in env if e.get("name") != "POD_IP"]
    pod_ip = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    container["env"] = [pod_ip, *env, *({"name": k, "value": v} for k, v in values.items())]
