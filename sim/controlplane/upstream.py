"""The upstream control plane: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler of the pinned release (`make k8s`), on loopback, as processes.

Configured as a normal cluster is (kubeadm's choices where a choice is needed):
- kube-apiserver with client-certificate and ServiceAccount-token authentication, the
  Node and RBAC authorizers, the default admission plugins plus NodeRestriction, the
  TokenRequest API (ServiceAccount tokens signed by a key of this cluster), the DRA APIs
  it serves by default, API priority and fairness, and an audit log (`audit`);
- kube-controller-manager with the controllers such a cluster uses (`CONTROLLERS`), each
  under its own ServiceAccount;
- kube-scheduler with its default profile, the DRA allocator included.

Every certificate and key is made for this cluster (`pki`); every port is a free one, so
clusters side by side on one machine never meet. Leader election is off: each component
runs once. etcd skips fsync: it is a test cluster, and a lost write only loses a test.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from sim.cluster.processes import ManagedProcess, free_port
from sim.controlplane import KUBERNETES
from sim.controlplane.audit import AuditCounter, write_policy
from sim.controlplane.base import Credentials, InCluster, Install, server_context
from sim.controlplane.binaries import Components, locate
from sim.controlplane.pki import ClusterPKI, KeyPair

log = logging.getLogger(__name__)

ADDRESS: Final = "127.0.0.1"
SERVICE_RANGE: Final = "10.0.0.0/24"
ISSUER: Final = "https://kubernetes.default.svc"
START_TIMEOUT: Final = 90.0
# kube-apiserver drains for up to a minute after SIGTERM; a test cluster need not wait.
STOP_GRACE: Final = 3.0
# The controllers of kube-controller-manager that a cluster running this driver uses:
# workloads (DaemonSet, Deployment, ReplicaSet, Job), DRA (ResourceClaim, device taints),
# the garbage collector, namespaces, ServiceAccounts and the root CA ConfigMap their
# tokens' volumes name, node health (lifecycle, taint eviction, pod GC), finished Jobs,
# aggregated ClusterRoles, and the type check of admission policies (their status). Each
# starts under a ServiceAccount of its own, one after the other; the volume, service,
# autoscaling and certificate controllers (unused here) would add seconds to every start.
CONTROLLERS: Final = (
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "daemonset-controller",
    "deployment-controller",
    "replicaset-controller",
    "job-controller",
    "ttl-after-finished-controller",
    "resourceclaim-controller",
    "device-taint-eviction-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "clusterrole-aggregation-controller",
    "validatingadmissionpolicy-status-controller",
)


class KubernetesControlPlane:
    """`await start()` brings the four components up under `root`; `stop()` ends them."""

    kind = KUBERNETES

    def __init__(
        self,
        root: Path,
        *,
        components: Components | None = None,
        verbosity: int = 0,
        apiserver_flags: Sequence[str] = (),
    ) -> None:
        self.root = Path(root)
        self.components = components or locate()
        self.verbosity = verbosity
        self.apiserver_flags = list(apiserver_flags)
        self.pki: ClusterPKI | None = None
        self._processes: dict[str, ManagedProcess] = {}
        self.port = 0
        self._admin: Credentials | None = None
        self._nodes: dict[str, Credentials] = {}
        self._audit = AuditCounter(self.root / "audit.log")
        self._version = ""
        self._etcd_url = ""

    # --- the interface -------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{ADDRESS}:{self.port}"

    @property
    def admin(self) -> Credentials:
        if self._admin is None:
            raise RuntimeError("the control plane is not started")
        return self._admin

    def node_credentials(self, node: str) -> Credentials:
        """`system:node:<node>` in `system:nodes`: what Node authorization keys on."""
        if node not in self._nodes:
            pair = self._pki.node_client(node)
            self._nodes[node] = Credentials(
                self.url, self._pki.ca.cert, client_cert=pair.cert, client_key=pair.key
            )
        return self._nodes[node]

    def user(self, name: str, groups: Sequence[str] = ()) -> Credentials:
        """A client certificate of this cluster's CA: CN `name`, O `groups`."""
        pair = self._pki.client(f"user-{name}", name, groups)
        return Credentials(self.url, self._pki.ca.cert, client_cert=pair.cert, client_key=pair.key)

    def kubelet_tls(self, node: str, address: str) -> ssl.SSLContext:
        """Serving certificate of the node's kubelet (checked by kube-apiserver through
        --kubelet-certificate-authority); clients must show a certificate of this CA."""
        pair = self._pki.kubelet_serving(node, address)
        return server_context(pair.cert, pair.key, self._pki.ca.cert)

    def kubelet_serving(self, node: str, address: str) -> KeyPair:
        """The serving certificate files of an upstream kubelet on `node` (sim/cri)."""
        return self._pki.kubelet_serving(node, address)

    @property
    def ca_file(self) -> Path:
        """The cluster CA's certificate (what kubelets check API clients against)."""
        return self._pki.ca.cert

    def in_cluster(self) -> InCluster:
        return InCluster(ADDRESS, self.port, self._pki.ca_pem.decode())

    def server_version(self) -> str:
        return self._version

    @property
    def resource_version(self) -> str:
        return "v1"  # its scheduler and controllers need v1 (Kubernetes 1.34 and later)

    def requests_by_user(self) -> Mapping[str, Mapping[str, int]]:
        return self._audit.counts()

    def answers(self) -> Mapping[tuple[str, int], int]:
        """(user, HTTP status) -> how many of that user's requests were answered so."""
        return self._audit.answers()

    def processes(self) -> list[ManagedProcess]:
        return list(self._processes.values())

    def log_tail(self) -> str:
        return "\n".join(
            f"--- {name} ({p.log_path}):\n{p.log_tail(1500)}" for name, p in self._processes.items()
        )

    @property
    def _pki(self) -> ClusterPKI:
        if self.pki is None:
            raise RuntimeError("the control plane is not started")
        return self.pki

    # --- bring-up --------------------------------------------------------------------

    async def start(self, install: Install | None = None) -> None:
        """`install` runs once the API server serves and before the controllers start:
        kube-controller-manager's garbage collector learns the resources a CRD adds only
        from its discovery pass every 30 s, so objects of CRDs installed before it starts
        are collected at once, as on a cluster where the driver was installed long ago."""
        started = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        pki = self.pki = await asyncio.to_thread(ClusterPKI, self.root / "pki")
        self.port = free_port(ADDRESS)
        admin = pki.client("admin", "kubernetes-admin", ["system:masters"])
        self._admin = Credentials(
            self.url, pki.ca.cert, client_cert=admin.cert, client_key=admin.key
        )
        etcd_url = await self._start_etcd()
        await self._start_apiserver(etcd_url)
        if install is not None:
            await install(self.admin)
        await asyncio.gather(self._start_controller_manager(), self._start_scheduler())
        log.info(
            "kubernetes %s control plane up on %s in %.1fs",
            self._version,
            self.url,
            time.monotonic() - started,
        )

    async def wait_settled(self) -> None:
        """Until kube-controller-manager runs its controllers: pods of a namespace need its
        `default` ServiceAccount (admission refuses them until the ServiceAccount
        controller made it), so wait for the first one, a few seconds after start."""
        await self._wait("the default ServiceAccount", self._default_account_exists)

    def _process(self, name: str, argv: Sequence[str]) -> ManagedProcess:
        process = ManagedProcess(
            name, [str(a) for a in argv], self.root / "logs" / f"{name}.log", die_with_parent=True
        )
        self._processes[name] = process
        return process

    # --- faults a test can cause -------------------------------------------------------

    async def restart_apiserver(self, *, kill: bool = True) -> None:
        """kill -9 (or stop) kube-apiserver and start it again on the same port and state:
        every connection and watch breaks, and its watch cache starts over from etcd, so a
        watch resumed from an older resourceVersion gets 410 Gone."""
        apiserver = self._processes["kube-apiserver"]
        await (apiserver.kill() if kill else apiserver.stop(STOP_GRACE))
        await apiserver.start()
        admin = self.admin
        await self._wait(
            "kube-apiserver", lambda: _get(f"{self.url}/readyz", admin) == "ok", apiserver
        )

    async def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (what kube-apiserver does
        every 5 minutes); returns that revision."""
        url = self._etcd_url

        def compact() -> int:
            header = _post_json(f"{url}/v3/kv/range", {"key": "AA==", "limit": 1})["header"]
            revision = int(header["revision"])
            _post_json(f"{url}/v3/kv/compaction", {"revision": revision, "physical": True})
            return revision

        return await asyncio.to_thread(compact)

    async def _start_etcd(self) -> str:
        client_port, peer_port = free_port(ADDRESS), free_port(ADDRESS)
        url = self._etcd_url = f"http://{ADDRESS}:{client_port}"
        etcd = self._process(
            "etcd",
            [
                self.components.path("etcd"),
                "--data-dir", self.root / "etcd",
                "--listen-client-urls", url,
                "--listen-peer-urls", f"http://{ADDRESS}:{peer_port}",
                "--unsafe-no-fsync",
            ],
        )  # fmt: skip
        await etcd.start()
        await self._wait("etcd", lambda: _get(f"{url}/health") is not None, etcd)
        return url

    async def _start_apiserver(self, etcd_url: str) -> None:
        pki = self._pki
        serving = pki.apiserver_serving([ADDRESS])
        kubelet_client = pki.client("apiserver-kubelet-client", "kube-apiserver-kubelet-client")
        front_proxy = pki.client("front-proxy-client", "front-proxy-client")
        sa = pki.service_account_keys()
        policy = write_policy(self.root / "audit-policy.yaml")
        apiserver = self._process(
            "kube-apiserver",
            [
                self.components.path("kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={ADDRESS}",
                f"--advertise-address={ADDRESS}",
                f"--secure-port={self.port}",
                f"--client-ca-file={pki.ca.cert}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                # The aggregation layer's front proxy (kubeadm's flags): without them the
                # components' delegated authentication complains of a missing CA bundle.
                f"--requestheader-client-ca-file={pki.ca.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={front_proxy.cert}",
                f"--proxy-client-key-file={front_proxy.key}",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                f"--kubelet-certificate-authority={pki.ca.cert}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                # The `kubernetes` Service's endpoints would be this loopback address,
                # which Endpoints validation refuses; nothing in the sim dials it.
                "--endpoint-reconciler-type=none",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.root / 'audit.log'}",
                "--audit-log-format=json",
                "--profiling=false",
                f"--v={self.verbosity}",
                *self.apiserver_flags,
            ],
        )
        await apiserver.start()
        admin = self.admin
        await self._wait(
            "kube-apiserver", lambda: _get(f"{self.url}/readyz", admin) == "ok", apiserver
        )
        version = _get(f"{self.url}/version", admin) or "{}"
        self._version = str(json.loads(version).get("gitVersion") or "")

    def _component_kubeconfig(self, name: str, pair: KeyPair) -> Path:
        credentials = Credentials(
            self.url, self._pki.ca.cert, client_cert=pair.cert, client_key=pair.key
        )
        return credentials.write_kubeconfig(self.root / "kubeconfigs" / name)

    async def _start_controller_manager(self) -> None:
        pki = self._pki
        await self._start_component(
            "kube-controller-manager",
            pki.client("controller-manager", "system:kube-controller-manager"),
            [
                f"--controllers={','.join(CONTROLLERS)}",
                "--use-service-account-credentials=true",
                f"--root-ca-file={pki.ca.cert}",
                f"--service-account-private-key-file={pki.directory / 'sa.key'}",
                f"--cluster-signing-cert-file={pki.ca.cert}",
                f"--cluster-signing-key-file={pki.ca.key}",
            ],
        )

    async def _start_scheduler(self) -> None:
        await self._start_component(
            "kube-scheduler", self._pki.client("scheduler", "system:kube-scheduler"), []
        )

    async def _start_component(self, name: str, user: KeyPair, flags: Sequence[str]) -> None:
        """A control-plane component with its own client certificate, serving its health
        endpoint on a free port, without leader election; waits until it is healthy."""
        kubeconfig = self._component_kubeconfig(name, user)
        port = free_port(ADDRESS)
        process = self._process(
            name,
            [
                self.components.path(name),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={ADDRESS}",
                f"--secure-port={port}",
                "--leader-elect=false",
                "--profiling=false",
                f"--v={self.verbosity}",
                *flags,
            ],
        )
        await process.start()
        await self._wait(
            name, lambda: _get(f"https://{ADDRESS}:{port}/healthz", insecure=True) == "ok", process
        )

    def _default_account_exists(self) -> bool:
        body = _get(f"{self.url}/api/v1/namespaces/default/serviceaccounts/default", self.admin)
        return body is not None

    async def _wait(
        self, what: str, ready: Callable[[], bool], process: ManagedProcess | None = None
    ) -> None:
        """Poll `ready` (a blocking callable) until true; a clear error if the process exits
        or the deadline passes, with the end of its log."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if await asyncio.to_thread(ready):
                return
            if process is not None and not process.running:
                raise RuntimeError(
                    f"{what} exited while starting ({process.log_path}):\n{process.log_tail()}"
                )
            if time.monotonic() > deadline:
                tail = process.log_tail() if process is not None else self.log_tail()
                raise RuntimeError(f"{what} not ready after {START_TIMEOUT:.0f}s:\n{tail}")
            await asyncio.sleep(0.1)

    # --- tear-down -------------------------------------------------------------------

    async def stop(self) -> None:
        """Scheduler and controller manager first, then the API server (SIGKILL: its
        graceful drain only delays a test cluster that is going away), then etcd."""
        processes = self._processes
        await asyncio.gather(
            *(processes[n].stop(STOP_GRACE)
              for n in ("kube-scheduler", "kube-controller-manager") if n in processes),
            return_exceptions=True,
        )  # fmt: skip
        if "kube-apiserver" in processes:
            await processes["kube-apiserver"].kill()
        if "etcd" in processes:
            await processes["etcd"].stop(STOP_GRACE)


def _post_json(url: str, body: object) -> dict[str, Any]:
    """POST JSON to etcd's gRPC gateway; its JSON answer."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def _get(url: str, credentials: Credentials | None = None, *, insecure: bool = False) -> str | None:
    """The body of a GET, or None when there is no answer (yet) or not a 200.

    `insecure`: the component's self-signed serving certificate of the moment (its
    health endpoint is all that is read)."""
    if url.startswith("https://"):
        if insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            assert credentials is not None and credentials.ca_file is not None
            context = ssl.create_default_context(cafile=str(credentials.ca_file))
            if credentials.client_cert is not None and credentials.client_key is not None:
                context.load_cert_chain(str(credentials.client_cert), str(credentials.client_key))
    else:
        context = None
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return str(response.read().decode())
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return None
