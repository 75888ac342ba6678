"""Who asked kube-apiserver for what: its audit log, read back as request counts per user.

The emulator counts requests per user itself (`/_sim/stats`); on the upstream control
plane the same figures come from kube-apiserver's own audit backend, so a test can still
prove that the driver's programs wrote as their ServiceAccounts. The policy leaves out
the chatter of kubelets and control-plane components (node heartbeats, controllers'
syncs) and of the sim's admin (the observers' polling), and records every other request
once, when its response is complete.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Final

import yaml

POLICY: Final[dict[str, Any]] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
    "rules": [
        {"level": "None", "userGroups": ["system:nodes"]},
        {
            "level": "None",
            "users": [
                "system:kube-scheduler",
                "system:kube-controller-manager",
                "system:apiserver",
            ],
        },
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
        # The sim's admin observes the cluster many times a second (the demo's evidence).
        {"level": "None", "users": ["kubernetes-admin"]},
        {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*", "/version"]},
        {"level": "Metadata"},
    ],
}


_WRITES: Final = frozenset({"create", "update", "patch", "delete"})


def write_policy(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(POLICY, sort_keys=False))
    return path


class AuditCounter:
    """Counts the audit log's requests per user and verb, reading only what is new."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self._offset = 0
        self._partial = b""
        self._counts: defaultdict[str, defaultdict[str, int]] = defaultdict(
            lambda: defaultdict(int)
        )
        self._answers: defaultdict[tuple[str, int], int] = defaultdict(int)

    def counts(self) -> dict[str, dict[str, int]]:
        """User -> verb -> requests (409 answers also count as "conflict", writes of
        Events also as "eventWrites")."""
        self._read_new()
        return {user: dict(verbs) for user, verbs in self._counts.items()}

    def answers(self) -> dict[tuple[str, int], int]:
        """(user, HTTP status) -> requests answered so."""
        self._read_new()
        return dict(self._answers)

    def _read_new(self) -> None:
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            user = ((event.get("user") or {}).get("username")) or ""
            verb = event.get("verb") or ""
            code = int((event.get("responseStatus") or {}).get("code") or 0)
            self._counts[user][verb] += 1
            self._answers[user, code] += 1
            if verb in _WRITES and (event.get("objectRef") or {}).get("resource") == "events":
                self._counts[user]["eventWrites"] += 1  # as the emulator's /_sim/stats
            if code == 409:
                self._counts[user]["conflict"] += 1
