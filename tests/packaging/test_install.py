"""packaging/install.sh: the air-gapped drop-in, exercised in temporary roots."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "packaging" / "install.sh"
SYSTEMD = REPO / "systemd"
UNIT = "compute-domain-agent.service"
ENV = "compute-domain-agent.env"
BIN = "usr/local/bin/compute-domain-agent"
UNIT_DEST = f"etc/systemd/system/{UNIT}"
ENV_DEST = f"etc/compute-domain-agent/{ENV}"
ENV_SHIPPED = f"usr/local/share/compute-domain-agent/{ENV}.default"


def run(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["sh", str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                         timeout=60, env={"PATH": "/usr/bin:/bin"}, check=False)
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def tree(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under `root`: relative path -> (permission bits, content)."""
    return {str(p.relative_to(root)): (stat.S_IMODE(p.stat().st_mode), p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """What `install.sh bundle` makes: the binary (a stand-in here), unit and env file."""
    src = tmp_path / "bundle"
    src.mkdir()
    (src / "compute-domain-agent").write_text("#!/bin/sh\necho compute-domain-agent 0.1.0\n")
    (src / "compute-domain-agent").chmod(0o755)
    shutil.copy(SYSTEMD / UNIT, src / UNIT)
    shutil.copy(SYSTEMD / ENV, src / ENV)
    return src


def test_install_is_complete_and_idempotent(bundle, tmp_path):
    root = tmp_path / "root"
    out = run("install", "--root", root, "--from", bundle)
    assert "daemon-reload" not in out.stdout  # never for a --root other than /
    first = tree(root)
    assert set(first) == {BIN, UNIT_DEST, ENV_DEST, ENV_SHIPPED}
    assert first[BIN] == (0o755, (bundle / "compute-domain-agent").read_bytes())
    assert first[UNIT_DEST] == (0o644, (SYSTEMD / UNIT).read_bytes())
    assert first[ENV_DEST] == (0o644, (SYSTEMD / ENV).read_bytes())
    run("install", "--root", root, "--from", bundle)
    assert tree(root) == first
    assert not list(root.rglob("*.tmp.*"))


def test_prefix_moves_the_binary_and_the_units_exec_start(bundle, tmp_path):
    root = tmp_path / "root"
    run("install", f"--root={root}", "--prefix", "/opt/cda", "--from", bundle)
    assert (root / "opt/cda/bin/compute-domain-agent").is_file()
    unit = (root / UNIT_DEST).read_text()
    assert "ExecStart=/opt/cda/bin/compute-domain-agent plugin" in unit
    assert "/usr/local/bin" not in unit
    run("uninstall", f"--root={root}", "--prefix", "/opt/cda")
    assert tree(root) == {}


def test_a_modified_env_file_survives_reinstall_and_uninstall(bundle, tmp_path):
    root = tmp_path / "root"
    run("install", "--root", root, "--from", bundle)
    env = root / ENV_DEST
    mine = env.read_text().replace("LOG_VERBOSITY=4", "LOG_VERBOSITY=6")
    env.write_text(mine)
    # A new release changes the shipped defaults: the admin's file stays.
    (bundle / ENV).write_text((SYSTEMD / ENV).read_text() + "CLEANUP_INTERVAL=5m\n")
    out = run("install", "--root", root, "--from", bundle)
    assert "kept your modified" in out.stdout
    assert env.read_text() == mine
    assert (root / ENV_SHIPPED).read_text() == (bundle / ENV).read_text()
    out = run("uninstall", "--root", root)
    assert "kept" in out.stdout and str(env) in out.stdout
    assert tree(root) == {ENV_DEST: (0o644, mine.encode())}


def test_an_unmodified_env_file_follows_new_defaults(bundle, tmp_path):
    root = tmp_path / "root"
    run("install", "--root", root, "--from", bundle)
    (bundle / ENV).write_text((SYSTEMD / ENV).read_text() + "CLEANUP_INTERVAL=5m\n")
    run("install", "--root", root, "--from", bundle)
    assert (root / ENV_DEST).read_text().endswith("CLEANUP_INTERVAL=5m\n")
    run("uninstall", "--root", root)
    assert tree(root) == {}
    assert not (root / "etc/compute-domain-agent").exists()
    run("uninstall", "--root", root)  # again: nothing to do, no error


def test_missing_binary_is_a_clear_error(bundle, tmp_path):
    (bundle / "compute-domain-agent").unlink()
    root = tmp_path / "root"
    out = run("install", "--root", root, "--from", bundle, check=False)
    assert out.returncode == 1
    assert "no compute-domain-agent binary in" in out.stderr and "make binary" in out.stderr
    assert not root.exists() or tree(root) == {}


def test_usage_errors(tmp_path):
    assert run(check=False).returncode == 2
    assert run("frobnicate", check=False).returncode == 2
    assert run("install", "--bogus", check=False).returncode == 2
    out = run("install", "--prefix", "relative", "--root", tmp_path, check=False)
    assert out.returncode == 1 and "absolute" in out.stderr


def test_repository_layout_and_bundle(tmp_path):
    """From a checkout (dist/ + systemd/) to a bundle, and from the bundle to a host."""
    repo = tmp_path / "repo"
    (repo / "dist").mkdir(parents=True)
    (repo / "dist/compute-domain-agent").write_text("#!/bin/sh\n")
    (repo / "dist/compute-domain-agent").chmod(0o755)
    shutil.copytree(SYSTEMD, repo / "systemd")
    out_dir = tmp_path / "carry"
    run("bundle", out_dir, "--from", repo)
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        ["compute-domain-agent", UNIT, ENV, "install.sh"])
    # On the air-gapped host: the bundle's own install.sh finds its files next to it.
    root = tmp_path / "root"
    subprocess.run(["sh", str(out_dir / "install.sh"), "install", "--root", str(root)],
                   check=True, capture_output=True, timeout=60)
    assert set(tree(root)) == {BIN, UNIT_DEST, ENV_DEST, ENV_SHIPPED}


def test_make_bundle_finds_the_checkouts_files_without_from(tmp_path):
    """`make bundle` runs packaging/install.sh with no --from: the script finds dist/ and
    the top-level systemd/ of the checkout it lives in."""
    repo = tmp_path / "repo"
    (repo / "packaging").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "packaging/install.sh")
    (repo / "dist").mkdir()
    (repo / "dist/compute-domain-agent").write_text("#!/bin/sh\n")
    shutil.copytree(SYSTEMD, repo / "systemd")
    out_dir = tmp_path / "carry"
    subprocess.run(["sh", str(repo / "packaging/install.sh"), "bundle", str(out_dir)],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        ["compute-domain-agent", UNIT, ENV, "install.sh"])
    assert (out_dir / UNIT).read_bytes() == (SYSTEMD / UNIT).read_bytes()


@pytest.mark.parametrize("shell", ["sh", "dash", "bash"])
def test_script_parses(shell):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    subprocess.run([shell, "-n", str(SCRIPT)], check=True, timeout=30)


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (apt-get install shellcheck)")
def test_shellcheck_clean():
    out = subprocess.run(["shellcheck", "--shell=sh", str(SCRIPT)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout
