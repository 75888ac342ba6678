"""Build the single-file programs with PyInstaller (`make binary`).

    python packaging/pyinstaller/build.py --dist dist                 # dist/compute-domain-agent
    python packaging/pyinstaller/build.py --dist dist --target all    # and the controller
    python packaging/pyinstaller/build.py --dist dist --if-stale      # skip when up to date

Importable (tests load it with runpy): `build_frozen_agent(dest)` returns the path of the
agent binary in `dest`. Every build checks that no NVIDIA library went into the binary: NVML
must come from the host's driver root at run time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SPEC = HERE / "compute-domain.spec"
NAMES = {"agent": "compute-domain-agent", "controller": "compute-domain-controller"}
# What each binary is built from: a binary older than any of these is stale.
SOURCES = {
    "agent": ("agent", "api", "cdi", "runtime"),
    "controller": ("controller", "api", "runtime"),
}
BUILD_INPUTS = (HERE / "compute-domain.spec", HERE / "build.py", REPO / "pyproject.toml",
                REPO / ".venv" / ".installed")
FORBIDDEN = ("libnvidia", "libcuda")


class BuildError(Exception):
    """PyInstaller failed, or produced something unfit to ship."""


def source_files(target: str) -> Iterable[Path]:
    for package in SOURCES[target]:
        for path in (REPO / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path
    yield HERE / f"entry_{target}.py"
    yield from (p for p in BUILD_INPUTS if p.exists())


def is_fresh(binary: Path, target: str = "agent") -> bool:
    """True when `binary` exists and is newer than every file it is built from."""
    try:
        built = binary.stat().st_mtime
    except FileNotFoundError:
        return False
    return all(p.stat().st_mtime <= built for p in source_files(target))


def bundled_names(binary: Path) -> list[str]:
    """The names of everything inside a onefile executable's archive."""
    from PyInstaller.archive.readers import CArchiveReader

    return sorted(CArchiveReader(str(binary)).toc)


def check_binary(binary: Path) -> None:
    bad = [n for n in bundled_names(binary) if Path(n).name.startswith(FORBIDDEN)]
    if bad:
        raise BuildError(f"{binary} bundles NVIDIA libraries {bad}: they must come from the host")


def build(target: str, dest: Path, *, work: Path | None = None, verbose: bool = False) -> Path:
    """Build `target` ("agent" or "controller") as a onefile executable in `dest`."""
    dest = Path(dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pyi-") as scratch:
        workpath = Path(work).resolve() if work else Path(scratch)
        cmd = [
            sys.executable, "-m", "PyInstaller", str(SPEC), "--noconfirm",
            "--distpath", str(dest), "--workpath", str(workpath / target),
            "--log-level", "INFO" if verbose else "WARN",
            "--", "--target", target,
        ]
        # A fixed hash seed makes the archive's contents (sets, dicts) come out the same way.
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTHONPATH", None)
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=not verbose, text=True,
                              check=False)
        if proc.returncode != 0:
            raise BuildError(f"PyInstaller failed ({proc.returncode}):\n"
                             + ((proc.stdout or "") + (proc.stderr or ""))[-6000:])
    binary = dest / NAMES[target]
    if not binary.is_file():
        raise BuildError(f"PyInstaller reported success but {binary} is missing")
    check_binary(binary)
    return binary


def build_frozen_agent(dest: Path, *, work: Path | None = None) -> Path:
    """Build `compute-domain-agent` into `dest`; returns the executable's path."""
    return build("agent", dest, work=work)


def build_frozen_controller(dest: Path, *, work: Path | None = None) -> Path:
    """Build `compute-domain-controller` into `dest`; returns the executable's path."""
    return build("controller", dest, work=work)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, default=REPO / "dist",
                        help="where the executables go (default: dist/)")
    parser.add_argument("--work", type=Path, default=REPO / "build" / "pyinstaller",
                        help="PyInstaller's work directory, kept for faster rebuilds")
    parser.add_argument("--target", choices=(*NAMES, "all"), default="agent")
    parser.add_argument("--if-stale", action="store_true",
                        help="skip a target whose binary is newer than all its sources")
    parser.add_argument("--verbose", action="store_true", help="show PyInstaller's log")
    args = parser.parse_args(argv)
    targets = list(NAMES) if args.target == "all" else [args.target]
    for target in targets:
        out = args.dist / NAMES[target]
        if args.if_stale and is_fresh(out, target):
            print(f"{out} is up to date")
            continue
        start = time.monotonic()
        try:
            binary = build(target, args.dist, work=args.work, verbose=args.verbose)
        except BuildError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        size = binary.stat().st_size / 2**20
        print(f"built {binary} ({size:.1f} MiB) in {time.monotonic() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
