"""Controller at scale: 1,000 ComputeDomains created at once.

The real `compute-domain-controller` process against the API emulator (in this process, its
own thread). Reports the time until every ComputeDomain has its workload template, its
daemon template and DaemonSet (driver-managed) and a written status, the API writes the
controller made per ComputeDomain, 409 conflicts, and the controller's RSS.

    python tests/bench/bench_controller.py [--cds N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from results import write_section  # noqa: E402

from api import names  # noqa: E402
from sim.apiserver.runner import ServerThread  # noqa: E402

NS = "dra-driver-nvidia-gpu"
WRITES = ("create", "update", "patch", "delete")


def writes(server: ServerThread) -> int:
    requests = server.call(lambda: dict(server.server.stats.requests))
    return sum(v for k, v in requests.items() if k in WRITES)


def progress(server: ServerThread) -> tuple[int, int, int, int]:
    """(workload templates, daemon templates, DaemonSets, CDs with a status)."""

    def count() -> tuple[int, int, int, int]:
        store = server.server.store
        rcts = store.list(("resource.k8s.io", "resourceclaimtemplates"))
        targets = [
            (o["metadata"].get("labels") or {}).get(names.LABEL_TARGET) for o in rcts
        ]
        cds = store.list((names.GROUP, names.PLURAL_COMPUTE_DOMAINS))
        return (
            targets.count(names.TARGET_WORKLOAD),
            targets.count(names.TARGET_DAEMON),
            store.count(("apps", "daemonsets")),
            sum(1 for cd in cds if (cd.get("status") or {}).get("status")),
        )

    return server.call(count)


def run(args: argparse.Namespace) -> list[tuple[str, str]]:
    root = Path(tempfile.mkdtemp(prefix="cd-bench-", dir="/tmp"))
    server = ServerThread().start()
    api = server.api_client()
    for crd in sorted((REPO / "packaging/helm/dra-driver-nvidia-gpu/crds").glob("*.yaml")):
        client.ApiextensionsV1Api(api).create_custom_resource_definition(
            yaml.safe_load(crd.read_text())
        )
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
    time.sleep(0.5)
    log = (root / "controller.log").open("wb")
    controller = subprocess.Popen(
        [
            Path(sys.executable).parent / "compute-domain-controller",
            "--kubeconfig", server.write_kubeconfig(root / "kc"),
            "--namespace", NS,
            "--image-name", "bench:1",
            "--leader-election-lease-lock-namespace", NS,
            "-v", "1",
        ],
        stdout=log,
        stderr=log,
    )  # fmt: skip
    custom = client.CustomObjectsApi(api)
    try:
        time.sleep(3)  # started, leading, caches synced
        before = writes(server)
        conflicts_before = server.call(lambda: server.server.stats.conflicts)

        def create(i: int) -> None:
            custom.create_namespaced_custom_object(
                names.GROUP, names.VERSION, "default", names.PLURAL_COMPUTE_DOMAINS,
                {"apiVersion": names.API_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
                 "metadata": {"name": f"cd-{i:04d}"},
                 "spec": {"numNodes": 0,
                          "channel": {"resourceClaimTemplate": {"name": f"cd-{i:04d}-ch"}}}},
            )  # fmt: skip

        start = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, range(args.cds)))
        created = time.perf_counter() - start
        want = (args.cds,) * 4
        done_at: dict[int, float] = {}
        while True:
            got = progress(server)
            for i, n in enumerate(got):
                if n >= args.cds and i not in done_at:
                    done_at[i] = time.perf_counter() - start
            if got == want or time.perf_counter() - start > args.timeout:
                break
            time.sleep(0.1)
        time.sleep(2)  # let any trailing writes land before counting
        total = writes(server) - before - args.cds
        conflicts = server.call(lambda: server.server.stats.conflicts) - conflicts_before
        rss = psutil.Process(controller.pid).memory_info().rss / 2**20
    finally:
        controller.terminate()
        controller.wait(30)
        api.close()
        server.close()

    def when(i: int) -> str:
        return f"{done_at[i]:.1f} s" if i in done_at else f"not within {args.timeout:.0f} s"

    return [
        ("ComputeDomains created (16 clients)", f"{args.cds} in {created:.1f} s"),
        ("all workload ResourceClaimTemplates exist", when(0)),
        ("all daemon ResourceClaimTemplates exist", when(1)),
        ("all DaemonSets exist", when(2)),
        ("all statuses written", when(3)),
        ("controller API writes per ComputeDomain", f"{total / args.cds:.2f}"),
        ("409 conflicts", str(conflicts)),
        ("controller RSS at the end", f"{rss:.0f} MiB"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cds", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    print(write_section("Controller: 1,000 ComputeDomains at once", run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
