"""End-to-end scenarios on the simulated cluster (those of the reference's live-cluster bats
suite, tests/bats/test_cd_*.bats in https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu):
the real controller and agents as processes, IMEX daemons run by the simulated kubelets with
the fake nvidia-imex, RBAC from the shipped manifests enforced."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from kubernetes import client
from scenario_env import (
    apply_until_ready,
    chain,
    channel_devices,
    clique_entries,
    delete_pod,
    delete_until_clean,
    eventually,
    labeled_nodes,
    pods_of,
    ready,
    ready_entries,
    run_scenario,
    snapshot,
)

from api import names
from runtime.kubecall import call
from sim.cluster.cluster import SimCluster
from sim.cluster.demo import create_objects
from sim.cluster.example import NAMESPACE, builtin, workload_pod
from sim.cluster.leftovers import process_leftovers
from sim.cluster.node import clique_id
from sim.controlplane import KUBERNETES
from sim.controlplane.binaries import ENV_DIR, available, pinned_version

SIM = Path(sys.executable).parent / "compute-domain-sim"
AGENT = "agent"


@pytest.fixture(params=["pod", AGENT])
def placement(request: pytest.FixtureRequest) -> str:
    """Driver-managed scenarios run with IMEX in daemon pods and in the node agents."""
    return str(request.param)


def _imex_processes(cluster: SimCluster) -> list[int]:
    """The nvidia-imex processes (the fake) of this cluster: its root is in their env."""
    marker = str(cluster.root)
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if not cmdline or Path(cmdline[0]).name != names.IMEX_BINARY:
            continue
        try:
            if any(marker in v for v in proc.environ().values()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def test_single_then_all_channels_in_sequence_on_one_node(short_dir, control_plane, placement):
    """Single injects channel 0 only, All every channel; the second CD on the same node is
    not blocked by anything the first one left (labels, clique entries, CDI files)."""

    async def body(cluster: SimCluster) -> None:
        single = builtin(clique_id(1), 1, "Single", name="single")
        observed = await apply_until_ready(cluster, single)
        [(key, devices)] = observed.link("device").data["devices"].items()
        assert key == "single-worker-0/worker"
        assert devices == ["/dev/nvidia-caps-imex-channels/channel0"]
        await delete_until_clean(cluster, single, [observed.uid])

        every = builtin(clique_id(1), 1, "All", name="every")
        observed = await apply_until_ready(cluster, every)
        [devices] = observed.link("device").data["devices"].values()
        assert len(devices) == names.MAX_IMEX_CHANNELS
        assert {
            "/dev/nvidia-caps-imex-channels/channel0",
            "/dev/nvidia-caps-imex-channels/channel222",
            "/dev/nvidia-caps-imex-channels/channel2047",
        } <= set(devices)
        await delete_until_clean(cluster, every, [observed.uid])

        # The driver's programs wrote as their own ServiceAccounts (RBAC applied to them).
        by_user = cluster.control_plane.requests_by_user()
        for role, account in cluster.accounts.items():
            writes = by_user.get(f"system:serviceaccount:{cluster.namespace}:{account}", {})
            made = writes.get("create", 0) + writes.get("update", 0)
            if role == "daemon" and placement == AGENT:  # no daemon pods at all
                assert made == 0, writes
            else:
                assert made > 0, (role, by_user.keys())

    run_scenario(short_dir, body, control_plane=control_plane, nodes=1, cliques=1,
                 imex_placement=placement)


def test_two_cliques_then_force_deleted_daemon_and_workload_pods(short_dir, control_plane,
                                                                 placement):
    """Four workers spread over two cliques get one clique object each; the domain heals
    after a daemon pod and a workload pod are force-deleted."""

    async def body(cluster: SimCluster) -> None:
        objects = builtin(None, 4, name="wide")
        observed = await apply_until_ready(cluster, objects)
        uid = observed.uid
        snap = await snapshot(cluster)
        entries = clique_entries(snap, uid)
        assert sorted(entries) == [f"{uid}.{clique_id(1)}", f"{uid}.{clique_id(2)}"]
        assert {len(e) for e in entries.values()} == {2}
        for per_node in entries.values():
            assert sorted(d["index"] for d in per_node.values()) == [0, 1]
        nodes = set(cluster.nodes)
        assert labeled_nodes(snap, uid) == nodes

        if placement == AGENT:
            # No daemon pods; SIGKILL of the node agent's whole container (its nvidia-imex
            # with it): the restarted agent starts IMEX again and its entry is Ready again.
            assert pods_of(snap, cluster.namespace, uid) == []
            await cluster.restart_agent("node-01")

            async def rejoined() -> bool:
                return ready_entries(await snapshot(cluster), uid) == nodes

            await eventually(rejoined, "node-01's agent back with 4 Ready entries")
        else:
            await _replace_a_daemon_pod(cluster, snap, uid, nodes)

        # Force-delete a workload pod: its node leaves the domain (label, daemon, entry).
        snap = await snapshot(cluster)
        [victim] = [p for p in pods_of(snap, NAMESPACE) if p["spec"].get("nodeName") == "node-03"]
        await delete_pod(cluster, NAMESPACE, victim["metadata"]["name"], force=True)

        async def node_left() -> bool:
            s = await snapshot(cluster)
            daemons = {p["spec"].get("nodeName") for p in pods_of(s, cluster.namespace, uid)}
            entries = {n for e in clique_entries(s, uid).values() for n in e}
            rest = nodes - {"node-03"}
            want = set() if placement == AGENT else rest
            return labeled_nodes(s, uid) == rest and daemons == want and entries == rest

        await eventually(node_left, "node-03 unlabeled, without daemon pod or clique entry")
        assert not any(
            "node-03" in f
            for f in cluster.nodes["node-03"].host.cdi_files()
            if not f.endswith("device_base.yaml")
        )
        # A replacement worker lands on the free node and the domain is whole again.
        replacement = workload_pod("wide-worker-9", "wide")
        await create_objects(cluster.admin, [replacement])
        observed2 = await ready(cluster, "wide")
        assert observed2.link("device").count == "4/4"
        await delete_until_clean(cluster, [*objects, replacement], [uid])

    run_scenario(short_dir, body, control_plane=control_plane, nodes=4, cliques=2,
                 imex_placement=placement)


async def _replace_a_daemon_pod(cluster: SimCluster, snap: Any, uid: str,
                                nodes: set[str]) -> None:
    """Force-delete node-01's IMEX daemon pod: the DaemonSet replaces it and it rejoins."""
    [daemon] = [
        p
        for p in pods_of(snap, cluster.namespace, uid)
        if p["spec"].get("nodeName") == "node-01"
    ]
    await delete_pod(cluster, cluster.namespace, daemon["metadata"]["name"], force=True)

    async def replaced_and_ready() -> bool:
        s = await snapshot(cluster)
        on_node = [
            p
            for p in pods_of(s, cluster.namespace, uid)
            if p["spec"].get("nodeName") == "node-01"
            and p["metadata"]["uid"] != daemon["metadata"]["uid"]
            and (p.get("status") or {}).get("phase") == "Running"
        ]
        return bool(on_node) and ready_entries(s, uid) == nodes

    await eventually(replaced_and_ready, "a new daemon pod on node-01 and 4 Ready entries")


