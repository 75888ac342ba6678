"""Kubeconfig files pointing at the emulator, for kubectl and the `kubernetes` client."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml


def kubeconfig(
    server_url: str,
    *,
    token: str | None = None,
    namespace: str = "default",
    name: str = "compute-domain-sim",
) -> dict[str, Any]:
    user: dict[str, Any] = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server_url}}],
        "users": [{"name": f"{name}-user", "user": user}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": name, "user": f"{name}-user", "namespace": namespace},
            }
        ],
        "current-context": name,
    }


def write_kubeconfig(path: Path, server_url: str, **kwargs: Any) -> Path:
    """Write atomically with mode 0600 (it may hold a bearer token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(kubeconfig(server_url, **kwargs), handle, sort_keys=False)
    tmp.replace(path)
    return path
