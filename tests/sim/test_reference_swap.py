"""The reference driver swapped for ours in place (issue 17): `helm upgrade` of release
dra-driver-nvidia-gpu to this chart while ComputeDomains run under the reference.

What a cluster holds under the reference is made first: our driver, installed by helm under
the reference's release name and namespace, runs the reference's channel-injection demos
(one `Single`, one `All` domain); then its pods are stopped and everything they left is
rewritten into the reference's form (`reference_state.py`): each node's checkpoint, byte
for byte as the reference writes it, the claim CDI specs as its CDI library writes them, the
ResourceSlices and the controller's objects as the reference's templates render them. Then
the swap: `helm upgrade` to this chart starts our plugin and controller fresh on that state.

Checked as an admin notices it, with kubectl and the nodes' files: every workload keeps its
running container and its channels, the domains' DaemonSets, daemon pods, claim templates
and cliques are adopted (same objects, no second of any), the reference's checkpoint is kept
as it is, unpreparing a claim the reference prepared removes its entry and the reference's
CDI spec (leaving a checkpoint the reference could read back), and deleting each
ComputeDomain afterwards completes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
import reference_state as ref
from eventually import eventually
from sim_up import DEMO, Up

from sim.cluster import manifests
from sim.cluster.node import BOOT_ID_PATH, FABRIC_IMEX_MGMT_PATH, PROC_DEVICES_PATH
from sim.cluster.sandbox import can_sandbox

NS = RELEASE = "dra-driver-nvidia-gpu"
PLUGINS = "dra-driver-nvidia-gpu-component=kubelet-plugin"
CONTROLLER = "dra-driver-nvidia-gpu-component=controller"
SINGLE, ALL = "imex-channel-injection", "imex-channel-injection-all"
DEMOS = {SINGLE: DEMO / "channel-injection.yaml", ALL: DEMO / "channel-injection-all.yaml"}
CLIQUE_LABEL = "nvidia.com/gpu.clique"
# A label no node has: the DaemonSet of plugins then runs nowhere.
STOPPED = '{"compute-domain-sim/stopped": "true"}'

Obj = dict[str, Any]
T = TypeVar("T")

needs_root = pytest.mark.skipif(bool(can_sandbox()), reason=can_sandbox() or "root")


def until(check: Callable[[], T], what: str, timeout: float = 60) -> T:
    """The first truthy result of `check`, polled; fails naming `what` and the last result."""
    return eventually(check, what, timeout=timeout, interval=0.2)


class Cluster:
    """`compute-domain-sim up`, seen through kubectl, helm and its nodes' files."""

    def __init__(self, up: Up, helm_bin: Path, root: Path) -> None:
        self.up, self.helm_bin, self.root = up, helm_bin, root

    def helm(self, *args: str) -> str:
        argv = [*args, "--kubeconfig", str(self.up.kubeconfig), "--namespace", NS]
        done = manifests.run_helm(self.helm_bin, argv, check=False)
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
        return str(done.stdout)

    def items(self, *args: str) -> list[Obj]:
        listed: list[Obj] = json.loads(self.up.ok("get", *args, "-o", "json"))["items"]
        return listed

    def obj(self, *args: str) -> Obj:
        got: Obj = json.loads(self.up.ok("get", *args, "-o", "json"))
        return got

    def file(self, node: str, node_path: str) -> Path:
        """Where node `node` keeps its `node_path` (the sim's node root, `--root`)."""
        return self.root / "nodes" / node / "fs" / node_path.lstrip("/")

    def pods(self, selector: str, namespace: str = NS) -> list[str]:
        return self.up.ok("get", "pods", "-n", namespace, "-l", selector, "-o", "name").split()

    def none(self, *args: str) -> bool:
        """Whether `kubectl get ARGS` lists nothing."""
        return self.items(*args) == []

    def cd_status(self, name: str, want: str) -> bool:
        return bool(self.obj("computedomain", name).get("status", {}).get("status") == want)

    def ready(self, selector: str) -> None:
        until(lambda: self.pods(selector), f"pods {selector}")
        self.up.ok("wait", "-n", NS, "--for=condition=Ready", "pods", "-l", selector,
                   "--timeout=90s")  # fmt: skip

    def claim_spec(self, node: str, claim_uid: str) -> Path:
        return self.file(node, f"{ref.CDI_ROOT}/{ref.claim_spec_name(claim_uid)}")

    def checkpoint(self, node: str) -> bytes:
        return self.file(node, ref.CHECKPOINT).read_bytes()

    def unprepared(self, node: str) -> bool:
        """Whether the node's checkpoint holds no claim (and the reference could read it)."""
        return ref.checkpoint_claims(self.checkpoint(node)) == {}

    def no_claim_specs(self, node: str) -> bool:
        return not list(self.file(node, ref.CDI_ROOT).glob(f"{ref.CDI_VENDOR}-claim_*"))

    def gone(self, path: Path) -> bool:
        return not path.exists()