def test_agent_and_controller_killed_mid_flight_then_restarted(short_dir, control_plane,
                                                              placement):
    """SIGKILL of the controller and one agent while the domain is forming, and of an agent
    once it is ready: the domain forms anyway and prepared claims keep their CDI IDs."""

    async def body(cluster: SimCluster) -> None:
        objects = builtin(clique_id(1), 2, name="crash")
        await create_objects(cluster.admin, objects)
        observed = chain(cluster, "crash")

        async def allocated() -> bool:
            observed.observe(await snapshot(cluster), 0.0)
            return observed.link("allocation").done_at is not None

        await eventually(allocated, "the workload claims allocated")
        assert cluster.controller is not None
        await cluster.controller.kill()
        await cluster.nodes["node-01"].agent.kill()
        await cluster.controller.start()
        await cluster.nodes["node-01"].agent.start()
        observed = await ready(cluster, "crash")
        before = observed.link("cdi").data["cdiDevices"]

        await cluster.restart_agent("node-02")
        await cluster.wait_ready()
        again = await ready(cluster, "crash")
        assert again.link("cdi").data["cdiDevices"] == before
        assert cluster.controller.starts == 2
        await delete_until_clean(cluster, objects, [observed.uid])

    run_scenario(short_dir, body, control_plane=control_plane, nodes=2, cliques=1,
                 imex_placement=placement)


