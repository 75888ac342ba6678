"""The embedded control plane: the project's API emulator and the sim's own scheduler and
workload controllers, in this process, started in about a second with no dependency.

The emulator authenticates bearer tokens and enforces RBAC; a request without credentials
is the admin (kube-apiserver's old localhost insecure port), so kubectl works without a
token. Pods reach it over HTTPS (a second listener with a certificate of the cluster's own
CA, published as kube-root-ca.crt), as in-cluster clients reach kube-apiserver; it calls
the kubelets' HTTPS API for `kubectl logs` and `exec` with a client certificate of that CA.
The actors a real kube-controller-manager and kube-scheduler would be (the
ResourceClaim controller, the DRA scheduler, the DaemonSet, Deployment, ReplicaSet and Job
controllers) run on the caller's event loop as the admin.

The emulator itself serves from a thread of this process (`ServerThread`: tests reach
into its store), or with `own_process=True` from a process of its own
(`sim.apiserver.process`), as the sim's scale mode runs it so that API answers do not
wait on the GIL the in-process nodes share. Both answer the same operations (`op`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runtime.draclient import pick_version
from sim.apiserver.authn import ADMIN, TokenAuthenticator
from sim.apiserver.discovery import SERVER_VERSION
from sim.apiserver.process import ServerProcess
from sim.apiserver.runner import ServerThread
from sim.cluster.claims import ClaimController
from sim.cluster.processes import ManagedProcess
from sim.cluster.scheduler import Scheduler
from sim.cluster.workloads import (
    DaemonSetController,
    DeploymentController,
    JobController,
    ReplicaSetController,
)
from sim.controlplane import EMULATOR
from sim.controlplane.base import Credentials, InCluster, Install, server_context
from sim.controlplane.pki import ClusterPKI


class EmulatorControlPlane:
    """`await start()` serves the emulator on 127.0.0.1 and starts the actors."""

    kind = EMULATOR

    def __init__(self, root: Path, *, own_process: bool = False, **server_kwargs: Any) -> None:
        self.root = Path(root)
        self.own_process = own_process
        self.server_kwargs = server_kwargs
        self.server: ServerThread | ServerProcess | None = None
        self.actors: list[Any] = []
        self._admin: Credentials | None = None
        self._admin_client: Any = None
        self.pki: ClusterPKI | None = None

    @property
    def resource_version(self) -> str:
        return pick_version(list(self.server_kwargs.get("resource_versions", ("v1",))))

    @property
    def url(self) -> str:
        assert self.server is not None, "the control plane is not started"
        return self.server.url

    @property
    def admin(self) -> Credentials:
        if self._admin is None:
            raise RuntimeError("the control plane is not started")
        return self._admin

    async def start(self, install: Install | None = None) -> None:
        token = secrets.token_hex(16)
        auth = TokenAuthenticator(anonymous=ADMIN)
        auth.add_admin(token)
        pki = self.pki = await asyncio.to_thread(ClusterPKI, self.root / "pki")
        serving = pki.apiserver_serving(["127.0.0.1"])
        kubelet_client = pki.client("apiserver-kubelet-client", "kube-apiserver-kubelet-client")
        kubelet = (str(pki.ca.cert), str(kubelet_client.cert), str(kubelet_client.key))
        if self.own_process:
            unknown = set(self.server_kwargs) - {"resource_versions"}
            if unknown:
                raise ValueError(f"the emulator's own process takes no {sorted(unknown)}")
            process = ServerProcess(
                self.root / "apiserver.log",
                adminToken=token,
                tlsCert=str(serving.cert),
                tlsKey=str(serving.key),
                rootCaPem=pki.ca_pem.decode(),
                kubeletClient=list(kubelet),
                resourceVersions=list(self.server_kwargs.get("resource_versions", ("v1",))),
            )
            self.server = await asyncio.to_thread(process.start)
        else:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(str(serving.cert), str(serving.key))
            self.server = await asyncio.to_thread(
                lambda: ServerThread(
                    authenticator=auth,
                    root_ca_pem=pki.ca_pem.decode(),
                    kubelet_client=kubelet,
                    **self.server_kwargs,
                ).start(tls=tls)
            )
        self._admin = Credentials(self.server.url, token=token)
        self._admin_client = self._admin.api_client()
        if install is not None:
            await install(self._admin)
        self.actors = [
            ClaimController(self._admin_client, self.resource_version),
            Scheduler(self._admin_client, retry_seconds=1.0,
                      resource_version=self.resource_version),
            DaemonSetController(self._admin_client, resync_seconds=10.0),
            DeploymentController(self._admin_client, resync_seconds=10.0),
            ReplicaSetController(self._admin_client, resync_seconds=10.0),
            JobController(self._admin_client, resync_seconds=10.0),
        ]
        for actor in self.actors:
            actor.start()

    async def wait_settled(self) -> None:
        """The actors take their first lists at start; nothing to wait for."""

    async def stop(self) -> None:
        await asyncio.gather(*(a.stop() for a in self.actors), return_exceptions=True)
        self.actors = []
        if self._admin_client is not None:
            self._admin_client.close()
            self._admin_client = None
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.server.close)
            self.server = None

    def node_credentials(self, node: str) -> Credentials:
        """The emulator has no Node authorizer: kubelets act as the admin."""
        return self.admin

    def user(self, name: str, groups: Sequence[str] = ()) -> Credentials:
        """A bearer token registered for `name` with the emulator's authenticator."""
        server = self.server
        assert server is not None, "the control plane is not started"
        token = secrets.token_hex(16)
        server.op("add_user", token=token, name=name, groups=list(groups))
        return self.admin.with_token(token)

    def kubelet_tls(self, node: str, address: str) -> ssl.SSLContext | None:
        """The node's kubelet serving certificate; only the emulator's kubelet client
        certificate (this CA) gets in."""
        assert self.pki is not None, "the control plane is not started"
        pair = self.pki.kubelet_serving(node, address)
        return server_context(pair.cert, pair.key, self.pki.ca.cert)

    def in_cluster(self) -> InCluster:
        assert self.server is not None and self.pki is not None, "the control plane is not started"
        return InCluster("127.0.0.1", self.server.tls_port, self.pki.ca_pem.decode())

    def server_version(self) -> str:
        return str(SERVER_VERSION["gitVersion"])

    def requests_by_user(self) -> Mapping[str, Mapping[str, int]]:
        server = self.server
        if server is None:
            return {}
        users: dict[str, dict[str, int]] = server.op("users")
        extra = ("watchEvents", "watchBytes", "eventWrites")  # not request verbs
        return {u: {k: v for k, v in c.items() if k not in extra} for u, c in users.items()}

    def processes(self) -> list[ManagedProcess]:
        return []  # the actors run in this process; the emulator in it or in a child

    def log_tail(self) -> str:
        return ""
