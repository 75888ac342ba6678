"""Command line of `compute-domain-sim`: the simulated cluster."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from runtime.cli import Subcommands, run_program
from sim.cluster.node import MAX_NODES
from sim.controlplane import CONTROL_PLANES, EMULATOR, KUBERNETES

PROG = "compute-domain-sim"


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: give a number 0-65535") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {port}: give a number 0-65535")
    return port


def add_commands(sub: Subcommands) -> None:
    api = sub.add_parser(
        "apiserver",
        help="run the Kubernetes API emulator stand-alone",
        description="Serve the Kubernetes API emulator on 127.0.0.1 until SIGTERM/SIGINT.",
    )
    api.add_argument(
        "--port",
        type=_port,
        default=0,
        help="TCP port on 127.0.0.1 (default: a free port, printed at start)",
    )
    api.add_argument(
        "--kubeconfig-out",
        type=Path,
        help="write a kubeconfig for kubectl and clients to this path",
    )
    api.add_argument(
        "--state-file",
        type=Path,
        help="load objects from this file at start and save them as they change",
    )
    api.add_argument(
        "--history-window",
        type=int,
        default=10_000,
        help="events kept for watch resumption; older resourceVersions get 410",
    )
    api.set_defaults(handler=_run_apiserver)

    demo = sub.add_parser(
        "demo",
        help="run the whole driver end to end on a simulated cluster, then clean up",
        description=(
            "Bring a simulated cluster up, apply a ComputeDomain and its workloads (the "
            "built-in example or --workload FILE), wait until every workload container sees "
            "its IMEX channel, print the evidence chain, delete everything and check that "
            "nothing is left. Exits 0 on success, 1 naming the failed step."
        ),
    )
    _cluster_flags(demo)
    demo.add_argument(
        "--workload",
        type=Path,
        metavar="FILE",
        help="YAML with ComputeDomains, Pods and Jobs instead of the example",
    )
    demo.add_argument("--json", action="store_true", help="print one JSON document")
    demo.add_argument(
        "--timeout",
        type=_seconds,
        default=300.0,
        help="seconds to wait for the workloads to see their channels (300)",
    )
    demo.set_defaults(handler=_run_demo)

    up = sub.add_parser(
        "up",
        help="bring a simulated cluster up and keep it running for kubectl",
        description="Start the simulated cluster, write a kubeconfig and serve until Ctrl-C.",
    )
    _cluster_flags(up)
    up.add_argument(
        "--kubeconfig-out",
        type=Path,
        default=Path("sim-kubeconfig"),
        help="where to write the admin kubeconfig (default ./sim-kubeconfig)",
    )
    up.add_argument(
        "--no-driver",
        action="store_true",
        help="bring up the nodes and the control plane only, for an admin to install the "
        "driver (e.g. with the Helm chart, packaging/helm/dra-driver-nvidia-gpu)",
    )
    up.add_argument(
        "--slice-wipe-delay",
        type=_non_negative_seconds,
        default=None,
        metavar="SECONDS",
        help="how long after a node's plugin deregistered its kubelet deletes the node's "
        "ResourceSlices (default 30, as the kubelet)",
    )
    up.set_defaults(handler=_run_up)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _number_of_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"invalid number of seconds {text!r}")
    return value


def _seconds(text: str) -> float:
    value = _number_of_seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be more than 0")
    return value


def _non_negative_seconds(text: str) -> float:
    value = _number_of_seconds(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must not be negative")
    return value


def _resource_versions(text: str) -> tuple[str, ...]:
    from api.draconvert import check_version

    try:
        versions = tuple(check_version(v.strip()) for v in text.split(",") if v.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if not versions:
        raise argparse.ArgumentTypeError("name at least one version (e.g. v1beta1)")
    return versions


def _cluster_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=_positive, default=4, help="fabric nodes (default 4)")
    parser.add_argument(
        "--cliques",
        type=_positive,
        default=None,
        help="NVLink cliques the nodes are split over (default: 18 nodes each)",
    )
    parser.add_argument(
        "--mode",
        choices=("driverManaged", "hostManaged"),
        default="driverManaged",
        help="IMEX mode (default driverManaged)",
    )
    parser.add_argument(
        "--imex-placement",
        choices=("pod", "agent"),
        default="pod",
        help="driverManaged: where nvidia-imex runs, in a daemon pod per ComputeDomain and "
        "node (pod, the default) or in the node agent itself (agent)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="directory for the nodes' files and logs (default: a new /tmp dir)",
    )
    parser.add_argument(
        "--control-plane",
        choices=CONTROL_PLANES,
        default=EMULATOR,
        help="the API emulator with the sim's scheduler and controllers (emulator, the "
        "default), or upstream etcd, kube-apiserver, kube-controller-manager and "
        "kube-scheduler (kubernetes; build them first with `make k8s`)",
    )
    parser.add_argument(
        "--kubelet",
        choices=("sim", "upstream"),
        default="sim",
        help="who runs the nodes' pods: the simulated kubelet (sim, the default; it scales "
        "to hundreds of nodes), or the upstream kubelet of the pinned release on the sim's "
        "CRI runtime (upstream: needs --control-plane kubernetes, at most 8 nodes; the "
        "driver is installed with its Helm chart; build both with `make k8s helm`)",
    )
    parser.add_argument(
        "--resource-api",
        type=_resource_versions,
        default=("v1",),
        metavar="VERSIONS",
        help="resource.k8s.io versions served, comma-separated: v1 (the default), v1beta1 as "
        "Kubernetes 1.32, v1beta1,v1beta2 as 1.33 (emulator); with --control-plane "
        "kubernetes, v1 plus the betas to enable (e.g. v1,v1beta1)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the agents, IMEX daemons and fake IMEX as tasks in this process (scale)",
    )
    parser.add_argument(
        "--sim-workers",
        type=_positive,
        default=None,
        metavar="N",
        help="with --in-process: share the nodes out over N worker processes, each running "
        "its nodes' kubelets, agents, IMEX daemons and fake IMEX (default: one per core, "
        f"here {_cores()}; 1 runs every node in this process; at most one per node is used)",
    )
    parser.add_argument(
        "--agent",
        type=Path,
        default=None,
        metavar="PROGRAM",
        help="node agent program (default: this install's compute-domain-agent)",
    )


def _cores() -> int:
    return os.cpu_count() or 1


def sim_workers(args: argparse.Namespace) -> int:
    """--sim-workers, or its default: one worker per core in-process, else none (1)."""
    if args.sim_workers is not None:
        return int(args.sim_workers)
    return _cores() if args.in_process else 1


def _cluster_error(args: argparse.Namespace) -> str | None:
    if args.cliques is not None and args.cliques > args.nodes:
        return f"--cliques {args.cliques} is more than --nodes {args.nodes}"
    if args.nodes > MAX_NODES:
        return f"--nodes {args.nodes}: at most {MAX_NODES} (one 127.A.B.N address each)"
    if args.imex_placement == "agent" and args.mode == "hostManaged":
        return "--imex-placement agent: with --mode hostManaged the hosts run nvidia-imex"
    if args.in_process and args.agent is not None:
        return "--agent runs a program per node; it cannot be combined with --in-process"
    if args.sim_workers is not None and args.sim_workers > 1 and not args.in_process:
        return ("--sim-workers shares in-process nodes out over processes: add --in-process "
                "(without it every agent and daemon is a process already)")
    if args.agent is not None and not args.agent.is_file():
        return f"--agent {args.agent}: no such file"
    if args.control_plane == KUBERNETES and "v1" not in args.resource_api:
        return ("--resource-api: kube-apiserver serves v1 for its scheduler; name it too "
                "(e.g. v1,v1beta1)")
    if args.kubelet == "upstream" and (error := _upstream_kubelet_error(args)):
        return error
    if args.control_plane == KUBERNETES:
        from sim.controlplane.binaries import available

        built, why = available()
        if not built:
            return f"--control-plane kubernetes: {why}"
    return None


def _upstream_kubelet_error(args: argparse.Namespace) -> str | None:
    from sim.cluster.cluster import MAX_UPSTREAM_NODES
    from sim.cluster.upstreamkubelet import HELM

    if args.control_plane != KUBERNETES:
        return "--kubelet upstream needs --control-plane kubernetes (the real API server)"
    if args.in_process:
        return "--kubelet upstream runs the agents as its pods; drop --in-process"
    if args.agent is not None:
        return "--kubelet upstream runs the agent from the chart's image; drop --agent"
    if args.nodes > MAX_UPSTREAM_NODES:
        return (f"--nodes {args.nodes}: at most {MAX_UPSTREAM_NODES} with --kubelet upstream "
                "(a real kubelet each); the simulated kubelet scales further")
    if not HELM.is_file():
        return f"--kubelet upstream installs the driver with helm: run `make helm` ({HELM})"
    return None


def _run_demo(args: argparse.Namespace) -> int:
    from sim.cluster.demo import DemoOptions, render_json, render_text, run_demo

    if error := _cluster_error(args):
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    opts = DemoOptions(
        nodes=args.nodes,
        cliques=args.cliques,
        mode=args.mode,
        imex_placement=args.imex_placement,
        workload=args.workload,
        root=args.root,
        timeout=args.timeout,
        agent_program=args.agent,
        in_process=args.in_process,
        control_plane=args.control_plane,
        resource_versions=args.resource_api,
        kubelet=args.kubelet,
        sim_workers=sim_workers(args),
    )
    if args.workload is not None:
        from sim.cluster.example import load

        try:
            load(args.workload)
        except ValueError as err:
            print(f"{PROG}: {err}", file=sys.stderr)
            return 2
    result = asyncio.run(run_demo(opts, progress=None if args.json else sys.stdout))
    print(render_json(result) if args.json else render_text(result), flush=True)
    return 0 if result.ok else 1


_INSTALL_HINT = (
    "  the driver is not installed (--no-driver); install it with\n"
    "  helm upgrade --install dra-driver-nvidia-gpu packaging/helm/dra-driver-nvidia-gpu"
    " --kubeconfig {kubeconfig} --namespace dra-driver-nvidia-gpu --create-namespace --wait\n"
)


def _run_up(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from sim.cluster.cluster import ClusterSpec, new_cluster
    from sim.progress import Progress

    if error := _cluster_error(args):
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    root = args.root or Path(tempfile.mkdtemp(prefix="cd-sim-", dir="/tmp"))
    kwargs = {
        "root": root,
        "nodes": args.nodes,
        "cliques": args.cliques,
        "mode": args.mode,
        "imex_placement": args.imex_placement,
        "in_process": args.in_process,
        "control_plane": args.control_plane,
        "driver": not args.no_driver,
        "resource_versions": args.resource_api,
        "kubelet": args.kubelet,
        "sim_workers": sim_workers(args),
    }
    if args.agent is not None:
        kwargs["agent_program"] = args.agent
    if args.slice_wipe_delay is not None:
        kwargs["slice_wipe_delay"] = args.slice_wipe_delay

    async def serve() -> None:
        cluster = new_cluster(ClusterSpec(**kwargs))
        cluster.on_progress = Progress("cluster start").update
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await cluster.start()
            shutil.copy(cluster.kubeconfigs["admin"], args.kubeconfig_out)
            args.kubeconfig_out.chmod(0o600)
            print(
                f"simulated cluster up: {len(cluster.nodes)} nodes, API {cluster.url}"
                f" ({cluster.spec.control_plane} {cluster.server_version()})\n"
                f"  kubectl --kubeconfig {args.kubeconfig_out} get nodes\n"
                f"  node files and logs: {root}\n"
                + (_INSTALL_HINT.format(kubeconfig=args.kubeconfig_out) if args.no_driver else "")
                + "Ctrl-C stops it.",
                flush=True,
            )
            await stop.wait()
        finally:
            await cluster.stop()

    asyncio.run(serve())
    return 0


def _run_apiserver(args: argparse.Namespace) -> int:
    from sim.apiserver.kubeconfig import write_kubeconfig
    from sim.apiserver.server import ApiServer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.state_file is not None and args.state_file.is_dir():
        print(
            f"{PROG}: --state-file {args.state_file} is a directory; give a file path",
            file=sys.stderr,
        )
        return 2
    if args.history_window < 1:
        print(f"{PROG}: --history-window must be at least 1", file=sys.stderr)
        return 2

    async def serve() -> None:
        server = ApiServer(history_window=args.history_window, state_file=args.state_file)
        try:
            await server.start(port=args.port)
        except OSError as err:
            raise SystemExit(
                f"{PROG}: cannot listen on 127.0.0.1:{args.port}: {err.strerror}"
            ) from None
        if args.kubeconfig_out is not None:
            write_kubeconfig(args.kubeconfig_out, server.url)
        print(f"serving the Kubernetes API on {server.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_program(PROG, __doc__, argv, add_commands)


if __name__ == "__main__":
    sys.exit(main())
