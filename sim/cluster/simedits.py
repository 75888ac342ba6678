"""The deploy manifests as the simulated cluster installs them: tuned for a quick demo, as
an admin would tune them, and nothing else of the driver's configuration changes.

The agent cleans up every 2 s, tells kubelet to retry after 8 s and labels its node with
its GPU clique; the controller resyncs every 10 s; both log at the sim's verbosity. The
caller's `agent_env` and `controller_env` are merged over that (a test editing the
DaemonSet or Deployment). What a node would give the containers that one machine cannot
(their own network, the node's GPUs) comes from the sim's runtime instead
(`sim.cluster.onemachine`), so manifests installed by anyone else run too.

In the in-process scale mode (`sim/cluster/inprocess.py`) every agent shares one event
loop and one GIL with the rest of the sim, so a late liveness answer measures the sim's
load, not the agent's health: there the plugin's liveness probe tolerates
`IN_PROCESS_LIVENESS_FAILURES` misses instead of three (a restart there would only add load),
and the agents clean up every 10 s (at 72 nodes the 2 s sweeps of every agent's CDI and
plugin directories were 6 % of the sim's CPU).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from api import names

Obj = dict[str, Any]

IN_PROCESS_LIVENESS_FAILURES = 60


def for_one_machine(
    objects: Sequence[Obj],
    verbosity: int,
    *,
    agent_env: Mapping[str, str],
    controller_env: Mapping[str, str],
    in_process: bool = False,
) -> list[Obj]:
    """A copy of `objects` with the edits of the module doc."""
    out = copy.deepcopy(list(objects))
    if in_process:
        probe = _container(out, "DaemonSet").get("livenessProbe")
        if probe is not None:
            probe["failureThreshold"] = IN_PROCESS_LIVENESS_FAILURES
    agent = {
        names.ENV_GPU_CLIQUE_LABEL_ENABLED: "true",
        "CLEANUP_INTERVAL": "10s" if in_process else "2s",
        # kubelet hears why a claim waits (an Event on the pod) after 8 s, not 45 s.
        "PREPARE_TIMEOUT": "8s",
        "LOG_VERBOSITY": str(verbosity),
    }
    _set_env(_container(out, "DaemonSet"), {**agent, **agent_env})
    controller = {
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


def _set_env(container: Obj, values: Mapping[str, str]) -> None:
    """Set `values` in the container's env (replacing entries of the same name), with
    POD_IP from the downward API first so that `$(POD_IP)` expands."""
    env = [e for e in container.get("env") or () if e.get("name") not in values]
    env = [e for e in env if e.get("name") != "POD_IP"]
    pod_ip = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    container["env"] = [pod_ip, *env, *({"name": k, "value": v} for k, v in values.items())]