def test_deleting_the_compute_domain_while_workloads_run(short_dir, control_plane, placement):
    """The ComputeDomain goes (daemons, labels, templates, cliques) while its workloads keep
    running; deleting them afterwards leaves nothing."""

    async def body(cluster: SimCluster) -> None:
        objects = builtin(clique_id(1), 2, name="early")
        observed = await apply_until_ready(cluster, objects)
        uid = observed.uid
        if placement == AGENT:
            assert len(_imex_processes(cluster)) == 2  # one per node, in the agents
        custom = client.CustomObjectsApi(cluster.admin)
        await call(
            custom.delete_namespaced_custom_object,
            names.GROUP,
            names.VERSION,
            NAMESPACE,
            names.PLURAL_COMPUTE_DOMAINS,
            "early",
        )

        async def domain_gone() -> bool:
            s = await snapshot(cluster)
            return (
                not [c for c in s.cds if c["metadata"]["uid"] == uid]
                and not pods_of(s, cluster.namespace, uid)
                and not labeled_nodes(s, uid)
                and not clique_entries(s, uid)
            )

        await eventually(domain_gone, "the CD, its daemon pods, labels and cliques gone")
        if placement == AGENT:  # the agents stopped the domain's nvidia-imex
            async def imex_gone() -> bool:
                return _imex_processes(cluster) == []

            await eventually(imex_gone, "no nvidia-imex left on the nodes")
        snap = await snapshot(cluster)
        workers = pods_of(snap, NAMESPACE)
        assert len(workers) == 2
        assert all(p["status"]["phase"] == "Running" for p in workers)
        await delete_until_clean(cluster, objects, [uid])

    run_scenario(short_dir, body, control_plane=control_plane, nodes=2, cliques=1,
                 imex_placement=placement)


def test_non_fabric_node_runs_the_pod_without_a_channel(short_dir, control_plane):
    """A node without NVLink fabric: the daemon still runs (its pod makes the node visible in
    the CD status with index -1), the workload runs, and no channel device is injected."""

    async def body(cluster: SimCluster) -> None:
        objects = builtin(None, 1, name="plain", node="node-02")
        await create_objects(cluster.admin, objects)

        async def running() -> dict | None:
            s = await snapshot(cluster)
            [pod] = pods_of(s, NAMESPACE) or [None]
            if pod is None or (pod.get("status") or {}).get("phase") != "Running":
                return None
            return pod

        await eventually(running, "the workload Running on node-02")
        view = json.loads(
            (
                cluster.nodes["node-02"].host.pods_dir
                / f"{NAMESPACE}_plain-worker-0"
                / "worker.json"
            ).read_text()
        )
        assert channel_devices(view) == []

        async def status_has_node() -> list | None:
            s = await snapshot(cluster)
            [cd] = [c for c in s.cds if c["metadata"]["name"] == "plain"]
            nodes = (cd.get("status") or {}).get("nodes") or []
            return nodes if any(n.get("name") == "node-02" for n in nodes) else None

        nodes = await eventually(status_has_node, "node-02 in the CD status")
        [entry] = [n for n in nodes if n["name"] == "node-02"]
        assert entry["index"] == -1 and entry["cliqueID"] == ""
        uid = (await snapshot(cluster)).cds[0]["metadata"]["uid"]
        await delete_until_clean(cluster, objects, [uid])

    run_scenario(short_dir, body, control_plane=control_plane, nodes=1, cliques=1, non_fabric=1)


