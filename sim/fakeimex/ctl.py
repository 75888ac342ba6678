"""Fake `nvidia-imex-ctl`: query the local daemon's command service like the real tool.

Usage mirrors the real one: `nvidia-imex-ctl [-i <IP> [<PORT>] | -u <socket> | -c <config>]
<-q | -N> [-j] [-H] [-t <ms>]`, with `-p PORT` and `--u=<socket>` also accepted. Without a
target it reads the command-service address from /etc/nvidia-imex/config.cfg.
Output: `-q` prints the daemon state (`READY\\n` when ready); `-N` prints the legend, node
lines, the From/To matrix and `Domain State: X`; `-N -j` prints the JSON document.
Exit status: 0 when the daemon answered, 1 when it could not be reached, 255 when the config
file is unusable, 2 for usage errors (and for -n/-s/-d/-m, which the fake does not implement).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from api.names import IMEX_CMD_PORT
from sim.fakeimex.config import DEFAULT_CONFIG_PATH, ConfigError, load_config
from sim.fakeimex.protocol import CMD_NODES, CMD_QUERY, MAX_LINE, ProtocolError, decode, encode
from sim.fakeimex.states import LEGEND, LinkStatus

EXIT_UNREACHABLE = 1
EXIT_USAGE = 2
EXIT_CONFIG = 255


@dataclass(frozen=True)
class Target:
    """Where the command service listens: a unix socket path, or host and TCP port."""

    host: str = ""
    port: int = 0
    unix: str = ""

    def __str__(self) -> str:
        return f"unix socket {self.unix}" if self.unix else f"{self.host}:{self.port}"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvidia-imex-ctl",
        description="Fake NVIDIA IMEX control tool (simulation).",
        allow_abbrev=False,
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-c", dest="config", metavar="CONFIG", help="IMEX config file")
    where.add_argument("-i", dest="ip", nargs="+", metavar="IP [PORT]", help="daemon address")
    where.add_argument("-u", "--u", dest="unix", metavar="SOCKET", help="daemon unix socket")
    parser.add_argument("-p", "--port", type=int, help="command port (with -i or -c)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("-q", dest="action", action="store_const", const="q", help="daemon state")
    what.add_argument("-N", dest="action", action="store_const", const="N", help="domain status")
    for flag in ("-n", "-s", "-d", "-m"):
        what.add_argument(flag, dest="action", action="store_const", const=flag[1:])
    parser.add_argument("-j", dest="json", action="store_true", help="JSON output (with -N)")
    parser.add_argument("-H", dest="hostnames", action="store_true", help="include host names")
    parser.add_argument("-t", dest="timeout", type=int, default=5000, help="timeout, ms")
    return parser


def resolve_target(
    *, config: str | None, ip: list[str] | None, unix: str | None, port: int | None
) -> Target:
    """-u, then -i, then the config file's IMEX_CMD_* keys; ConfigError when that fails."""
    if unix is not None:
        return Target(unix=unix.removeprefix("="))
    if ip:
        if len(ip) > 2:
            raise ValueError("-i takes an IP and an optional port")
        chosen = int(ip[1]) if len(ip) == 2 else port or IMEX_CMD_PORT
        return Target(host=ip[0], port=chosen)
    cfg = load_config(Path(config) if config else DEFAULT_CONFIG_PATH)
    if not cfg.cmd_enabled:
        raise ConfigError(
            f"{cfg.where('IMEX_CMD_ENABLED')}: the command service is disabled "
            "(IMEX_CMD_ENABLED is not 1)"
        )
    if cfg.cmd_unix_domain_path:
        return Target(unix=cfg.cmd_unix_domain_path)
    if port is None and cfg.cmd_port is None:
        raise ConfigError(f"{cfg.where('IMEX_CMD_PORT')}: IMEX_CMD_PORT is empty")
    return Target(host=cfg.cmd_bind_interface_ip or "127.0.0.1", port=port or cfg.cmd_port or 0)


