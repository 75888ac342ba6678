"""Command line of `compute-domain-sim`: the simulated cluster."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from api.cli import Subcommands, run_program

PROG = "compute-domain-sim"


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: give a number 0-65535") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {port}: give a number 0-65535")
    return port


def add_commands(sub: Subcommands) -> None:
    api = sub.add_parser(
        "apiserver",
        help="run the Kubernetes API emulator stand-alone",
        description="Serve the Kubernetes API emulator on 127.0.0.1 until SIGTERM/SIGINT.",
    )
    api.add_argument(
        "--port",
        type=_port,
        default=0,
        help="TCP port on 127.0.0.1 (default: a free port, printed at start)",
    )
    api.add_argument(
        "--kubeconfig-out",
        type=Path,
        help="write a kubeconfig for kubectl and clients to this path",
    )
    api.add_argument(
        "--state-file",
        type=Path,
        help="load objects from this file at start and save them as they change",
    )
    api.add_argument(
        "--history-window",
        type=int,
        default=10_000,
        help="events kept for watch resumption; older resourceVersions get 410",
    )
    api.set_defaults(handler=_run_apiserver)


def _run_apiserver(args: argparse.Namespace) -> int:
    from sim.apiserver.kubeconfig import write_kubeconfig
    from sim.apiserver.server import ApiServer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.state_file is not None and args.state_file.is_dir():
        print(
            f"{PROG}: --state-file {args.state_file} is a directory; give a file path",
            file=sys.stderr,
        )
        return 2
    if args.history_window < 1:
        print(f"{PROG}: --history-window must be at least 1", file=sys.stderr)
        return 2

    async def serve() -> None:
        server = ApiServer(history_window=args.history_window, state_file=args.state_file)
        try:
            await server.start(port=args.port)
        except OSError as err:
            raise SystemExit(
                f"{PROG}: cannot listen on 127.0.0.1:{args.port}: {err.strerror}"
            ) from None
        if args.kubeconfig_out is not None:
            write_kubeconfig(args.kubeconfig_out, server.url)
        print(f"serving the Kubernetes API on {server.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_program(PROG, __doc__, argv, add_commands)


if __name__ == "__main__":
    sys.exit(main())