def test_host_managed_ready_and_not_ready_host_imex(short_dir, control_plane):
    """Host-managed: the node whose host IMEX is ready runs its workload; the other's stays
    pending with the reason in an Event until the admin's IMEX becomes ready."""

    async def body(cluster: SimCluster) -> None:
        stalled = cluster.nodes["node-02"]
        assert stalled.host_imex is not None
        peers = [n.ip for n in cluster.nodes.values()]
        await stalled.host_imex.restart(peers, FAKE_IMEX_NEVER_READY="1")
        objects = builtin(clique_id(1), 2, name="hosted")
        await create_objects(cluster.admin, objects)
        core = client.CoreV1Api(cluster.admin)

        async def one_running_one_waiting() -> bool:
            s = await snapshot(cluster)
            phases = {
                p["spec"].get("nodeName"): p["status"].get("phase") for p in pods_of(s, NAMESPACE)
            }
            if phases != {"node-01": "Running", "node-02": "Pending"}:
                return False
            events = await call(core.list_namespaced_event, NAMESPACE)
            # The agent's reason reaches the pod's Events (`kubectl describe pod`).
            return any(
                e.reason == "FailedPrepareDynamicResources"
                and "host nvidia-imex daemon not ready: INIT_GPU" in (e.message or "")
                for e in events.items
            )

        await eventually(one_running_one_waiting, "node-02 Pending, the reason in an Event")
        await stalled.host_imex.restart(peers)
        observed = await ready(cluster, "hosted")
        assert observed.link("device").count == "2/2"
        assert [link.key for link in observed.links] == [
            "computeDomain", "template", "allocation", "cdi", "device",
        ]  # fmt: skip
        await delete_until_clean(cluster, objects, [observed.uid])

    run_scenario(
        short_dir, body, control_plane=control_plane, nodes=2, cliques=1, mode="hostManaged"
    )


# --- the CLI ---------------------------------------------------------------------------------


