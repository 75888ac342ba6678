"""Malformed clique entries written by someone else are skipped, not fatal."""

from agent.daemon.supervisor import _usable

C = "0f2a6e3c-1111-2222-3333-444455556666.1"


def entry(name: str, index: object, ip: object = "10.0.0.1") -> dict:
    return {"nodeName": name, "cliqueID": C, "index": index, "ipAddress": ip}


def test_bad_index_or_ip_is_skipped_and_good_entries_kept(caplog) -> None:
    good = [entry("a", 0), entry("b", 1, "10.0.0.2"), entry("c", 2, "")]
    bad = [
        entry("x", "abc"),
        entry("y", None),
        entry("z", True),
        entry("w", 3, "fe80::1%eth0\n10.6.6.6 evil"),
        entry("v", 4, "not-an-ip"),
        entry("u", 5, 7),
    ]
    assert _usable(good + bad) == good
    skipped = {r.getMessage().split(":")[0] for r in caplog.records}
    assert skipped == {f"ignoring clique entry of {n}" for n in "xyzwvu"}
