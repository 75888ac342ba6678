"""Startup check that POD_IP really is an address of this network namespace.

IMEX finds itself in the nodes config by matching its own addresses; with a wrong POD_IP
(no hostNetwork, a stale downward-API value) it never does and waits for quorum forever:
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/289.
Asking the kernel turns that silent hang into one clear startup error.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Final

RTN_LOCAL: Final = 2  # linux/rtnetlink.h: a route to one of our own addresses


class NetcheckError(Exception):
    """The check could not run (netlink unavailable); the message is one line."""


class NotLocalError(NetcheckError):
    """The address is not (or cannot be) an address of this network namespace."""


def _not_local(ip: str, detail: str) -> NotLocalError:
    return NotLocalError(
        f"the pod IP {ip} is not an address of this host/pod network namespace ({detail}): "
        "IMEX would not find itself in the nodes config "
        "(https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/289); "
        "check hostNetwork/POD_IP"
    )


def check_local_address(ip: str) -> None:
    """Raise NotLocalError unless the kernel routes `ip` as local (loopback 127/8 counts)."""
    try:
        address = ipaddress.ip_address(ip.strip())
    except ValueError:
        raise NotLocalError(
            f"the pod IP {ip!r} is not an IP address; check the POD_IP env (status.podIP)"
        ) from None
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    try:
        from pyroute2 import IPRoute
        from pyroute2.netlink.exceptions import NetlinkError

        with IPRoute() as ipr:
            try:
                routes = ipr.route("get", dst=str(address), family=family)
            except NetlinkError as err:
                if err.code in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                    raise _not_local(str(address), "no route to it") from None
                raise
    except NetcheckError:
        raise
    except Exception as err:  # ImportError, socket permission, netlink errors
        raise NetcheckError(
            f"cannot ask the kernel whether {address} is local (netlink unavailable: {err}); "
            "check the pod's network namespace"
        ) from None
    kinds = {route["type"] for route in routes}
    if RTN_LOCAL not in kinds:
        raise _not_local(str(address), "the kernel routes it to another host")
