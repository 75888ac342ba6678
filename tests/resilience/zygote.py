"""A pre-warmed parent that forks `compute-domain-agent plugin` processes on request.

Starting the agent the ordinary way costs an interpreter start plus the imports of grpc,
kubernetes and pydantic (about half a second on a small machine) before the agent does
anything. The kill -9 test restarts the agent hundreds of times, so this process imports
all of that once and then, per request, forks a child that runs the real entry point
`agent.cli.main(["plugin", *args])`. The child is a real, separate process: it binds its
own sockets, opens its own API connections and dies to a real SIGKILL.

Fork safety: the zygote never creates a grpc channel or server, an asyncio loop, an API
client or a thread, so the child inherits no half-initialised gRPC core state and no lock
held by a thread that does not exist after fork. That is checked before every fork (one
thread in /proc/self/task). GRPC_ENABLE_FORK_SUPPORT=0 keeps
grpc from installing its own fork handlers, which are only needed when a process forks
*after* using grpc.

Protocol, one JSON object per line on stdin, one answer per line on stdout:

    {"op": "spawn", "args": [...], "log": "/path"}  ->  {"pid": N}
    {"op": "wait", "pid": N, "timeout": 20}          ->  {"pid": N, "code": int | null}
    {"op": "ping"}                                   ->  {"threads": 1}

`code` is the exit status, -SIG for a signal, null if the child is still running at the
timeout. EOF on stdin ends the zygote.
"""

from __future__ import annotations

import os
import sys
import time

os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "0"

import json
import traceback
from pathlib import Path

import grpc  # noqa: F401  (warm the import, never use it here)
import kubernetes.client.api.core_v1_api
import kubernetes.client.api.custom_objects_api
import kubernetes.client.api.resource_v1_api
import kubernetes.client.models
import pydantic  # noqa: F401

import agent.cli
import agent.plugin.app
import agent.plugin.config
import agent.plugin.driver
import agent.plugin.slices

# The client loads its (pydantic) models lazily, on the first response of each type: load
# them all here once, or every child pays for it on its first API call.
for _name in kubernetes.client.models.__all__:
    getattr(kubernetes.client.models, _name)


def _warm_cdi() -> None:
    """Build, validate and render an All-channels claim spec once (no file is written):
    the first one in a process costs three times the next."""
    import dataclasses

    import cdi
    from agent import cdispecs
    from api import names

    edits = cdispecs.channel_edits(234, range(names.MAX_IMEX_CHANNELS))
    spec = cdispecs.claim_spec("warm-up", [("channel-0", edits)])
    assert spec is not None
    spec = dataclasses.replace(spec, cdi_version=cdi.minimum_version(spec))
    cdi.validate_spec(spec)
    cdi.spec_to_yaml(spec)


_warm_cdi()


def _threads() -> int:
    return sum(1 for _ in Path("/proc/self/task").iterdir())


def _child(args: list[str], log: str) -> None:
    """In the forked child: become the agent. Never returns."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.close(null)
        os.close(err)
        try:
            code = agent.cli.main(["plugin", *args])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _wait(pid: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def main() -> int:
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "ping":
            answer: dict = {"threads": _threads()}
        elif op == "spawn":
            threads = _threads()
            if threads != 1:
                raise RuntimeError(f"zygote has {threads} threads: forking it is unsafe")
            out.flush()
            pid = os.fork()
            if pid == 0:
                _child(request["args"], request["log"])
            answer = {"pid": pid}
        elif op == "wait":
            answer = {"pid": request["pid"], "code": _wait(request["pid"], request["timeout"])}
        else:
            answer = {"error": f"unknown op {op!r}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
