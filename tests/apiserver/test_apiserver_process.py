"""The emulator in a process of its own (`sim.apiserver.process`), as the sim's scale mode
runs it: it serves HTTP and HTTPS, answers the sim's operations over its private pipe, and
goes away with that pipe."""

from __future__ import annotations

import secrets
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from kubernetes import client

from sim.apiserver.authn import ADMIN
from sim.apiserver.process import ServerProcess
from sim.controlplane.pki import ClusterPKI


def _get(url: str, token: str | None = None, context: ssl.SSLContext | None = None) -> int:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_the_emulator_process_serves_and_answers_operations(tmp_path: Path) -> None:
    pki = ClusterPKI(tmp_path / "pki")
    serving = pki.apiserver_serving(["127.0.0.1"])
    admin = secrets.token_hex(8)
    server = ServerProcess(
        tmp_path / "apiserver.log",
        adminToken=admin,
        tlsCert=str(serving.cert),
        tlsKey=str(serving.key),
        rootCaPem=pki.ca_pem.decode(),
        resourceVersions=["v1"],
    ).start()
    pid = server.pid
    assert pid is not None
    try:
        # The admin's client over plain HTTP, as in the thread.
        config = client.Configuration()
        config.host = server.url
        with client.ApiClient(config) as api:
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": "team"}})
            ca = core.read_namespaced_config_map("kube-root-ca.crt", "team")
            assert ca.data["ca.crt"] == pki.ca_pem.decode()

        # HTTPS for pods, with the cluster CA's serving certificate.
        tls = ssl.create_default_context(cafile=str(pki.ca.cert))
        secure = f"https://127.0.0.1:{server.tls_port}"
        assert _get(f"{secure}/api/v1/namespaces", admin, tls) == 200

        # A user registered over the pipe is authenticated, and only authorized by RBAC.
        token = secrets.token_hex(8)
        server.op("add_user", token=token, name="tenant", groups=["tenants"])
        assert _get(f"{secure}/api/v1/namespaces", token, tls) == 403
        assert _get(f"{secure}/api/v1/namespaces", "not-registered", tls) == 401

        # Counters, fault knobs and watches, as ServerThread.op answers them.
        users = server.op("users")
        assert users[ADMIN.name]["create"] == 1, users
        assert server.op("requests")["create"] >= 1
        server.op("faults", code=429, rate=1.0)
        assert _get(f"{server.url}/api/v1/namespaces") == 429
        server.op("faults", rate=0.0)
        assert _get(f"{server.url}/api/v1/namespaces") == 200
        assert server.op("close_watches") == 0
        with pytest.raises(RuntimeError, match="unknown emulator operation 'bogus'"):
            server.op("bogus")
        assert server.op("compact")  # the pipe still answers after an error
    finally:
        server.close()
    # The child goes with its pipe.
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(RuntimeError, match="not started"):
        server.op("users")
