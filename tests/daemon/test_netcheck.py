"""Netcheck asks the kernel whether POD_IP is ours
(https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/289)."""

from __future__ import annotations

import sys

import pytest

from agent.daemon.netcheck import NetcheckError, NotLocalError, check_local_address

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="netlink")


@pytest.mark.parametrize("ip", ["127.0.0.1", "127.0.1.7"])
def test_loopback_addresses_are_local(ip: str) -> None:
    check_local_address(ip)


def test_test_net_address_is_not_local() -> None:
    with pytest.raises(NotLocalError, match=r"192\.0\.2\.55 .*/issues/289\).*POD_IP"):
        check_local_address("192.0.2.55")


def test_garbage_is_a_clear_error() -> None:
    with pytest.raises(NotLocalError, match="not an IP address"):
        check_local_address("not-an-ip")


def test_netlink_unavailable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyroute2

    def broken(*_args: object, **_kwargs: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(pyroute2, "IPRoute", broken)
    with pytest.raises(NetcheckError, match="netlink unavailable") as info:
        check_local_address("127.0.0.1")
    assert not isinstance(info.value, NotLocalError)