def test_demo_json_reports_every_step_and_a_clean_teardown(short_dir, control_plane,
                                                           placement):
    out = subprocess.run(
        [SIM, "demo", "--nodes", "2", "--cliques", "1", "--json", "--root", str(short_dir),
         "--control-plane", control_plane, "--imex-placement", placement],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["ok"] is True and report["failedStep"] is None
    assert report["cluster"]["controlPlane"] == control_plane
    if control_plane == KUBERNETES:  # the upstream release that `make k8s` pinned
        assert report["server_version"] == pinned_version()
    else:
        assert report["server_version"].endswith("-compute-domain-sim")
    assert report["time_to_ready_s"] > 0
    [cd] = report["computeDomains"]
    assert cd["computeDomain"] == "default/demo" and cd["complete"]
    steps = [s["step"] for s in cd["steps"]]
    imex = "agentImex" if placement == AGENT else "daemonPod"
    assert report["cluster"]["imexPlacement"] == placement
    assert steps == [
        "computeDomain", "template", "allocation", "nodeLabel", imex, "cliqueEntry",
        "cdi", "device",
    ]  # fmt: skip
    assert all(s["ok"] and s["seconds"] is not None for s in cd["steps"])
    assert cd["steps"][-1]["count"] == "2/2"
    assert report["cleanup"] == {
        "ok": True,
        "seconds": report["cleanup"]["seconds"],
        "leftovers": [],
    }


def test_demo_names_the_step_that_did_not_happen(short_dir, tmp_path, control_plane):
    """Workers pinned to a clique no node is in: nothing gets allocated, and the report says so."""
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump_all(builtin("no-such-clique", 1, name="lost")))
    out = subprocess.run(
        [SIM, "demo", "--nodes", "1", "--workload", str(workload), "--timeout", "4",
         "--root", str(short_dir), "--control-plane", control_plane],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("FAIL: claims allocated (0/1) for ComputeDomain default/lost")


def test_demo_rejects_bad_arguments_before_starting(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Deployment\nmetadata: {name: x}\n")
    cases = [
        (["--nodes", "2", "--cliques", "3"], "--cliques 3 is more than --nodes 2"),
        (["--workload", str(tmp_path / "missing.yaml")], "cannot read workload file"),
        (["--workload", str(bad)], "kind 'Deployment' is not supported here"),
        (["--nodes", "0"], "0 must be at least 1"),
    ]
    for args, message in cases:
        out = subprocess.run([SIM, "demo", *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr, (args, out.stderr)
    for value, message in (("-1", "-1.0 must not be negative"),
                           ("soon", "invalid number of seconds 'soon'"),
                           ("nan", "invalid number of seconds 'nan'")):  # fmt: skip
        out = subprocess.run([SIM, "up", "--slice-wipe-delay", value],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 2, (value, out.stderr)
        assert message in out.stderr, (value, out.stderr)
    # Without the upstream components built: the command that builds them, and no start.
    env = {**os.environ, ENV_DIR: str(tmp_path / "nothing-built")}
    out = subprocess.run(
        [SIM, "demo", "--control-plane", "kubernetes"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "--control-plane kubernetes: the upstream Kubernetes components" in out.stderr
    assert "run `make k8s`" in out.stderr


def test_up_serves_kubectl_until_interrupted(short_dir, tmp_path, control_plane, kubectl_bin):
    """`compute-domain-sim up`: kubectl works as the admin with the kubeconfig it writes, the
    agents are registered, `kubectl version` names the server, and Ctrl-C stops everything."""
    import signal

    from eventually import eventually as eventually_sync

    kubectl = str(kubectl_bin)
    kubeconfig = tmp_path / "kc"
    # Progress lines of a slow start go to stderr: kept apart from what stdout must say.
    errors = tmp_path / "stderr"
    proc = subprocess.Popen(
        [SIM, "up", "--nodes", "2", "--root", str(short_dir), "--kubeconfig-out", str(kubeconfig),
         "--control-plane", control_plane],
        stdout=subprocess.PIPE,
        stderr=errors.open("w"),
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("simulated cluster up: 2 nodes"), first + errors.read_text()

        def kc(*args: str) -> str:
            out = subprocess.run(
                [kubectl, "--kubeconfig", str(kubeconfig), *args],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
            return out.stdout

        eventually_sync(lambda: kc("get", "resourceslices", "-o", "name").count("\n") >= 2,
                        "a ResourceSlice per node", timeout=30, interval=0.5)
        nodes = kc("get", "nodes", "-L", names.LABEL_GPU_CLIQUE)
        assert "node-01" in nodes and "node-02" in nodes and clique_id(1) in nodes
        classes = kc("get", "deviceclasses", "-o", "name")
        assert names.DEVICE_CLASS_DEFAULT_CHANNEL in classes
        version = json.loads(kc("version", "-o", "json"))
        assert version["clientVersion"]["gitVersion"] == pinned_version()
        if control_plane == KUBERNETES:
            assert version["serverVersion"]["gitVersion"] == pinned_version()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    assert process_leftovers(short_dir) == []


@pytest.mark.e2e
def test_kubectl_logs_reach_the_nodes_kubelet(short_dir, tmp_path, kubectl_bin):
    """`kubectl logs` of an IMEX daemon pod: kube-apiserver dials the node's kubelet API
    (its certificate checked against the cluster CA, the apiserver's client certificate
    presented) and streams what the container wrote; --tail and --limit-bytes as kubelet."""
    if not available()[0]:
        import pytest

        pytest.skip(f"kubernetes control plane: {available()[1]}")

    async def body(cluster: SimCluster) -> None:
        objects = builtin(clique_id(1), 1, name="logs")
        observed = await apply_until_ready(cluster, objects)
        snap = await snapshot(cluster)
        [daemon] = pods_of(snap, cluster.namespace, observed.uid)
        name = daemon["metadata"]["name"]

        def kubectl(*args: str, ns: str = cluster.namespace) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(kubectl_bin), "--kubeconfig", str(cluster.kubeconfigs["admin"]),
                 "-n", ns, *args],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip

        out = await asyncio.to_thread(kubectl, "logs", name)
        assert out.returncode == 0, out.stderr
        assert "IMEX daemon is ready" in out.stdout, out.stdout[-2000:]
        tail = await asyncio.to_thread(kubectl, "logs", name, "--tail=1")
        assert tail.returncode == 0 and tail.stdout.count("\n") == 1, tail
        assert out.stdout.endswith(tail.stdout)
        head = await asyncio.to_thread(kubectl, "logs", name, "--limit-bytes=7")
        assert head.stdout == out.stdout[:7]
        # -f streams: what was there first, then whatever the container writes next.
        follow = subprocess.Popen(
            [str(kubectl_bin), "--kubeconfig", str(cluster.kubeconfigs["admin"]),
             "-n", cluster.namespace, "logs", "-f", name],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert follow.stdout is not None
            first = await asyncio.to_thread(follow.stdout.readline)
            assert first and out.stdout.startswith(first)
            assert follow.poll() is None  # still following
        finally:
            follow.kill()
            follow.wait()
        wrong = await asyncio.to_thread(kubectl, "logs", name, "-c", "nosuch")
        assert wrong.returncode != 0 and "nosuch" in wrong.stderr
        # A workload container the sim does not execute has an empty log.
        worker = await asyncio.to_thread(kubectl, "logs", "logs-worker-0", ns=NAMESPACE)
        assert worker.returncode == 0 and worker.stdout == "", worker
        await delete_until_clean(cluster, objects, [observed.uid])

    run_scenario(short_dir, body, control_plane=KUBERNETES, nodes=1, cliques=1)
