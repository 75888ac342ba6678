"""`nvidia-imex` command line: `python -m sim.fakeimex.daemon -c <config> [-p PORT] [--nogpu]`.

Exit status: 0 after SIGTERM/SIGINT/SIGQUIT, 1 for an unusable config, nodes config or bind
failure (message on stderr naming file and line), FAKE_IMEX_EXIT_CODE (default 1) for a
scripted crash. The daemon itself lives in `imexd`; knobs are listed in `knobs.Knobs`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import TextIO

from sim.fakeimex.config import DEFAULT_CONFIG_PATH, ConfigError, ImexConfig, load_config
from sim.fakeimex.imexd import FakeImex
from sim.fakeimex.knobs import DEFAULT_VERSION, NOGPU_VERSION, Knobs
from sim.fakeimex.logs import ImexLog


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvidia-imex", description="Fake NVIDIA IMEX daemon (simulation).", allow_abbrev=False
    )
    parser.add_argument("-c", "--config", default=str(DEFAULT_CONFIG_PATH), help="config file")
    parser.add_argument("-p", "--port", type=int, help="override SERVER_PORT")
    parser.add_argument("--nogpu", action="store_true", help="run without GPUs (version NO_GPU)")
    return parser


def _open_log(cfg: ImexConfig) -> TextIO:
    """LOG_FILE_NAME empty (the driver's template) means stderr."""
    if not cfg.log_file_name:
        return sys.stderr
    return Path(cfg.log_file_name).open("a" if cfg.log_append else "w")


def _daemonize() -> None:
    """DAEMONIZE=1 forks like the real binary: the parent exits 0 at once, so a supervisor
    that expects a foreground child sees it end."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


def _early_stop(signum: int, frame: object) -> None:
    """SIGTERM before the event loop takes over still means a clean exit 0."""
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _early_stop)
    args = _parser().parse_args(argv)
    boot_log = ImexLog(sys.stderr)
    try:
        cfg = load_config(Path(args.config))
        knobs = Knobs.from_env(os.environ)
    except (ConfigError, ValueError) as exc:
        boot_log.fatal(str(exc))
        return 1
    try:
        log = ImexLog(_open_log(cfg), cfg.log_level)
    except OSError as exc:
        boot_log.fatal(f"Cannot open log file {cfg.log_file_name}: {exc.strerror}")
        return 1
    if cfg.daemonize:
        _daemonize()
    version = knobs.version or (NOGPU_VERSION if args.nogpu else DEFAULT_VERSION)
    daemon = FakeImex(cfg, knobs, log, version=version, server_port=args.port or cfg.server_port)
    return asyncio.run(daemon.run())


if __name__ == "__main__":
    sys.exit(main())
