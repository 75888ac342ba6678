"""sim/controlplane/audit.py AuditCounter: kube-apiserver's audit log read back as requests
per user, as the emulator's /_sim/stats counts them (409s as "conflict", Event writes also
as "eventWrites"), reading only what was appended since the last call."""

from __future__ import annotations

import json
from pathlib import Path

from sim.controlplane.audit import AuditCounter


def _line(user: str, verb: str, resource: str, code: int) -> str:
    return json.dumps({
        "user": {"username": user}, "verb": verb, "objectRef": {"resource": resource},
        "responseStatus": {"code": code},
    }) + "\n"


def test_counts_writes_conflicts_and_event_writes_incrementally(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(
        _line("u", "create", "events", 201)
        + _line("u", "patch", "computedomaincliques", 409)
        + _line("u", "get", "nodes", 200)
    )
    counter = AuditCounter(log)
    assert counter.counts() == {
        "u": {"create": 1, "eventWrites": 1, "patch": 1, "conflict": 1, "get": 1}
    }
    with log.open("a") as handle:  # half a line: counted once it is complete
        handle.write(_line("v", "update", "nodes", 200)[:20])
    assert "v" not in counter.counts()
    with log.open("a") as handle:
        handle.write(_line("v", "update", "nodes", 200)[20:])
    assert counter.counts()["v"] == {"update": 1}
    assert counter.answers()[("u", 409)] == 1