def request(target: Target, command: str, timeout: float) -> dict[str, Any]:
    """One request/response exchange; OSError when the daemon cannot be reached."""
    if target.unix:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(target.unix)
        except OSError:
            sock.close()
            raise
    else:
        sock = socket.create_connection((target.host, target.port), timeout=timeout)
    with sock:
        sock.sendall(encode({"cmd": command}))
        data = b""
        while not data.endswith(b"\n") and len(data) < MAX_LINE:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    if not data:
        raise ConnectionResetError("the daemon closed the connection without answering")
    return decode(data)


def render_nodes(document: dict[str, Any]) -> str:
    """The text form of `-N`: legend, one line per node, From/To matrix, domain state."""
    nodes: dict[str, Any] = document.get("nodes", {})
    ids = sorted(nodes, key=int)
    lines = [LEGEND, str(document.get("timestamp", "")), "Nodes:"]
    for k in ids:
        node = nodes[k]
        lines.append(
            f"Node #{k:<3} - {node['host']:<15} - {node['status']:<20} - "
            f"Version: {node.get('version', '')}"
        )
    lines.append("")
    lines.append(" Nodes From\\To " + "".join(f"{k:>5}" for k in ids))
    for k in ids:
        cells = nodes[k].get("connections", {})
        letters = [_letter(cells.get(j, {}).get("status", "INVALID")) for j in ids]
        lines.append(f"{k:>8}       " + "".join(f"{c:>5}" for c in letters))
    lines.append(f"Domain State: {document.get('status', 'DOWN')}")
    return "\n".join(lines)


def _letter(status: str) -> str:
    try:
        return LinkStatus(status).letter
    except ValueError:
        return "?"


def _without_hostnames(document: dict[str, Any]) -> dict[str, Any]:
    nodes = {
        k: {f: v for f, v in n.items() if f != "hostName"} for k, n in document["nodes"].items()
    }
    return {**document, "nodes": nodes}


def parse(argv: list[str] | None, parser: argparse.ArgumentParser | None = None) -> Any:
    """The parsed command line (`parser`: a reusable `make_parser()`; argparse exits 2 on
    usage errors)."""
    return (parser or make_parser()).parse_args(argv)


def target_of(args: Any, err: TextIO) -> tuple[Target, str] | int:
    """(where to ask, what to ask) for parsed `args`, or the exit status of a usage or
    config error, reported on `err`."""
    if args.action not in ("q", "N"):
        print(f"nvidia-imex-ctl: -{args.action} is not implemented by the fake", file=err)
        return EXIT_USAGE
    try:
        target = resolve_target(config=args.config, ip=args.ip, unix=args.unix, port=args.port)
    except ConfigError as exc:
        print(f"nvidia-imex-ctl: {exc}", file=err)
        return EXIT_CONFIG
    except ValueError as exc:
        print(f"nvidia-imex-ctl: {exc}", file=err)
        return EXIT_USAGE
    return target, CMD_QUERY if args.action == "q" else CMD_NODES


def unreachable(target: Target, exc: Exception, err: TextIO) -> int:
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    print(
        f"nvidia-imex-ctl: cannot connect to the IMEX daemon command service at "
        f"{target}: {reason}",
        file=err,
    )
    return EXIT_UNREACHABLE


def answer(args: Any, response: dict[str, Any], out: TextIO, err: TextIO) -> int:
    """Print the daemon's `response` as the command line asked; the exit status."""
    if "error" in response:
        print(f"nvidia-imex-ctl: daemon error: {response['error']}", file=err)
        return EXIT_UNREACHABLE
    if args.action == "q":
        print(response["state"], file=out)
    elif args.json:
        doc = response if args.hostnames else _without_hostnames(response)
        print(json.dumps(doc, indent=4), file=out)
    else:
        print(render_nodes(response), file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The program: parse, resolve the target, one blocking exchange, print.

    (`sim.cluster.inprocess` runs the same steps with an asyncio exchange instead.)
    """
    args = parse(argv)
    planned = target_of(args, sys.stderr)
    if isinstance(planned, int):
        return planned
    target, command = planned
    try:
        response = request(target, command, args.timeout / 1000)
    except (OSError, ProtocolError) as exc:
        return unreachable(target, exc, sys.stderr)
    return answer(args, response, sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
