"""The nodes config, name resolution through a hosts file, and finding our own node ID.

The driver steers IMEX peers only through these files (names in nodes.cfg, addresses in
/etc/hosts plus SIGUSR1), so the fake resolves exactly through them and never asks DNS: a
name without a hosts entry stays unresolved, as in a pod whose DNS does not know it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sim.fakeimex.config import ConfigError, ImexConfig

DEFAULT_HOSTS_FILE: Final = Path("/etc/hosts")
# Addresses that mark an empty slot rather than a peer (AWS writes 0.0.0.0 lines; RFC 5737 and
# RFC 3849 documentation ranges are what tests and the sim use as "unroutable").
DEFAULT_PLACEHOLDER_NETS: Final = (
    "0.0.0.0/8",
    "192.0.2.0/24",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "255.255.255.255/32",
    "::/128",
    "2001:db8::/32",
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class NodeEntry:
    """One nodes-config line; `index` is the IMEX node ID (its position among entries).

    `port` is a fake-only extension (`host:port`, `[v6]:port`) so several daemons can share one
    address; without it every peer listens on our own SERVER_PORT, as with real IMEX.
    """

    index: int
    host: str
    port: int | None
    line: int

    @property
    def text(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Placeholders:
    """Address ranges that fill an unused slot: such entries are neither peers nor us."""

    networks: tuple[Network, ...]

    @classmethod
    def parse(cls, extra: Iterable[str] = ()) -> Placeholders:
        nets = [ipaddress.ip_network(n, strict=False) for n in (*DEFAULT_PLACEHOLDER_NETS, *extra)]
        return cls(tuple(nets))

    def __contains__(self, address: object) -> bool:
        if not isinstance(address, str):
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip.version == net.version and ip in net for net in self.networks)


def parse_nodes_config(text: str, source: Path) -> list[NodeEntry]:
    """One host (DNS name or IP, optionally with `:port`) per line; blanks and `#` skipped."""
    entries: list[NodeEntry] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if len(line.split()) != 1:
            raise ConfigError(f"{source}:{lineno}: expected one host per line, got {line!r}")
        host, port = _split_port(line, source, lineno)
        entries.append(NodeEntry(len(entries), host, port, lineno))
    return entries


def load_nodes_config(path: Path) -> list[NodeEntry]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read node config file: {exc.strerror or exc}") from exc
    return parse_nodes_config(text, path)


def _split_port(text: str, source: Path, lineno: int) -> tuple[str, int | None]:
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ConfigError(f"{source}:{lineno}: malformed bracketed address {text!r}")
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:  # a name, an IPv4 address or a bare IPv6 address
        return text, None
    if not port_text:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"{source}:{lineno}: invalid port in {text!r}")
    return host, int(port_text)


def nodes_digest(entries: Sequence[NodeEntry]) -> str:
    """Fingerprint of the node map; peers with a different one are `!M!` (node map mismatch)."""
    return hashlib.sha256("\n".join(e.text for e in entries).encode()).hexdigest()[:16]


def parse_hosts(text: str) -> dict[str, str]:
    """`/etc/hosts` syntax: `address name [alias...]`, `#` comments; the first line wins."""
    table: dict[str, str] = {}
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        for name in fields[1:]:
            table.setdefault(name.lower(), fields[0])
    return table


def load_hosts(path: Path) -> dict[str, str]:
    """A missing hosts file resolves nothing (the daemon warns; it is not fatal)."""
    return parse_hosts(path.read_text())


def resolve(host: str, hosts: Mapping[str, str]) -> str | None:
    """An IP literal is itself; a name maps through the hosts table or stays unresolved."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return hosts.get(host.lower())


def can_bind(address: str, port: int = 0) -> bool:
    """Whether this host owns `address` (and, with a port, whether that port is still free)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def find_self(
    entries: Sequence[NodeEntry],
    addresses: Mapping[int, str | None],
    cfg: ImexConfig,
    placeholders: Placeholders,
    port: int,
) -> int:
    """Our node ID, the way IMEX picks it plus one loopback-friendly rule.

    1. BIND_INTERFACE_IP, when set, must be one entry's address.
    2. Else an entry whose address is local (bindable) - on a real node only its own IP is.
       Loopback tests run many daemons on one host where all of 127/8 is bindable, so among
       local entries prefer IMEX_CMD_BIND_INTERFACE_IP (the driver renders the pod IP there),
       then the first whose SERVER_PORT is still free.
    Entries with a `:port` only match when it equals our SERVER_PORT.
    """

    def usable(entry: NodeEntry) -> str | None:
        address = addresses.get(entry.index)
        if address is None or address in placeholders:
            return None
        if entry.port is not None and entry.port != port:
            return None
        return address

    if cfg.bind_interface_ip:
        for entry in entries:
            if usable(entry) == cfg.bind_interface_ip:
                return entry.index
        raise ConfigError(
            f"BIND_INTERFACE_IP {cfg.bind_interface_ip} does not match any IP address "
            "in the node configuration file"
        )
    local = [e for e in entries if (a := usable(e)) is not None and can_bind(a)]
    for entry in local:
        if cfg.cmd_bind_interface_ip and usable(entry) == cfg.cmd_bind_interface_ip:
            return entry.index
    for entry in local:
        if can_bind(usable(entry) or "", port):
            return entry.index
    raise ConfigError(
        "No matching network interface found for any IP addresses in the node configuration file"
    )
