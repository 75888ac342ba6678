"""runtime/listen.py: a taken port's error names who holds it when that can be seen, and
says what it can when not (a socket bound but not listening, a holder in another PID
namespace)."""

from __future__ import annotations

import os
import socket

import psutil
import pytest

from runtime.listen import ListenError, Setting, probe

SETTING = Setting("--port", "PORT", "x.port")


def test_a_listener_on_the_address_is_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ListenError) as err:
            probe("127.0.0.1", port, SETTING)
    assert str(err.value) == (
        f"--port {port}: address already in use by pid {os.getpid()} "
        f"({psutil.Process().name()}); choose another with --port, the PORT environment "
        "variable or the Helm value x.port")


def test_a_listener_on_every_address_is_named_for_one_address():
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ListenError, match=f"in use by pid {os.getpid()} "):
            probe("127.0.0.1", port, SETTING)


def test_a_bound_socket_that_does_not_listen_gets_the_general_words():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # no SO_REUSEADDR: the probe's bind collides
        port = taken.getsockname()[1]
        with pytest.raises(ListenError) as err:
            probe("127.0.0.1", port, SETTING)
    assert "address already in use (another process, or another replica on this node, " \
           "listens there); choose another with --port" in str(err.value)


def test_a_listener_on_another_address_is_not_blamed():
    with socket.socket() as other, socket.socket() as taken:
        other.bind(("127.0.0.2", 0))
        other.listen()
        port = other.getsockname()[1]
        taken.bind(("127.0.0.1", port))  # bound, not listening: no holder to name
        with pytest.raises(ListenError) as err:
            probe("127.0.0.1", port, SETTING)
    assert "by pid" not in str(err.value)
