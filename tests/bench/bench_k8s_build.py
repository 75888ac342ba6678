"""How long `make k8s` takes: in this checkout when nothing changed, in a fresh clone (no
`.cache/`) with Go's module and build caches warm (what CI does on a machine that built
once), and, with `--cold`, with an empty Go build cache (every package compiled; the
module cache is kept, so no downloads are timed).

    python tests/bench/bench_k8s_build.py [--cold]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from results import write_section  # noqa: E402


def timed(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    t0 = time.monotonic()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def main(cold: bool) -> None:
    rows = []
    timed(["make", "k8s"], REPO)  # built here first, so the next run is the no-op
    rows.append(("second `make k8s` in this checkout (nothing changed)",
                 f"{timed(['make', 'k8s'], REPO):.3f} s"))
    with tempfile.TemporaryDirectory(prefix="cd-clone-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        rows.append(("fresh clone (no .cache/), Go caches warm: a relink",
                     f"{timed(['make', 'k8s'], clone):.1f} s"))
        if cold:
            env = {**os.environ, "GOCACHE": str(Path(tmp) / "empty-gocache")}
            rows.append(("cold: empty Go build cache (modules already downloaded)",
                         f"{timed(['make', '-B', 'k8s'], clone, env):.0f} s"))
    print(write_section("make k8s: building the upstream components", rows,
                        "kube-apiserver, kube-controller-manager, kube-scheduler, etcd and "
                        "kubectl of Kubernetes v1.37.2 as one binary (upstream/)."))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", action="store_true", help="also time a cold build (minutes)")
    main(parser.parse_args().cold)
