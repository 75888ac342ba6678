"""The dependency arrows: api and cdi import nothing of ours; runtime (what the agent and the
controller share at run time) imports only api; agent and controller never import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = {"api", "cdi", "runtime", "agent", "controller", "sim"}
ALLOWED = {
    "api": {"api"},
    "cdi": {"cdi"},
    "runtime": {"api", "runtime"},
    "agent": {"api", "cdi", "runtime", "agent"},
    "controller": {"api", "runtime", "controller"},
    "sim": OURS,
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & OURS


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_follow_the_design(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no modules"
    bad = {
        str(f.relative_to(ROOT)): sorted(_imports(f) - ALLOWED[package])
        for f in files
        if _imports(f) - ALLOWED[package]
    }
    assert bad == {}
