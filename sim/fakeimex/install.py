"""Write `nvidia-imex` / `nvidia-imex-ctl` launchers into a directory meant for PATH.

The driver runs both by bare name through PATH, as in the real container, so tests and the
sim prepend a directory holding these launchers. They exec the chosen Python on the fake's
modules with this checkout first on PYTHONPATH. Never the virtualenv's bin/: a fake named
like NVIDIA's binary must not shadow the real one for anything else using that environment.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Final

import sim.fakeimex

LAUNCHERS: Final = MappingProxyType(
    {"nvidia-imex": "sim.fakeimex.daemon", "nvidia-imex-ctl": "sim.fakeimex.ctl"}
)


# A real nvidia-imex handles SIGUSR1 microseconds after exec; Python needs a few hundred
# milliseconds to get there, and SIGUSR1's default action would kill it. The supervisor
# sends one whenever its peers change, so a start while daemons join would die. Ignored
# (inherited across exec) until the fake's event loop takes it over: nothing is lost, the
# daemon reads its config and hosts file only after that.
_IGNORE_EARLY_USR1: Final = "trap '' USR1\n"


def repo_root() -> Path:
    """The directory that holds the `sim` package (what PYTHONPATH must contain)."""
    return Path(sim.fakeimex.__file__).resolve().parents[2]


def install(bin_dir: Path, python: str = sys.executable) -> dict[str, Path]:
    """Create (or overwrite) the launchers; returns {binary name: path}."""
    bin_dir = Path(bin_dir)
    interpreter = Path(python).absolute()
    forbidden = {(Path(sys.prefix) / "bin").resolve(), interpreter.parent.resolve()}
    if bin_dir.resolve() in forbidden:
        raise ValueError(f"refusing to install fake IMEX binaries into {bin_dir} (a Python bin/)")
    bin_dir.mkdir(parents=True, exist_ok=True)
    root = shlex.quote(str(repo_root()))
    written: dict[str, Path] = {}
    for name, module in LAUNCHERS.items():
        path = bin_dir / name
        # bash's `exec -a` keeps argv[0]'s name the binary's, so the process looks like the
        # real one to `ps` and to the supervisor's stray-process search. A bare name would
        # make Python look itself up on PATH and take its prefix from where the launcher
        # is (in a node's /usr/bin: /usr/lib/python3.x, the wrong standard library); a
        # path next to the interpreter keeps its own.
        argv0 = shlex.quote(str(interpreter.parent / name))
        path.write_text(
            "#!/bin/bash\n"
            f"# {name}: the simulated IMEX ({module}), written by sim.fakeimex.install.\n"
            f'PYTHONPATH={root}${{PYTHONPATH:+":$PYTHONPATH"}}\n'
            "export PYTHONPATH\n"
            + (_IGNORE_EARLY_USR1 if name == "nvidia-imex" else "")
            + f'exec -a {argv0} {shlex.quote(str(interpreter))} -m {module} "$@"\n'
        )
        path.chmod(0o755)
        written[name] = path
    return written
