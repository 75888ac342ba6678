"""`compute-domain-agent daemon run` as real processes forming an IMEX domain with the fake
nvidia-imex on loopback addresses, against the API emulator."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from eventually import eventually
from kubernetes import client

from api import names
from sim.fakeimex.install import install

AGENT = Path(sys.executable).parent / "compute-domain-agent"
TEMPLATE = (
    Path(__file__).parents[2] / "agent" / "templates" / "compute-domain-daemon-config.tmpl.cfg"
)
NS = "nvidia-dra-driver"
CLIQUE = "0f2a6e3c-1111-2222-3333-444455556666.3"


def wait_for(predicate, timeout=30.0, what="condition"):
    return eventually(predicate, what, timeout=timeout, interval=0.05)


class Daemon:
    def __init__(
        self,
        root: Path,
        kubeconfig: Path,
        bins: Path,
        cd: dict,
        node: int,
        core: client.CoreV1Api,
        gates: str = "",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.node = f"n{node}"
        self.ip = f"127.0.1.{100 + node}"
        self.dir = root / self.node
        imexd = self.dir / "imexd"
        imexd.mkdir(parents=True)
        shutil.copy(TEMPLATE, imexd / "imexd.cfg.tmpl")
        self.hosts = self.dir / "hosts"
        self.hosts.write_text("127.0.0.1\tlocalhost\n")
        self.state = self.dir / "imex-state.json"
        pod = core.create_namespaced_pod(
            NS,
            {
                "metadata": {
                    "name": f"daemon-{self.node}",
                    "labels": {names.LABEL_COMPUTE_DOMAIN: cd["metadata"]["uid"]},
                },
                "spec": {"nodeName": self.node, "containers": [{"name": "d", "image": "i"}]},
            },
        )
        self.env = {
            "PATH": f"{bins}:/usr/bin:/bin",
            "KUBECONFIG": str(kubeconfig),
            "CLIQUE_ID": CLIQUE,
            "COMPUTE_DOMAIN_UUID": cd["metadata"]["uid"],
            "COMPUTE_DOMAIN_NAME": cd["metadata"]["name"],
            "COMPUTE_DOMAIN_NAMESPACE": "default",
            "NODE_NAME": self.node,
            "POD_IP": self.ip,
            "POD_UID": pod.metadata.uid,
            "POD_NAME": pod.metadata.name,
            "POD_NAMESPACE": NS,
            "MAX_NODES_PER_IMEX_DOMAIN": "18",
            "IMEXD_DIR": str(imexd),
            "HOSTS_FILE": str(self.hosts),
            "FAKE_IMEX_HOSTS_FILE": str(self.hosts),
            "FAKE_IMEX_STATE_FILE": str(self.state),
            "FAKE_IMEX_RELOAD_INTERVAL": "0.1",
            "FAKE_IMEX_HEARTBEAT": "0.2",
            "IMEX_POLL_INTERVAL": "0.2",
            "FEATURE_GATES": gates,
            **(extra_env or {}),
        }
        self.respawn()

    def respawn(self) -> None:
        """Start (again) the daemon container's process: same pod, same directories."""
        self.log = (self.dir / "daemon.log").open("ab")
        self.proc = subprocess.Popen(
            [AGENT, "daemon", "run"], env=self.env, stdout=self.log, stderr=self.log
        )

    def imex(self) -> dict:
        try:
            return json.loads(self.state.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
        finally:
            self.log.close()


def cluster_with_domain(k8s, name: str, num_nodes: int = 0):
    """The driver namespace and one ComputeDomain, as the daemons find them."""
    core = client.CoreV1Api(k8s)
    core.create_namespace({"metadata": {"name": NS}})
    custom = client.CustomObjectsApi(k8s)
    cd = custom.create_namespaced_custom_object(
        names.GROUP,
        names.VERSION,
        "default",
        names.PLURAL_COMPUTE_DOMAINS,
        {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND_COMPUTE_DOMAIN,
            "metadata": {"name": name},
            "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": "t"}}},
        },
    )
    return core, custom, cd


@pytest.fixture
def domain(apiserver, k8s, project_crds, tmp_path):
    core, custom, cd = cluster_with_domain(k8s, "cd1")
    bins = tmp_path / "bin"
    install(bins)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    daemons: list[Daemon] = []

    def start(node: int) -> Daemon:
        d = Daemon(tmp_path, kubeconfig, bins, cd, node, core)
        daemons.append(d)
        return d

    def clique() -> list[dict]:
        try:
            obj = custom.get_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                NS,
                names.PLURAL_CLIQUES,
                names.clique_object_name(cd["metadata"]["uid"], CLIQUE),
            )
        except client.ApiException:
            return []
        return obj.get("daemons") or []

    try:
        yield start, clique, core
    finally:
        for d in daemons:
            if d.proc.poll() is None:
                d.stop()
            # A daemon killed by a test leaves its IMEX child behind, as a crashed
            # container would on a real node; end it so the ports are free.
            pid = d.imex().get("pid")
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_three_daemons_form_a_domain_and_a_fourth_joins_with_sigusr1(domain):
    start, clique, core = domain
    daemons = [start(i) for i in (1, 2, 3)]
    wait_for(
        lambda: len(clique()) == 3 and all(d.get("status") == "Ready" for d in clique()),
        what="three Ready entries",
    )
    assert sorted(d["index"] for d in clique()) == [0, 1, 2]
    wait_for(
        lambda: all(d.imex().get("domain_status") == "UP" for d in daemons),
        what="fake IMEX domain UP",
    )
    pid = daemons[0].imex()["pid"]
    reloads = daemons[0].imex().get("reload_count", 0)
    fourth = start(4)
    wait_for(
        lambda: len(clique()) == 4 and all(d.get("status") == "Ready" for d in clique()),
        what="four Ready entries",
    )
    wait_for(lambda: daemons[0].imex().get("reload_count", 0) > reloads, what="SIGUSR1")
    assert daemons[0].imex()["pid"] == pid, "a peer joining must not restart IMEX"
    hosts = daemons[0].hosts.read_text()
    assert hosts.count(fourth.ip) == 1
    assert "192.0.2.1" in hosts, "unused slots point at the sentinel"
    labels = core.read_namespaced_pod(f"daemon-{fourth.node}", NS).metadata.labels
    assert labels[names.LABEL_CLIQUE_ID] == CLIQUE
    # Graceful stop removes the entry and stops IMEX.
    assert fourth.stop() == 0
    wait_for(lambda: len(clique()) == 3, what="entry removed")
    assert {d["nodeName"] for d in clique()} == {"n1", "n2", "n3"}


def test_a_restarted_daemon_keeps_its_index(domain):
    start, clique, _ = domain
    first = start(1)
    second = start(2)
    wait_for(lambda: len(clique()) == 2, what="two entries")
    index = next(d["index"] for d in clique() if d["nodeName"] == "n2")
    second.proc.kill()  # a crash: no graceful leave, the entry and IMEX child stay behind
    second.proc.wait(10)
    second.respawn()
    wait_for(
        lambda: (
            second.imex().get("state") == "READY"
            and any(d["nodeName"] == "n2" and d.get("status") == "Ready" for d in clique())
        ),
        what="rejoined",
    )
    assert next(d["index"] for d in clique() if d["nodeName"] == "n2") == index
    assert first.proc.poll() is None and second.proc.poll() is None


