"""A listen address that cannot be bound, said in one line naming the setting to change.

A second controller replica on the node, or anything else on the port, must not end the
process in a traceback an admin has to read to the bottom: the error says which flag,
environment variable and Helm value move the listener elsewhere.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import psutil


class ListenError(Exception):
    """A listener's address is taken or not this host's; the message is the fix."""


@dataclass(frozen=True)
class Setting:
    """Where a listen address comes from: its flag, environment variable and Helm value."""

    flag: str
    env: str
    helm: str

    def error(self, address: str, why: str) -> ListenError:
        return ListenError(
            f"{self.flag} {address}: {why}; choose another with {self.flag}, the {self.env} "
            f"environment variable or the Helm value {self.helm}")


_WHY = {errno.EADDRINUSE: "address already in use (another process, or another replica on "
                          "this node, listens there)",
        errno.EADDRNOTAVAIL: "address not available on this host",
        errno.EACCES: "permission denied (a port below 1024 needs privileges)"}


_ANY: Final = frozenset({"", "0.0.0.0", "::"})


def holder(host: str, port: int) -> str:
    """Who listens where a bind of `host:port` collides ("pid 4711 (kubelet)"), where this
    process may see it (root, the host's PID namespace); "" otherwise. Only on the error
    path: it reads every socket of the machine."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if not conn.laddr or conn.laddr.port != port or conn.pid is None \
                    or conn.status != psutil.CONN_LISTEN:
                continue
            ip = conn.laddr.ip.removeprefix("::ffff:")
            if host in _ANY or ip in _ANY or ip == host:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
    except (psutil.Error, OSError):
        pass
    return ""


def _host_port(address: str) -> tuple[str, int | None]:
    """`address` as the settings give it: "PORT", ":PORT", "HOST:PORT" or "[V6]:PORT"."""
    host, _, tail = address.rpartition(":")
    return host.strip("[]"), int(tail) if tail.isdigit() else None


@contextmanager
def binding(address: str, setting: Setting, *, at: tuple[str, int] | None = None
            ) -> Iterator[None]:
    """Turn the OSError of a bind in the block into a ListenError naming `setting` and
    `address`, and the process that holds the port where it can be seen (`at`: the host and
    port bound, when `address` is only the port)."""
    try:
        yield
    except OSError as err:
        why = _WHY.get(err.errno or 0)
        if why is None:
            raise
        host, port = at or _host_port(address)
        who = holder(host, port) if err.errno == errno.EADDRINUSE and port else ""
        if who:
            why = f"address already in use by {who}"
        raise setting.error(address, why) from None


def probe(host: str, port: int, setting: Setting) -> None:
    """Bind and release `host:port` (SO_REUSEADDR, as servers bind): for servers whose own
    bind failure is an opaque message (gRPC's), so the admin gets ListenError's instead;
    it names the port, the value of a port flag."""
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host or not host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError:  # no IPv6 here: the server's own bind says what it can
        return
    with sock, binding(str(port), setting, at=(host, port)):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host or "::", port))
