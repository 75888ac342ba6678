"""sim/cluster/processes.py `free_port`: the sim's own listeners (a node's kubelet, the CRI
streaming server, host IMEX) keep off the ports the kernel hands out and the driver's
ports, so a node's agent never finds its health port (51515) taken by its own node."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from sim.cluster.processes import DRIVER_PORTS, free_port


def _ephemeral() -> range:
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    return range(low, high + 1)


def test_ports_are_outside_the_kernels_range_and_apart_from_the_drivers():
    ports = {free_port("127.0.0.1") for _ in range(200)}
    assert not ports & set(_ephemeral())
    assert not ports & DRIVER_PORTS
    assert len(ports) > 100  # spread, not one port every cluster shares


def test_a_port_in_use_is_skipped():
    first = free_port("127.0.0.1", random.Random(7))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen()
        again = free_port("127.0.0.1", random.Random(7))  # the same draw, then the next
    assert again != first
    with socket.socket() as s:
        s.bind(("127.0.0.1", again))
