"""kubectl against the emulator: what an admin types every day must work (the kubectl of the
pinned release, built by `make k8s`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sim.cluster import manifests

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def kubectl(apiserver, tmp_path, kubectl_bin):
    config = apiserver.write_kubeconfig(tmp_path / "kubeconfig")

    def run(
        *args: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess:
        out = subprocess.run(
            [str(kubectl_bin), "--kubeconfig", str(config), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{out.stderr}")
        return out

    run.config = config
    run.bin = kubectl_bin
    return run


CD_YAML = """\
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: imex-channel-injection
  namespace: default
spec:
  numNodes: 1
  channel:
    resourceClaimTemplate:
      name: imex-channel-0
"""


def test_apply_crds_create_get_label_patch_delete(kubectl, tmp_path):
    out = kubectl("apply", "-f", str(manifests.CRD_DIR))
    assert "computedomains.resource.nvidia.com created" in out.stdout
    (tmp_path / "cd.yaml").write_text(CD_YAML)
    kubectl("create", "-f", str(tmp_path / "cd.yaml"))
    got = json.loads(kubectl("get", "computedomain", "imex-channel-injection", "-o", "json").stdout)
    assert got["spec"]["channel"]["allocationMode"] == "Single"
    table = kubectl("get", "computedomains").stdout
    assert table.splitlines()[0].split() == ["NAME", "STATUS", "AGE"]
    assert "imex-channel-injection" in table
    kubectl("label", "computedomain", "imex-channel-injection", "team=ml")
    kubectl(
        "patch",
        "computedomain",
        "imex-channel-injection",
        "--type=merge",
        "-p",
        '{"metadata":{"annotations":{"note":"x"}}}',
    )
    got = json.loads(
        kubectl("get", "computedomains", "imex-channel-injection", "-o", "json").stdout
    )
    assert got["metadata"]["labels"] == {"team": "ml"}
    assert got["metadata"]["annotations"]["note"] == "x"
    bad = kubectl(
        "patch",
        "computedomain",
        "imex-channel-injection",
        "--type=merge",
        "-p",
        '{"spec":{"numNodes":4}}',
        check=False,
    )
    assert bad.returncode != 0 and "A computeDomain.spec is immutable" in bad.stderr
    kubectl("delete", "computedomain", "imex-channel-injection")
    none = kubectl("get", "computedomains", "-o", "name").stdout
    assert none.strip() == ""


def test_apply_is_idempotent_and_updates(kubectl, tmp_path):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: '1'\n"
    )
    assert "configmap/cfg created" in kubectl("apply", "-f", str(manifest)).stdout
    assert "configmap/cfg unchanged" in kubectl("apply", "-f", str(manifest)).stdout
    manifest.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  b: '2'\n"
    )
    assert "configmap/cfg configured" in kubectl("apply", "-f", str(manifest)).stdout
    data = json.loads(kubectl("get", "configmap", "cfg", "-o", "json").stdout)["data"]
    assert data == {"b": "2"}


def test_strategic_patch_of_a_builtin(kubectl, tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n"
        "  - name: main\n    image: busybox\n  - name: side\n    image: busybox\n"
    )
    kubectl("create", "-f", str(manifest))
    kubectl(
        "patch", "pod", "p", "-p", '{"spec":{"containers":[{"name":"main","image":"busybox:2"}]}}'
    )
    pod = json.loads(kubectl("get", "pod", "p", "-o", "json").stdout)
    assert [(c["name"], c["image"]) for c in pod["spec"]["containers"]] == [
        ("main", "busybox:2"),
        ("side", "busybox"),
    ]


def test_get_watch_streams_changes(kubectl, apiserver):
    kubectl("create", "-f", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w0}\n")
    proc = subprocess.Popen(
        [kubectl.bin, "--kubeconfig", str(kubectl.config), "get", "configmaps", "-w", "-o", "name"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def read_until(name: str) -> None:
        while name not in lines:
            line = proc.stdout.readline()
            assert line, f"kubectl get -w ended: {lines} {proc.stderr.read()}"
            lines.append(line.strip())

    try:
        read_until("configmap/w0")  # the list is printed: what changes now comes by the watch
        kubectl(
            "create", "-f", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w1}\n"
        )
        read_until("configmap/w1")
        assert lines.index("configmap/w0") < lines.index("configmap/w1")
    finally:
        proc.kill()
        proc.wait()


def test_get_events(kubectl):
    out = kubectl("get", "events", "-A")
    assert out.returncode == 0


def test_unknown_fields_are_refused_by_kubectl_create(kubectl, tmp_path):
    kubectl("apply", "-f", str(REPO / "packaging" / "helm" / "dra-driver-nvidia-gpu" / "crds"))
    (tmp_path / "cd.yaml").write_text(
        CD_YAML.replace("  numNodes: 1\n", "  numNodes: 1\n  nodes: 2\n")
    )
    out = kubectl("create", "-f", str(tmp_path / "cd.yaml"), check=False)
    assert out.returncode != 0
    assert 'unknown field "spec.nodes"' in out.stderr


@pytest.mark.parametrize("api_version", ["example.com/v1", "apps/v1", "v1"])
def test_apply_of_an_unknown_kind_says_no_matches_as_kube_apiserver(kubectl, tmp_path, api_version):
    # kubectl validates client-side against /openapi/v2 first: an answer whose Content-Type
    # Go's mime parser rejects made this "mime: unexpected content after media subtype".
    path = tmp_path / "f.yaml"
    path.write_text(f"apiVersion: {api_version}\nkind: Frobnicator\nmetadata: {{name: x}}\n")
    out = kubectl("apply", "-f", str(path), check=False)
    assert out.returncode == 1
    assert out.stderr == (
        f'error: resource mapping not found for name: "x" namespace: "" from "{path}": '
        f'no matches for kind "Frobnicator" in version "{api_version}"\n'
        "ensure CRDs are installed first\n"
    )
