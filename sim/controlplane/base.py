"""What a simulated cluster needs of its control plane, whichever one runs.

`Credentials` are what a kubeconfig holds (server, CA, a bearer token or a client
certificate); `ControlPlane` is the interface `SimCluster` drives: start and stop, the
admin's and each kubelet's credentials, the kubelet serving certificate kube-apiserver
trusts, the server's version, and who made how many requests.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client

from sim.cluster.processes import ManagedProcess

# urllib3's default pool of 10 connections per host stalls the sim's many threads.
POOL_SIZE = 64


@dataclass(frozen=True)
class Credentials:
    """How one user reaches the API server."""

    server: str
    ca_file: Path | None = None
    token: str | None = None
    client_cert: Path | None = None
    client_key: Path | None = None

    def with_token(self, token: str) -> Credentials:
        """The same server and CA, authenticating with `token` instead."""
        return replace(self, token=token, client_cert=None, client_key=None)

    def api_client(self, pool: int = POOL_SIZE) -> client.ApiClient:
        config = client.Configuration()
        config.host = self.server
        if self.ca_file is not None:
            config.ssl_ca_cert = str(self.ca_file)
        if self.token:
            config.api_key = {"authorization": f"Bearer {self.token}"}
        if self.client_cert is not None and self.client_key is not None:
            config.cert_file = str(self.client_cert)
            config.key_file = str(self.client_key)
        config.connection_pool_maxsize = pool
        return client.ApiClient(config)

    def kubeconfig(self, *, namespace: str = "default", name: str = "compute-domain-sim") -> Any:
        cluster: dict[str, str] = {"server": self.server}
        if self.ca_file is not None:
            cluster["certificate-authority"] = str(self.ca_file)
        user: dict[str, str] = {}
        if self.token:
            user["token"] = self.token
        if self.client_cert is not None and self.client_key is not None:
            user["client-certificate"] = str(self.client_cert)
            user["client-key"] = str(self.client_key)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": f"{name}-user", "user": user}],
            "contexts": [
                {
                    "name": name,
                    "context": {"cluster": name, "user": f"{name}-user", "namespace": namespace},
                }
            ],
            "current-context": name,
        }

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """Written atomically with mode 0600 (it may hold a bearer token)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(self.kubeconfig(namespace=namespace), handle, sort_keys=False)
        tmp.replace(path)
        return path


Install = Callable[[Credentials], Awaitable[None]]


@dataclass(frozen=True)
class InCluster:
    """What kubelet gives every container for in-cluster configuration: the API server's
    address as KUBERNETES_SERVICE_HOST/PORT and the CA its kube-api-access volume holds."""

    host: str
    port: int
    ca_pem: str


class ControlPlane(Protocol):
    """One running control plane (`sim.controlplane.emulator` or `.upstream`)."""

    kind: str

    async def start(self, install: Install | None = None) -> None:
        """Up and serving: every component ready, the admin able to write. `install` (the
        admin's first objects: CRDs, RBAC) runs before the controllers start."""
        ...

    async def wait_settled(self) -> None:
        """Until the controllers act (a new namespace has its default ServiceAccount)."""
        ...

    async def stop(self) -> None:
        """Everything it started is gone; safe after a failed start."""
        ...

    @property
    def admin(self) -> Credentials: ...

    def node_credentials(self, node: str) -> Credentials:
        """What the kubelet of `node` authenticates as."""
        ...

    def user(self, name: str, groups: Sequence[str] = ()) -> Credentials:
        """Credentials of a plain user (no ServiceAccount) with the given groups."""
        ...

    def kubelet_tls(self, node: str, address: str) -> ssl.SSLContext | None:
        """The TLS context of the kubelet API of `node` (what the API server dials for
        `kubectl logs` and `exec`), or None if this control plane never calls kubelets."""
        ...

    def in_cluster(self) -> InCluster:
        """Where pods reach the API server (the `kubernetes` Service) and its CA."""
        ...

    def server_version(self) -> str:
        """The server's `gitVersion` (`/version`)."""
        ...

    @property
    def resource_version(self) -> str:
        """The resource.k8s.io version the cluster's own actors (kubelets) speak."""
        ...

    def requests_by_user(self) -> Mapping[str, Mapping[str, int]]:
        """User name -> verb -> number of requests that user made so far."""
        ...

    def processes(self) -> list[ManagedProcess]:
        """The control plane's own processes (none for the emulator)."""
        ...

    def log_tail(self) -> str:
        """The last lines of the control plane's own logs, for a failure message."""
        ...


def server_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """A TLS server context that asks for client certificates signed by `client_ca`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(client_ca))
    context.load_cert_chain(str(cert), str(key))
    context.verify_mode = ssl.CERT_REQUIRED
    return context
