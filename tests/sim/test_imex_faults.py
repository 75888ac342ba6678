"""A faulty IMEX daemon on some nodes of a domain, on the simulated cluster (processes, RBAC
from the shipped manifests enforced): the healthy nodes' workloads run, the faulty nodes'
workloads stay Pending, and both ends say why -- the workload pod's
FailedPrepareDynamicResources Event (from the agent) names the node's IMEX daemon and its
clique entry, and the daemon pod's own Events (IMEXDaemonExited, IMEXDaemonNotReady) name
the cause. Once the faults are gone the domain forms."""

from __future__ import annotations

import json
import re

from kubernetes import client
from scenario_env import (
    channel_devices,
    clique_entries,
    delete_pod,
    delete_until_clean,
    eventually,
    pods_of,
    ready,
    run_scenario,
    snapshot,
)

from api import names
from runtime.kubecall import call
from sim.cluster.cluster import SimCluster
from sim.cluster.demo import create_objects
from sim.cluster.example import NAMESPACE, builtin
from sim.cluster.node import clique_id

HEALTHY = ("node-01", "node-02")
# node-03: nvidia-imex dies 1 s after every start, before it could become READY;
# node-04: nvidia-imex stays INIT_GPU forever. Both daemons report after 3 s, not 60 s.
FAULTS = {
    "node-03": {"FAKE_IMEX_CRASH_AFTER": "1", "FAKE_IMEX_START_DELAY": "30"},
    "node-04": {"FAKE_IMEX_NEVER_READY": "1"},
}
THRESHOLD = {"IMEX_NOT_READY_EVENT_AFTER": "3s"}


def test_crash_looping_and_never_ready_imex_keep_only_their_nodes_pending(short_dir, control_plane):
    async def body(cluster: SimCluster) -> None:
        for node, knobs in FAULTS.items():
            cluster.nodes[node].kubelet.env_extra.update({**knobs, **THRESHOLD})
        objects = builtin(clique_id(1), 4, name="faulty")
        await create_objects(cluster.admin, objects)
        core = client.CoreV1Api(cluster.admin)
        uid_of: dict[str, str] = {}

        async def events_in(namespace: str) -> list[client.CoreV1Event]:
            return (await call(core.list_namespaced_event, namespace)).items

        async def healthy_running_faulty_pending() -> dict[str, str] | None:
            s = await snapshot(cluster)
            [cd] = [c for c in s.cds if c["metadata"]["name"] == "faulty"]
            uid_of["cd"] = cd["metadata"]["uid"]
            phases = {
                p["spec"].get("nodeName"): (p.get("status") or {}).get("phase")
                for p in pods_of(s, NAMESPACE)
            }
            want = {"node-01": "Running", "node-02": "Running",
                    "node-03": "Pending", "node-04": "Pending"}  # fmt: skip
            if phases != want:
                return None
            waiting = {}
            for e in await events_in(NAMESPACE):
                if e.reason != "FailedPrepareDynamicResources":
                    continue
                for node in FAULTS:
                    if f"IMEX daemon on {node} to report Ready" in (e.message or "") and (
                        "is NotReady" in e.message
                    ):
                        waiting[node] = e.message
            return waiting if set(waiting) == set(FAULTS) else None

        waiting = await eventually(
            healthy_running_faulty_pending, "node-01/02 Running, node-03/04 Pending with a reason"
        )
        uid = uid_of["cd"]
        for node, message in waiting.items():
            ns = cluster.namespace
            assert message.endswith(
                f"see why with: kubectl describe -n {ns} $(kubectl get pod -n {ns} -o name "
                f"-l {names.LABEL_COMPUTE_DOMAIN}={uid} --field-selector spec.nodeName={node})"
            ), message

        snap = await snapshot(cluster)
        [entries] = clique_entries(snap, uid).values()
        assert {n: entries[n]["status"] for n in entries} == {
            "node-01": names.STATUS_READY, "node-02": names.STATUS_READY,
            "node-03": names.STATUS_NOT_READY, "node-04": names.STATUS_NOT_READY,
        }  # fmt: skip
        for pod in pods_of(snap, NAMESPACE):
            if pod["spec"]["nodeName"] in HEALTHY:
                view = json.loads(
                    (
                        cluster.nodes[pod["spec"]["nodeName"]].host.pods_dir
                        / f"{NAMESPACE}_{pod['metadata']['name']}"
                        / "worker.json"
                    ).read_text()
                )
                assert channel_devices(view) == ["/dev/nvidia-caps-imex-channels/channel0"]

        # The daemon pods of the faulty nodes: their own Events name the cause.
        daemons = {p["spec"]["nodeName"]: p for p in pods_of(snap, cluster.namespace, uid)}
        assert set(daemons) == set(cluster.nodes)

        async def daemon_events() -> dict[str, str] | None:
            found = {}
            for e in await events_in(cluster.namespace):
                for node, reason in (("node-03", "IMEXDaemonExited"),
                                     ("node-04", "IMEXDaemonNotReady")):  # fmt: skip
                    pod = daemons[node]["metadata"]
                    if (e.reason == reason and e.type == "Warning"
                            and e.involved_object.name == pod["name"]
                            and e.involved_object.uid == pod["uid"]):  # fmt: skip
                        found[node] = e.message
            return found if len(found) == 2 else None

        found = await eventually(daemon_events, "IMEX Events on the node-03/04 daemon pods", 20)
        assert re.fullmatch(
            r"nvidia-imex exited with code 1 after \d+\.\ds; restart #\d+ in \d+\.\ds",
            found["node-03"],
        ), found["node-03"]
        assert re.fullmatch(
            r"nvidia-imex is INIT_GPU, not READY, \d+s after it started", found["node-04"]
        ), found["node-04"]
        # The healthy daemons said nothing.
        healthy = {daemons[n]["metadata"]["name"] for n in HEALTHY}
        assert not [
            e for e in await events_in(cluster.namespace)
            if e.involved_object.name in healthy and e.reason.startswith("IMEXDaemon")
        ]  # fmt: skip

        # The admin fixes the nodes: healthy IMEX from now on, the faulty daemon pods
        # deleted; the DaemonSet replaces them and the whole domain forms.
        for node, knobs in FAULTS.items():
            for key in knobs:
                cluster.nodes[node].kubelet.env_extra.pop(key)
            await delete_pod(
                cluster, cluster.namespace, daemons[node]["metadata"]["name"], force=False
            )
        observed = await ready(cluster, "faulty", timeout=40)
        assert observed.link("device").count == "4/4"
        assert observed.uid == uid
        await delete_until_clean(cluster, objects, [uid])

    run_scenario(short_dir, body, control_plane=control_plane, nodes=4, cliques=1)
