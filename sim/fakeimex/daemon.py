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
from collections.abc import Mapping
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


def _open_log(cfg: ImexConfig, stderr: TextIO) -> TextIO:
    """LOG_FILE_NAME empty (the driver's template) means stderr."""
    if not cfg.log_file_name:
        return stderr
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


def build(
    argv: list[str] | None, env: Mapping[str, str], stderr: TextIO, *, can_fork: bool = True
) -> FakeImex | int:
    """The daemon `argv` and `env` describe, logging to `stderr`; or the exit status of a
    start-up failure. `can_fork=False` (in-process, `sim.cluster.inprocess`) refuses
    DAEMONIZE=1 instead of forking."""
    args = _parser().parse_args(argv)
    boot_log = ImexLog(stderr)
    try:
        cfg = load_config(Path(args.config))
        knobs = Knobs.from_env(env)
    except (ConfigError, ValueError) as exc:
        boot_log.fatal(str(exc))
        return 1
    try:
        log = ImexLog(_open_log(cfg, stderr), cfg.log_level)
    except OSError as exc:
        boot_log.fatal(f"Cannot open log file {cfg.log_file_name}: {exc.strerror}")
        return 1
    if cfg.daemonize:
        if not can_fork:
            boot_log.fatal("DAEMONIZE=1 is not supported by an in-process daemon")
            return 1
        _daemonize()
    version = knobs.version or (NOGPU_VERSION if args.nogpu else DEFAULT_VERSION)
    return FakeImex(cfg, knobs, log, version=version, server_port=args.port or cfg.server_port)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _early_stop)
    # A reload before the config and hosts file are read is moot (the launcher ignores it
    # from exec on, see install.py); the event loop takes SIGUSR1 over in `run`.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    daemon = build(argv, os.environ, sys.stderr)
    if isinstance(daemon, int):
        return daemon
    return asyncio.run(daemon.run())


if __name__ == "__main__":
    sys.exit(main())
