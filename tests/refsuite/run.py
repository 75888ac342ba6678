"""`make refsuite`: the reference driver's own ComputeDomain end-to-end tests (its tests/bats)
against our driver, in the simulated cluster, installed with our Helm chart by the real helm
exactly as its suite installs its own chart.

What it needs: a checkout of the reference (`REFERENCE=DIR`: the Go module proxy does not
serve it, so it cannot be fetched here), bats, bats-support and bats-assert from npm (pinned
below, into .cache/refsuite), bats-file from Debian's packages (it is not on npm), jq,
envsubst and dpkg, and the pinned kubectl and helm (`make k8s helm`). The reference's suite
loads its helper libraries from /bats-libraries (its test image's layout): links to the
installed ones are made there if it does not exist.

What is ours: the cluster (`compute-domain-sim up --no-driver`), TEST_CHART_REPO (our chart's
directory) and a suite setup file that runs the reference's own prerequisite checks but not
its `helm repo add nvidia https://helm.ngc.nvidia.com/nvidia` (no network beyond the
registries; none of the files run here installs from that repository). Every test file,
helper and spec is the reference's, unchanged.

Prints one row per test, and exits 0 when every test passed or failed for a reason listed in
KNOWN (each says why); an unexpected failure exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "refsuite"
NPM_PACKAGES = ("bats@1.13.0", "bats-support@0.3.0", "bats-assert@2.2.4")
BATS = CACHE / "node_modules" / "bats" / "bin" / "bats"
BATS_FILE = Path("/usr/lib/bats/bats-file")  # Debian's bats-file
LIBRARIES = Path("/bats-libraries")
CHART = REPO / "packaging" / "helm" / "dra-driver-nvidia-gpu"
KUBECTL = REPO / ".cache" / "k8s" / "v1.37.2" / "kubectl"
HELM = REPO / ".cache" / "bin" / "helm"
SIM = Path(sys.executable).parent / "compute-domain-sim"

# The reference's ComputeDomain files this runs. Not run: test_cd_updowngrade.bats (installs the
# reference's last release from registry.k8s.io), test_cd_failover.bats and
# test_cd_mnnvl_workload.bats (reboot nodes, run CUDA nvbandwidth on real GPUs).
FILES = ("test_cd_imex_chan_inject.bats", "test_cd_misc.bats", "test_cd_leader_election.bats",
         "test_cd_logging.bats")

# Tests that fail against us on purpose or for want of what the sim gives: the assertion each
# is known to fail at (a failure anywhere else is unexpected) and why.
KNOWN: dict[str, tuple[str, str]] = {
    "CDs: self-initiated unprepare of stale RCs in PrepareStarted": (
        "partially prepared claim not stale",
        "ours decodes a claim's opaque config before it records PrepareStarted, so a config "
        "error leaves no partially prepared claim behind for the start-up cleanup to find "
        "(the reference leaves one on every such error and cleans it up later)"),
    "CDs: controller: test log verbosity levels": (
        "'reflector.go'",
        "greps Go source file names in klog's header (client-go's reflector.go, "
        "round_trippers.go); ours logs the same messages at the same levels from its Python "
        "files (informer.py, kubecall.py); every other assertion passes"),
    "CDs: daemon: test log verbosity levels": (
        "'round_trippers.go'",
        "greps client-go's file name round_trippers.go in klog's header; ours logs the same "
        "'\"Response\" verb=...' line at V6 from kubecall.py; every other assertion passes"),
}

SETUP_SUITE = """\
# The reference's suite setup (its tests/bats/setup_suite.bash) minus the `helm repo add`
# of a remote repository: written by tests/refsuite/run.py.
source "{reference}/tests/bats/setup_suite.bash"
setup_suite () {{
    validate_prerequisites
    HELM_CACHE_HOME=$(mktemp -d -t helm-XXXXX)
    export HELM_CACHE_HOME
    export HELM_REPOSITORY_CONFIG=${{HELM_CACHE_HOME}}/repo.cfg
}}
"""


class RefsuiteError(Exception):
    """Something the run needs is missing; the message says how to get it."""


def check_reference(reference: Path) -> None:
    for rel in ("tests/bats/helpers.sh", "tests/bats/setup_suite.bash",
                "demo/specs/imex/channel-injection.yaml", *(f"tests/bats/{f}" for f in FILES)):
        if not (reference / rel).is_file():
            raise RefsuiteError(
                f"{reference / rel} is missing: REFERENCE must be a checkout of "
                f"https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu (e.g. git clone "
                f"... && make refsuite REFERENCE=$PWD/dra-driver-nvidia-gpu)")


def install_tools() -> None:
    for tool in ("jq", "envsubst", "dpkg", "npm"):
        if shutil.which(tool) is None:
            raise RefsuiteError(f"{tool} not found: apt-get install jq gettext-base dpkg npm")
    for binary in (KUBECTL, HELM):
        if not binary.exists():
            raise RefsuiteError(f"{binary} not found: run `make k8s helm` first")
    if not BATS.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix",
                        str(CACHE), *NPM_PACKAGES], check=True)
    if not (BATS_FILE / "load.bash").exists():
        raise RefsuiteError(f"{BATS_FILE}/load.bash not found: apt-get install bats-file "
                            f"(bats-file is not published on npm)")
    links = {"bats-support": CACHE / "node_modules" / "bats-support",
             "bats-assert": CACHE / "node_modules" / "bats-assert", "bats-file": BATS_FILE}
    LIBRARIES.mkdir(exist_ok=True)
    for name, target in links.items():
        link = LIBRARIES / name
        if not link.exists():
            link.symlink_to(target)


@contextlib.contextmanager
def cluster(workdir: Path, control_plane: str) -> Iterator[Path]:
    """`compute-domain-sim up --no-driver` with 2 nodes; its kubeconfig while it runs."""
    kubeconfig = workdir / "kubeconfig"
    log_path = workdir / "sim-up.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [str(SIM), "up", "--no-driver", "--nodes", "2", "--control-plane", control_plane,
             "--root", str(workdir / "root"), "--kubeconfig-out", str(kubeconfig)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 180
            while "simulated cluster up" not in log_path.read_text():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RefsuiteError(f"sim up failed:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
            yield kubeconfig
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def chart_version() -> str:
    text = (CHART / "Chart.yaml").read_text()
    match = re.search(r'^version:\s*"?([^"\s]+)"?', text, re.MULTILINE)
    assert match is not None
    return match.group(1)


def run_bats(reference: Path, workdir: Path, kubeconfig: Path, files: list[str],
             test_filter: str = "") -> str:
    bindir = workdir / "bin"
    bindir.mkdir()
    for binary in (KUBECTL, HELM):
        (bindir / binary.name).symlink_to(binary)
    setup = workdir / "setup_suite.bash"
    setup.write_text(SETUP_SUITE.format(reference=reference))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig),
           "PATH": f"{bindir}:{os.environ.get('PATH', '')}",
           "TEST_CHART_REPO": str(CHART), "TEST_CHART_VERSION": chart_version(),
           "TEST_NVIDIA_DRIVER_ROOT": "/", "TEST_CRD_UPGRADE_TARGET_GIT_REF": "main",
           "TMPDIR": str(workdir), "HOME": str(workdir)}
    argv = [str(BATS), "--setup-suite-file", str(setup), "--formatter", "tap",
            "--print-output-on-failure", "--timing",
            *(["--filter", test_filter] if test_filter else []),
            *(f"tests/bats/{f}" for f in files)]
    out = subprocess.run(argv, cwd=reference, env=env, capture_output=True, text=True)
    (workdir / "bats.out").write_text(out.stdout + out.stderr)
    return out.stdout + out.stderr


def summarize(tap: str) -> tuple[list[tuple[str, str, str]], bool]:
    """(rows of name, result, why) and whether every failure is a known one, failing at
    its known assertion."""
    rows: list[tuple[str, str, str]] = []
    failures: dict[str, list[str]] = {}  # name -> its diagnostic lines
    current: list[str] | None = None
    for line in tap.splitlines():
        match = re.match(r"^(not ok|ok) \d+ (.*?)(?: in \d+ms)?(?: # skip ?(.*))?$", line)
        if match is None:
            if current is not None and line.startswith("#"):
                current.append(line)
            continue
        status, name, skipped = match.groups()
        current = None
        if skipped is not None:
            rows.append((name, "skipped", skipped))
        elif status == "ok":
            rows.append((name, "passed", ""))
        else:
            current = failures.setdefault(name, [])
            rows.append((name, "FAILED", ""))
    ok = bool(rows)
    for i, (name, result, _) in enumerate(rows):
        if result != "FAILED":
            continue
        assertion, why = KNOWN.get(name, ("", ""))
        # The first diagnostic lines name the failed assertion (bats' `... failed`).
        head = "\n".join(failures[name][:6])
        if assertion and assertion in head:
            rows[i] = (name, "failed (known)", why)
        else:
            ok = False
    return rows, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True,
                        help="a checkout of kubernetes-sigs/dra-driver-nvidia-gpu")
    parser.add_argument("--control-plane", default="emulator",
                        choices=("emulator", "kubernetes"))
    parser.add_argument("--files", nargs="*", default=list(FILES))
    parser.add_argument("--filter", default="", help="bats --filter: only tests matching it")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the cluster's files and logs in this directory")
    args = parser.parse_args(argv)
    reference = args.reference.resolve()
    try:
        check_reference(reference)
        install_tools()
        with tempfile.TemporaryDirectory(prefix="refsuite-") as tmp:
            workdir = args.keep.resolve() if args.keep else Path(tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            with cluster(workdir, args.control_plane) as kubeconfig:
                tap = run_bats(reference, workdir, kubeconfig, args.files, args.filter)
            kept = REPO / ".cache" / "refsuite" / "last-run.out"
            kept.write_text(tap)
    except RefsuiteError as err:
        print(f"refsuite: {err}", file=sys.stderr)
        return 2
    rows, ok = summarize(tap)
    width = max((len(r[0]) for r in rows), default=4)
    print(f"\n{'test':<{width}}  result")
    for name, result, why in rows:
        print(f"{name:<{width}}  {result}" + (f"  ({why})" if why else ""))
    passed = sum(r[1] == "passed" for r in rows)
    print(f"\n{passed} of {len(rows)} passed ({args.control_plane} control plane); "
          f"full output: {kept}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
