"""Agents forked from a pre-warmed zygote (`zygote.py`): a real process per start, for
the cost of a fork instead of an interpreter start and the imports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from plugin_env import NodeEnv, answering

REPO = Path(__file__).resolve().parents[2]


class Zygote:
    """The zygote process; `spawn` forks an agent from it."""

    def __init__(self) -> None:
        env = dict(os.environ, GRPC_ENABLE_FORK_SUPPORT="0", PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("zygote.py"))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO,
        )
        assert self.ask({"op": "ping"}) == {"threads": 1}

    def ask(self, request: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"zygote died with {self.proc.wait(10)}")
        return json.loads(line)

    def spawn(self, env: NodeEnv, kubeconfig: Path, *extra: str) -> ForkedAgent:
        return ForkedAgent(self, env, [*env.args(kubeconfig), *extra])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(10)


class ForkedAgent:
    """One `compute-domain-agent plugin` child of the zygote, started and answering."""

    def __init__(self, zygote: Zygote, env: NodeEnv, args: list[str]) -> None:
        self.zygote = zygote
        self.log = env.root / "agent.log"
        self.pid = zygote.ask({"op": "spawn", "args": args, "log": str(self.log)})["pid"]
        self.code: int | None = None
        # A killed agent leaves its socket files behind: wait until this one answers.
        answering(env, self.poll, self.log, timeout=60, interval=0.01)

    def poll(self, timeout: float = 0) -> int | None:
        if self.code is None:
            self.code = self.zygote.ask({"op": "wait", "pid": self.pid, "timeout": timeout})["code"]
        return self.code

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        assert self.poll(10) == -signal.SIGKILL

    def terminate(self, timeout: float = 20) -> int:
        os.kill(self.pid, signal.SIGTERM)
        code = self.poll(timeout)
        assert code is not None, "agent did not stop on SIGTERM"
        return code
