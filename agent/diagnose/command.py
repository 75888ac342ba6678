"""`compute-domain-agent diagnose NAMESPACE/NAME`: one read of the cluster, the seven
boundaries in order, the report (the flags are in `agent/diagnose/flags.py`). Exit
status: 0 every boundary ok, 1 a stable failure, 3 only an expected bootstrap delay so
far, 2 bad arguments or no API server."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TextIO

from agent.diagnose import cluster_checks, node_checks
from agent.diagnose.facts import Facts, cd_path, gather
from agent.diagnose.flags import DEFAULT_GRACE_S
from agent.diagnose.reader import Reader, ReadError
from agent.diagnose.report import BROKEN, EXIT_USAGE, SKIPPED, Boundary, Report
from api import names


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None,
        now: datetime | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    namespace, sep, name = str(args.domain).partition("/")
    if not sep or not namespace or not name or "/" in name:
        print(f"diagnose: {args.domain!r} is not NAMESPACE/NAME (example: default/my-domain)",
              file=err)
        return EXIT_USAGE
    from runtime import kubecall

    try:
        api = kubecall.api_client(args.kubeconfig)
    except Exception as error:  # a bad kubeconfig, or not in a cluster
        print(f"diagnose: cannot load the cluster configuration: {error}", file=err)
        return EXIT_USAGE
    try:
        report = diagnose(Reader(api), namespace, name, args.driver_namespace,
                          grace=args.grace, mode=args.mode, placement=args.placement,
                          sim_root=args.sim_root, now=now)
    except ReadError as error:
        print(f"diagnose: {error}", file=err)
        return EXIT_USAGE
    finally:
        api.close()
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=False), file=out)
    else:
        print(report.render(), end="", file=out)
    return report.exit_status


def diagnose(reader: Reader, namespace: str, name: str, driver_namespace: str, *,
             grace: float = DEFAULT_GRACE_S, mode: str = "", placement: str = "",
             sim_root: Path | None = None, now: datetime | None = None) -> Report:
    facts = gather(reader, namespace, name, driver_namespace, now, mode, placement)
    return evaluate(facts, grace, sim_root)


def evaluate(facts: Facts, grace: float, sim_root: Path | None = None) -> Report:
    """The seven boundaries over one read of the cluster."""
    boundaries = [cluster_checks.installation(facts, grace)]
    if facts.cd is None:
        missing = Boundary("reconciliation", "controller reconciliation")
        refused = facts.unreadable(cd_path(facts.namespace, facts.name))
        if refused:  # "could not look" must not read as "not there"
            missing.fail(BROKEN, f"cannot read ComputeDomain {facts.namespace}/{facts.name}: "
                         f"{refused}", f"kubectl auth can-i get computedomains.{names.GROUP} "
                         f"-n {facts.namespace} (diagnose needs get and list on what it reads)")
        else:
            missing.fail(BROKEN, f"ComputeDomain {facts.namespace}/{facts.name} does not "
                         "exist", "kubectl get computedomains -A")
        boundaries.append(missing)
    else:
        live = [
            cluster_checks.publication(facts, grace),
            cluster_checks.reconciliation(facts, grace),
            cluster_checks.allocation(facts, grace),
            node_checks.bootstrap(facts, grace),
            node_checks.injection(facts, grace, sim_root),
        ]
        if ((facts.cd or {}).get("metadata") or {}).get("deletionTimestamp"):
            for boundary in live:  # being torn down on purpose: only cleanup matters now
                boundary.status, boundary.cause, boundary.next = SKIPPED, "", ""
                boundary.evidence.insert(0, "the ComputeDomain is being deleted")
        boundaries += [*live, node_checks.cleanup(facts, grace)]
    status = ((facts.cd or {}).get("status") or {}).get("status")
    domain = {"namespace": facts.namespace, "name": facts.name, "uid": facts.uid or None,
              "mode": facts.mode, "placement": _placement(facts), "status": status,
              "ageSeconds": round(facts.age(facts.cd), 1),
              "deleting": bool(((facts.cd or {}).get("metadata") or {}).get("deletionTimestamp")),
              "nodes": cluster_checks.target_nodes(facts)}
    return Report(domain, boundaries, unreadable=dict(facts.errors))


def _placement(facts: Facts) -> str | None:
    """The IMEX placement of the report (None for host-managed, where it means nothing)."""
    return None if facts.host_managed else facts.placement
