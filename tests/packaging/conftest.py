"""Packaging tests: the frozen agent, built once per session, and the plugin tests' helpers."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "agent"))

from plugin_env import cluster  # noqa: E402, F401  (a fixture, registered by importing it)


@pytest.fixture(scope="session")
def frozen_agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The single-file `compute-domain-agent`.

    `dist/compute-domain-agent` when it is newer than every file it is built from (`make
    binary`); otherwise one built for this session in a temporary directory (about 30 s).
    CD_FROZEN_AGENT=/path/to/binary tests that binary instead.
    """
    given = os.environ.get("CD_FROZEN_AGENT")
    if given:
        return Path(given).resolve()
    build = runpy.run_path(str(REPO / "packaging" / "pyinstaller" / "build.py"))
    dist = REPO / "dist" / "compute-domain-agent"
    if build["is_fresh"](dist, "agent"):
        return dist
    pytest.importorskip("PyInstaller", reason="PyInstaller is not installed (make test does)")
    return build["build_frozen_agent"](tmp_path_factory.mktemp("frozen"))