@pytest.fixture(scope="module")
def cluster(kubectl_bin: Path, helm_bin: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:  # fmt: skip
    workdir = tmp_path_factory.mktemp("swap")
    # The kubelets wait 10 minutes, not 30 s, before they delete a deregistered plugin's
    # slices: the swap below keeps the plugins stopped for as long as writing the reference's
    # state and a `helm upgrade --wait` take, which on a loaded machine is more than 30 s.
    up = Up(kubectl_bin, workdir, "--no-driver", "--control-plane", "emulator",
            "--slice-wipe-delay", "600")  # fmt: skip
    try:
        yield Cluster(up, helm_bin, workdir / "root")
    finally:
        up.close()


# --- the state the reference leaves ---------------------------------------------------------


def _node_of(claim: Obj) -> str:
    [pool] = {r["pool"] for r in claim["status"]["allocation"]["devices"]["results"]}
    return str(pool)


def _config(claim: Obj) -> Obj:
    [config] = [c["opaque"]["parameters"]
                for c in claim["status"]["allocation"]["devices"]["config"]]  # fmt: skip
    return dict(config)


def write_reference_node_state(c: Cluster, claims: list[Obj]) -> dict[Path, bytes]:
    """Each node's checkpoint and claim CDI specs as the reference's plugin leaves them for
    the claims prepared there; returns what was written where."""
    cds = {cd["metadata"]["uid"]: cd for cd in c.items("computedomains", "-A")}
    written: dict[Path, bytes] = {}
    for node in (n["metadata"] for n in c.items("nodes")):
        name = node["name"]
        mine = [claim for claim in claims if _node_of(claim) == name]
        boot_id = c.file(name, BOOT_ID_PATH).read_text().strip()
        written[c.file(name, ref.CHECKPOINT)] = ref.checkpoint(mine, boot_id)
        devices = c.file(name, PROC_DEVICES_PATH).read_text()
        minor, mode = ref.capability(c.file(name, FABRIC_IMEX_MGMT_PATH).read_text())
        cap = (ref.char_major(devices, "nvidia-caps"), minor, mode)
        for claim in mine:
            uid, config = claim["metadata"]["uid"], _config(claim)
            if config["kind"] == "ComputeDomainChannelConfig":
                channels = (range(ref.CHANNEL_COUNT) if config.get("allocationMode") == "All"
                            else [0])  # fmt: skip
                spec = ref.channel_claim_spec(
                    uid, channels, ref.char_major(devices, "nvidia-caps-imex-channels"))
            else:  # CLIQUE_ID is the clique NVML reports, which the node's label carries
                spec = ref.daemon_claim_spec(uid, cds[config["domainID"]],
                                             node["labels"][CLIQUE_LABEL], cap)  # fmt: skip
            written[c.claim_spec(name, uid)] = spec
    for path, data in written.items():
        ref.write_file(path, data)
    return written


def reference_objects(cd: Obj) -> list[tuple[tuple[str, ...], Obj]]:
    """(kubectl get arguments, the reference's rendering) of a domain's generated objects."""
    uid, namespace = cd["metadata"]["uid"], cd["metadata"]["namespace"]
    workload = ref.workload_template(cd)
    return [
        (("resourceclaimtemplate", "-n", namespace, workload["metadata"]["name"]), workload),
        (("resourceclaimtemplate", "-n", NS, ref.daemon_name(uid)), ref.daemon_template(uid, NS)),
        (("daemonset", "-n", NS, ref.daemon_name(uid)), ref.daemon_set(uid, NS)),
    ]


def make_reference_objects(c: Cluster) -> None:
    """The controller's objects with the reference's metadata (their specs are immutable
    or, for the DaemonSet, would roll its pods: they must already be the reference's)."""
    for cd in c.items("computedomains", "-A"):
        for get, rendered in reference_objects(cd):
            live = c.obj(*get)
            if patch := ref.metadata_patch(live, rendered):
                c.up.ok("patch", *get, "--type", "merge", "-p", json.dumps(patch))
                live = c.obj(*get)
            assert ref.differences(live, rendered) == [], get
            assert set(live["metadata"].get("annotations") or {}) <= ref.SYSTEM_ANNOTATIONS, get
            assert not live["metadata"].get("ownerReferences"), get
    for clique in c.items("computedomaincliques", "-n", NS):
        md = clique["metadata"]
        cd_uid, clique_id = md["name"].split(".", 1)
        pods = {p["metadata"]["name"]: p["metadata"]["uid"]
                for p in c.items("pods", "-n", NS, "-l", f"{ref.LABEL_CD}={cd_uid}")}
        # The daemon (the reference's, here ours in its pod) creates it: its pods own it.
        assert md["labels"] == {ref.LABEL_CD: cd_uid, ref.LABEL_CLIQUE: clique_id}, md
        assert md["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                          "uid": pod_uid} for name, pod_uid in pods.items()]


def make_reference_slices(c: Cluster) -> None:
    """Each node's ResourceSlice with its devices in the other order: the reference builds
    the list from a Go map, so either order is what a node may have."""
    for item in c.items("resourceslices"):
        if item["spec"]["driver"] != ref.DRIVER:
            continue
        item["spec"]["devices"].reverse()
        c.up.ok("replace", "-f", "-", stdin=json.dumps(item))


def snapshot(c: Cluster) -> dict[str, str]:
    """name -> UID of everything that must survive the swap as the same object."""
    objects = [
        *c.items("pods", "-n", "default"), *c.items("pods", "-n", NS, "-l", ref.LABEL_CD),
        *c.items("daemonsets", "-n", NS, "-l", ref.LABEL_CD),
        *c.items("resourceclaimtemplates", "-A", "-l", ref.LABEL_CD),
        *c.items("computedomaincliques", "-n", NS), *c.items("resourceclaims", "-A"),
        *c.items("computedomains", "-A"),
        # The reference's slices are right in either device order: kept, not replaced.
        *(s for s in c.items("resourceslices") if s["spec"]["driver"] == ref.DRIVER),
    ]  # fmt: skip
    return {f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}":
            o["metadata"]["uid"] for o in objects}  # fmt: skip


# --- the test -------------------------------------------------------------------------------


def test_reference_renderings_are_the_go_libraries_bytes() -> None:
    """The renderings the swap relies on, pinned to what the Go code produces: the
    checkpoint manager's checksums (test vectors of a fresh checkpoint) and yaml.v3's
    layout of a claim spec (its output for this spec, 4-space indented)."""
    assert ref.checksum(b'{"checksum":0,"v1":{}}') == 1083090442
    boot = "0f2a6e3c-1111-2222-3333-444455556666"
    assert ref.checksum(f'{{"checksum":0,"nodeBootID":"{boot}"}}'.encode()) == 2652663942
    assert ref.checkpoint([], boot) == (
        f'{{"checksum":1083090442,"v1":{{}},"v2":{{"checksum":2652663942,"nodeBootID":"{boot}"}}}}'
    ).encode()
    assert ref.channel_claim_spec("uid", [1, 0], 234) == (
        b"---\ncdiVersion: 0.5.0\nkind: k8s.compute-domain.nvidia.com/claim\ndevices:\n"
        b"    - name: uid-channel-0\n      containerEdits:\n        deviceNodes:\n"
        b"            - path: /dev/nvidia-caps-imex-channels/channel0\n"
        b"              hostPath: /dev/nvidia-caps-imex-channels/channel0\n"
        b"              type: c\n              major: 234\n              fileMode: 438\n"
        b"            - path: /dev/nvidia-caps-imex-channels/channel1\n"
        b"              hostPath: /dev/nvidia-caps-imex-channels/channel1\n"
        b"              type: c\n              major: 234\n              minor: 1\n"
        b"              fileMode: 438\n"
    )
    cd = {"metadata": {"uid": "u", "name": "n", "namespace": "default"}}
    assert ref.daemon_claim_spec("uid", cd, "x.1", (238, 7, 256)).endswith(
        b"        mounts:\n"
        b"            - hostPath: /var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/u\n"
        b"              containerPath: /imexd\n              options:\n"
        b"                - rw\n                - nosuid\n                - nodev\n"
        b"                - bind\n"
    )


@needs_root
def test_helm_upgrade_swaps_the_reference_driver_in_place(cluster: Cluster) -> None:
    c, up = cluster, cluster.up
    chart = str(manifests.CHART_DIR)
    c.helm("upgrade", "--install", RELEASE, chart, "--create-namespace", "--wait",
           "--timeout", "3m")  # fmt: skip
    c.ready(PLUGINS)
    c.ready(CONTROLLER)
    for manifest in DEMOS.values():
        up.ok("apply", "-f", str(manifest))
    for pod in DEMOS:
        up.ok("wait", "--for=condition=Ready", f"pod/{pod}", "--timeout=120s")
    claims = c.items("resourceclaims", "-A")
    assert len(claims) == 4, [cl["metadata"]["name"] for cl in claims]  # 2 workloads, 2 daemons

    # The reference's plugin and controller stop; what they leave is in the reference's form.
    c.helm("upgrade", RELEASE, chart, "--reuse-values", "--set", "controller.replicas=0",
           "--set-json", f"kubeletPlugin.nodeSelector={STOPPED}", "--wait", "--timeout", "2m")
    for selector in (PLUGINS, CONTROLLER):
        until(partial(c.none, "pods", "-n", NS, "-l", selector), f"no pods {selector}")
    written = write_reference_node_state(c, claims)
    make_reference_objects(c)
    make_reference_slices(c)
    before = snapshot(c)

    # The swap: this chart, its defaults and one changed value, on the same release.
    c.helm("upgrade", RELEASE, chart, "--reset-values", "--set", "logVerbosity=5", "--wait",
           "--timeout", "3m")  # fmt: skip
    c.ready(PLUGINS)
    c.ready(CONTROLLER)
    assert "Upgrade complete" in c.helm("history", RELEASE)

    # Every workload keeps its container and its channels; nothing was recreated.
    for pod, channel in ((SINGLE, "channel0"), (ALL, "channel2047")):
        status = c.obj("pod", pod)["status"]
        assert status["phase"] == "Running", status
        assert status["containerStatuses"][0]["restartCount"] == 0, status
        test = up.run("exec", pod, "--", "test", "-c", f"{ref.CHANNELS_DIR}/{channel}")
        assert test.returncode == 0, test.stderr
    for cd in c.items("computedomains", "-A"):
        name = cd["metadata"]["name"]
        until(partial(c.cd_status, name, "Ready"), f"{name} Ready")
    # The reference's checkpoints and claim specs are kept as they are.
    for path, data in written.items():
        assert path.read_bytes() == data, path
    # One slice per node, whichever order the reference's had (the snapshot below: the same).
    assert sorted(s["spec"]["nodeName"] for s in c.items("resourceslices")
                  if s["spec"]["driver"] == ref.DRIVER) == ["node-01", "node-02"]
    # The generated objects are adopted, not doubled; the DaemonSets are left as they are.
    after = snapshot(c)
    assert after == before, {k: (before.get(k), after.get(k))
                             for k in before.keys() | after.keys()
                             if before.get(k) != after.get(k)}  # fmt: skip
    for ds in c.items("daemonsets", "-n", NS, "-l", ref.LABEL_CD):
        assert ds["metadata"]["generation"] == 1, ds["metadata"]
    warnings = c.items("events", "-A", "--field-selector",
                       "type=Warning,involvedObject.kind=ComputeDomain")  # fmt: skip
    assert warnings == [], [w.get("message") for w in warnings]

    # Unprepare of a claim the reference prepared: entry, CDI spec and node label go.
    [single] = [cl for cl in claims if cl["metadata"]["namespace"] == "default"
                and _config(cl).get("allocationMode") == "Single"]  # fmt: skip
    node, cd_uid = _node_of(single), _config(single)["domainID"]
    [daemon] = [cl for cl in claims if cl["metadata"]["namespace"] == NS
                and _config(cl)["domainID"] == cd_uid]  # fmt: skip
    up.ok("delete", "pod", SINGLE, "--wait=true", "--timeout=60s")
    for claim in (single, daemon):  # the daemon pod leaves with the node label
        uid = claim["metadata"]["uid"]
        until(partial(c.gone, c.claim_spec(node, uid)),
              f"{ref.claim_spec_name(uid)} removed on {node}")
    until(partial(c.unprepared, node), f"no prepared claims in {node}'s checkpoint")
    labels = c.obj("node", node)["metadata"]["labels"]
    assert ref.LABEL_CD not in labels, labels
    # Our controller folds the adopted domain's daemons: none left, so not Ready.
    until(partial(c.cd_status, SINGLE, "NotReady"), f"{SINGLE} NotReady without daemons")

    # A new workload of that domain is served by the adopted DaemonSet.
    up.ok("apply", "-f", str(DEMOS[SINGLE]))
    up.ok("wait", "--for=condition=Ready", f"pod/{SINGLE}", "--timeout=120s")
    assert up.run("exec", SINGLE, "--", "test", "-c",
                  f"{ref.CHANNELS_DIR}/channel0").returncode == 0  # fmt: skip
    until(partial(c.cd_status, SINGLE, "Ready"), f"{SINGLE} Ready again")
    # Still the reference's objects, and only those, seconds after the swap.
    kept = {k: v for k, v in snapshot(c).items()
            if k.startswith(("DaemonSet/", "ResourceClaimTemplate/", "ComputeDomain/"))}
    assert kept == {k: v for k, v in before.items() if k in kept} and len(kept) == 8, kept

    # Deleting each ComputeDomain completes: finalizer gone, its objects and labels gone.
    for manifest in DEMOS.values():
        up.ok("delete", "-f", str(manifest), "--wait=true", "--timeout=90s")
    assert c.items("computedomains", "-A") == []
    for kind in ("daemonsets", "resourceclaimtemplates", "pods"):
        until(partial(c.none, kind, "-A", "-l", ref.LABEL_CD), f"no {kind} of a ComputeDomain")
    until(partial(c.none, "computedomaincliques", "-A"), "no cliques")
    for name in ("node-01", "node-02"):
        assert ref.LABEL_CD not in c.obj("node", name)["metadata"]["labels"]
        until(partial(c.unprepared, name), f"no prepared claims on {name}")
        until(partial(c.no_claim_specs, name), f"no claim CDI specs on {name}")