def test_check_reports_the_imex_state(domain, tmp_path):
    start, clique, _ = domain
    d = start(1)
    wait_for(lambda: any(e.get("status") == "Ready" for e in clique()), what="Ready")
    env = dict(d.env)
    out = subprocess.run(
        [AGENT, "daemon", "check"], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0
    d.stop()
    out = subprocess.run(
        [AGENT, "daemon", "check"], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 1 and out.stdout.strip()


def test_pod_ip_not_local_is_a_clear_error(domain):
    start, _, _ = domain
    d = start(1)
    d.proc.kill()
    d.proc.wait(10)
    env = dict(d.env, POD_IP="192.0.2.77")
    out = subprocess.run(
        [AGENT, "daemon", "run"], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 1
    assert "192.0.2.77" in out.stderr and "not" in out.stderr
    assert os.environ.get("POD_IP") is None


def test_own_index_change_restarts_imex(domain, k8s):
    start, clique, _ = domain
    d = start(1)
    wait_for(lambda: d.imex().get("state") == "READY" and clique(), what="running")
    pid = d.imex()["pid"]
    custom = client.CustomObjectsApi(k8s)
    name = names.clique_object_name(d.env["COMPUTE_DOMAIN_UUID"], CLIQUE)
    obj = custom.get_namespaced_custom_object(
        names.GROUP, names.VERSION, NS, names.PLURAL_CLIQUES, name
    )
    obj["daemons"][0]["index"] = 5
    custom.replace_namespaced_custom_object(
        names.GROUP, names.VERSION, NS, names.PLURAL_CLIQUES, name, obj
    )
    wait_for(
        lambda: d.imex().get("pid") not in (None, pid) and d.imex().get("state") == "READY",
        what="IMEX restarted with its new identity",
    )
    assert d.imex()["node_id"] == 5


def test_an_entry_removed_by_someone_else_comes_back(domain, k8s):
    """A controller pruning from a lagging cache (or an admin's edit) removes a live
    daemon's entry: the daemon puts it back instead of silently dropping out of the
    domain for good."""
    start, clique, _ = domain
    first = start(1)
    start(2)
    wait_for(lambda: len([d for d in clique() if d.get("status") == "Ready"]) == 2,
             what="two Ready entries")
    custom = client.CustomObjectsApi(k8s)
    name = names.clique_object_name(first.env["COMPUTE_DOMAIN_UUID"], CLIQUE)
    obj = custom.get_namespaced_custom_object(
        names.GROUP, names.VERSION, NS, names.PLURAL_CLIQUES, name
    )
    obj["daemons"] = [d for d in obj["daemons"] if d["nodeName"] != "n2"]
    custom.replace_namespaced_custom_object(
        names.GROUP, names.VERSION, NS, names.PLURAL_CLIQUES, name, obj
    )
    wait_for(
        lambda: any(d["nodeName"] == "n2" and d.get("status") == "Ready" for d in clique()),
        what="the removed entry back and Ready",
    )
    assert sorted(d["index"] for d in clique()) == [0, 1]


def test_ip_mode_waits_for_num_nodes_then_lists_peer_ips(apiserver, k8s, project_crds, tmp_path):
    core, _, cd = cluster_with_domain(k8s, "ipcd", num_nodes=2)
    bins = tmp_path / "bin"
    install(bins)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    gates = "IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false"
    daemons = []
    try:
        # V(5) logs each count of the joined nodes the daemon waits on.
        first = Daemon(tmp_path, kubeconfig, bins, cd, 1, core, gates=gates,
                       extra_env={"LOG_VERBOSITY": "5"})
        daemons.append(first)
        log = first.dir / "daemon.log"
        wait_for(lambda: b"numNodes: 2, nodes seen: 1" in log.read_bytes(),
                 what="the first daemon counting itself alone")
        assert not first.state.exists(), "IMEX must wait until numNodes daemons joined"
        second = Daemon(tmp_path, kubeconfig, bins, cd, 2, core, gates=gates)
        daemons.append(second)
        nodes_cfg = first.dir / "imexd" / "nodes.cfg"
        wait_for(
            lambda: (
                nodes_cfg.exists()
                and sorted(nodes_cfg.read_text().split()) == [first.ip, second.ip]
            ),
            what="IP nodes config",
        )
        wait_for(lambda: first.imex().get("state") == "READY", what="IMEX started")
        text = log.read_text()
        started = re.search(r"Start: \S*nvidia-imex", text)
        assert started and "nodes seen: 2" in text[: started.start()], (
            "IMEX started before the second daemon joined"
        )
    finally:
        for d in daemons:
            d.stop()
            pid = d.imex().get("pid")
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
