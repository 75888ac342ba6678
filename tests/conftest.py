"""Shared fixtures: a real API emulator on a free port and real clients for it.

Waiting for something in a test: `from eventually import eventually, eventually_async`
(tests/eventually.py, on sys.path next to this file), and `run_virtual` for asyncio code
on a virtual clock. No fixed sleep before an assertion.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import eventually  # noqa: F401  (the one poll-until helper: tests/eventually.py)
import pytest
import yaml
from hypothesis import HealthCheck, settings

from sim.apiserver.runner import ServerThread
from sim.controlplane import CONTROL_PLANES, KUBERNETES
from sim.controlplane.binaries import ComponentsMissingError, available, locate

# Hypothesis' wall-clock checks (a per-example deadline, the too-slow health check) are
# timed assertions: on 2 loaded CI cores they fail tests whose logic is fine. The suite
# judges what the code does, never how fast it draws examples (tests/fuzz has its own).
settings.register_profile("suite", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

REPO = Path(__file__).resolve().parents[1]
CRD_DIR = REPO / "packaging" / "helm" / "dra-driver-nvidia-gpu" / "crds"  # the chart's
HELM = REPO / ".cache" / "bin" / "helm"
# Directories whose every test is in the end-to-end tier (`make e2e`): the differential
# tests against kube-apiserver, and the packaging checks (frozen binary, image, chart).
E2E_DIRS = frozenset({"differential", "packaging"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put in the end-to-end tier (the `e2e` marker, `make e2e`) every test that runs on the
    upstream control plane (a `kubernetes` parameter of `control_plane` or a module's
    plane) or lives in one of E2E_DIRS; the others that need a cluster over 4 nodes or a
    long campaign carry `@pytest.mark.e2e` themselves. `make test` runs the rest."""
    e2e = pytest.mark.e2e
    for item in items:
        params = getattr(item, "callspec", None)
        upstream = params is not None and KUBERNETES in params.params.values()
        parts = item.path.relative_to(REPO / "tests").parts
        if upstream or (len(parts) > 1 and parts[0] in E2E_DIRS):
            item.add_marker(e2e)


@pytest.fixture
def apiserver() -> Iterator[ServerThread]:
    """A fresh emulator per test (starting one takes milliseconds)."""
    thread = ServerThread().start()
    try:
        yield thread
    finally:
        thread.close()


@pytest.fixture
def k8s(apiserver: ServerThread):
    """A real `kubernetes.client.ApiClient` talking HTTP to the emulator."""
    client = apiserver.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def project_crds(k8s) -> list[dict]:
    """The project's CRDs, created through the API as
    `kubectl apply -f packaging/helm/dra-driver-nvidia-gpu/crds` would."""
    from kubernetes import client

    api = client.ApiextensionsV1Api(k8s)
    crds = [yaml.safe_load(p.read_text()) for p in sorted(CRD_DIR.glob("*.yaml"))]
    for crd in crds:
        api.create_custom_resource_definition(crd)
    return crds


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths are limited to 107 bytes: node roots live in short /tmp dirs."""
    path = Path(tempfile.mkdtemp(prefix="cd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=CONTROL_PLANES)
def control_plane(request: pytest.FixtureRequest) -> str:
    """Each end-to-end scenario runs on the emulator and on the upstream control plane;
    the latter is skipped, saying why, where `make k8s` has not built the components."""
    if request.param == KUBERNETES:
        built, why = available()
        if not built:
            pytest.skip(f"kubernetes control plane: {why}")
    return str(request.param)


@pytest.fixture(scope="session")
def kubectl_bin() -> Path:
    """The kubectl of the pinned release (`make k8s`), never one that happens to be on PATH;
    a missing one fails the test with the command that builds it."""
    try:
        return locate().path("kubectl")
    except ComponentsMissingError as err:
        pytest.fail(str(err))


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The Helm CLI of the release `upstream/helm/go.mod` pins (`make helm`), never one that
    happens to be on PATH; a missing one fails the test with the command that builds it."""
    if not os.access(HELM, os.X_OK):
        pytest.fail(
            f"the pinned Helm CLI is not built at {HELM}: run `make helm` in {REPO} "
            "(Go from upstream/helm/go.mod; a cold build takes a few minutes)"
        )
    return HELM


@pytest.fixture
def set_umask() -> Iterator[Callable[[int], int]]:
    """`os.umask` for this test only: the umask is process-wide, so whatever a test sets
    comes back to what it was afterwards."""
    old = os.umask(0o022)
    os.umask(old)
    try:
        yield os.umask
    finally:
        os.umask(old)


@pytest.fixture(autouse=True)
def collect_garbage_here() -> Iterator[None]:
    """Finalize each test's garbage on the main thread, right after the test. A gRPC aio
    channel or server that a test left to the garbage collector, finalized later in some
    other thread (an API emulator's, in the middle of a JSON parse), joins gRPC's poller
    thread while holding gRPC's global aio lock: the next channel created on the main
    thread then waits for that lock forever (seen in CI, in test_diagnose)."""
    yield
    gc.collect()
