"""Fixtures shared by the plugin tests.

`plugin_env` imports as a top-level module: pytest puts this directory (no `__init__.py`)
on sys.path for this conftest and the test modules next to it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugin_env import DRIVER_NS, NODE, ClusterObjects


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths are limited to 107 bytes: node roots live in short /tmp dirs."""
    path = Path(tempfile.mkdtemp(prefix="cd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cluster(k8s, project_crds) -> ClusterObjects:
    """The driver's namespace and node `NODE` in the API emulator, with the project's CRDs."""
    objects = ClusterObjects(k8s)
    objects.namespace(DRIVER_NS)
    objects.node(NODE)
    return objects
