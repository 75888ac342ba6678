"""Fixtures for the fake IMEX tests: launchers installed once, one domain per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeimex_helpers import Domain

from sim.fakeimex.install import install


@pytest.fixture(scope="session")
def bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return install(tmp_path_factory.mktemp("fakeimex-bin"))


@pytest.fixture
def domain(tmp_path: Path, bins: dict[str, Path]) -> Iterator[Domain]:
    dom = Domain(tmp_path, bins)
    try:
        yield dom
    finally:
        dom.stop_all()
