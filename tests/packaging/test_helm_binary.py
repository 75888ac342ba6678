"""The Helm CLI that `make helm` builds is the release `upstream/helm/go.mod` pins."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from sim.cluster import manifests

REPO = Path(__file__).resolve().parents[2]
HELM_GO_MOD = REPO / "upstream" / "helm" / "go.mod"


def pinned_helm_version() -> str:
    """`v3.22.0`: the helm.sh/helm/v3 requirement in upstream/helm/go.mod."""
    match = re.search(r"^\s*helm\.sh/helm/v3\s+(v\S+)(?:\s+//.*)?$", HELM_GO_MOD.read_text(), re.M)
    assert match is not None, f"{HELM_GO_MOD} does not require helm.sh/helm/v3"
    return match.group(1)


def helm_env(tmp_path: Path) -> dict[str, str]:
    """Helm's cache, config and data homes in tmp_path, never ~/.cache/helm and friends
    (the environment every helm run of the project gets)."""
    return manifests.helm_env(tmp_path)


def run_helm(helm: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_helm_version_is_the_pinned_release(helm_bin: Path, tmp_path: Path):
    done = run_helm(helm_bin, "version", "--template", "{{.Version}}", env=helm_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == pinned_helm_version()


def test_helm_env_uses_the_given_homes(helm_bin: Path, tmp_path: Path):
    env = helm_env(tmp_path)
    done = run_helm(helm_bin, "env", env=env)
    assert done.returncode == 0, done.stderr
    reported = dict(
        line.split("=", 1) for line in done.stdout.splitlines() if "=" in line
    )
    for name in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        assert reported[name].strip('"') == env[name]
