"""The emulator in a process of its own, for the sim's scale mode.

At 18 in-process nodes the emulator's thread already takes about a third of the sim's CPU
under the one GIL it shares with every agent, kubelet and informer (measured for issue 18:
6.1 of 16 CPU-seconds), so API answers wait on the sim's load. In its own process it has
a core of its own. The parent starts `python -m sim.apiserver.process` with a JSON
configuration on stdin (its TLS pair, the admin token, the cluster's CA and the kubelet
client certificate, the resource.k8s.io versions), reads one line back with its URLs,
then drives the `/_sim`-style operations of `sim.apiserver.control.operate` over the same
private pipe: the child's stdin and stdout are not reachable from any pod, unlike its
HTTP listener. The child exits when that pipe closes, so it never outlives the sim.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any, Final

from sim.apiserver.control import operate

_READY_TIMEOUT_S: Final = 60.0


class ServerProcess:
    """The parent's side: `start()`, `op(name, **args)` (thread-safe, blocking) and
    `close()`, with the `url` and `tls_port` the child serves on."""

    def __init__(self, log_path: Path, **config: Any) -> None:
        self.log_path = Path(log_path)
        self.config = config
        self.url = ""
        self.tls_port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "sim.apiserver.process"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # a Ctrl-C of the sim reaches it through the pipe
            )
        ready = self._exchange(self.config, timeout=_READY_TIMEOUT_S)
        self.url, self.tls_port = str(ready["url"]), int(ready["tlsPort"])
        return self

    def op(self, operation: str, /, **args: Any) -> Any:
        """Run `sim.apiserver.control.operate(operation, args)` in the child; its result."""
        reply = self._exchange({"op": operation, "args": args}, timeout=30.0)
        if "error" in reply:
            raise RuntimeError(f"emulator {operation}: {reply['error']}")
        return reply.get("result")

    def _exchange(self, message: Any, timeout: float) -> dict[str, Any]:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise RuntimeError("the emulator process is not started")
        with self._lock:
            timer = threading.Timer(timeout, proc.kill)  # a hung child must not hang us
            timer.start()
            try:
                proc.stdin.write(json.dumps(message).encode() + b"\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except BrokenPipeError:
                line = b""
            finally:
                timer.cancel()
        if not line:
            raise RuntimeError(f"the emulator process exited; see {self.log_path}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()  # the child's signal to stop
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# --------------------------------------------------------------------------------------
# The child


async def _serve(config: dict[str, Any], commands: IO[bytes], replies: IO[bytes]) -> None:
    from sim.apiserver.authn import ADMIN, TokenAuthenticator
    from sim.apiserver.server import ApiServer

    auth = TokenAuthenticator(anonymous=ADMIN)
    auth.add_admin(str(config["adminToken"]))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(str(config["tlsCert"]), str(config["tlsKey"]))
    kubelet = config.get("kubeletClient")
    server = ApiServer(
        authenticator=auth,
        root_ca_pem=str(config.get("rootCaPem", "")),
        kubelet_client=tuple(kubelet) if kubelet else None,  # type: ignore[arg-type]
        resource_versions=tuple(config.get("resourceVersions", ("v1",))),
    )
    await server.start(tls=tls)

    def reply(message: Any) -> None:
        replies.write(json.dumps(message).encode() + b"\n")
        replies.flush()

    reply({"url": server.url, "tlsPort": server.tls_port})
    try:
        while line := await asyncio.to_thread(commands.readline):
            request = json.loads(line)
            try:
                result = operate(server, request["op"], request.get("args") or {})
            except Exception as err:  # a bad operation is the caller's error, not ours
                reply({"error": f"{type(err).__name__}: {err}"})
            else:
                reply({"result": result})
    finally:
        await server.stop()


def main() -> int:
    """`python -m sim.apiserver.process`: the configuration line, then operations."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    commands, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply pipe
    first = commands.readline()
    if not first:
        return 0
    config = json.loads(first)

    async def run() -> None:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await _serve(config, commands, replies)

    asyncio.run(run())
    os._exit(0)  # the reader thread may still block on the closed pipe's readline


if __name__ == "__main__":
    sys.exit(main())
