"""The simulated kubelet's API answering exec in SPDY/3.1, as kube-apiserver asks for it
(sim/cluster/kubeletspdy.py), without a cluster: a real KubeletServer on a real socket and
the wire-format client of test_cri_streaming. kubectl through kube-apiserver:
tests/sim/test_kubelet_exec_spdy.py."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import cast
from urllib.parse import urlencode

from test_cri_streaming import V4, Client, dictionary  # noqa: F401  (the fixture)

from sim.cluster.kubeletapi import KubeletServer, PodLogs
from sim.cluster.processes import free_port


async def _exec_in(container: str, argv: Sequence[str], stdin: bool) -> asyncio.subprocess.Process:
    pipe = asyncio.subprocess.PIPE
    return await asyncio.create_subprocess_exec(
        *argv, stdin=pipe if stdin else asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe,
        start_new_session=True)


async def _server(tmp: Path) -> KubeletServer:
    pod = PodLogs(["c"], tmp, lambda: True, _exec_in)
    lookup = lambda ns, name: pod if (ns, name) == ("default", "p") else None  # noqa: E731
    # No TLS here: kube-apiserver's TLS is tests/sim/test_kubelet_exec_spdy.py's business.
    server = KubeletServer("127.0.0.1", free_port("127.0.0.1"), cast(ssl.SSLContext, None), lookup)
    await server.start()
    return server


def _url(server: KubeletServer, argv: list[str], **flags: str) -> str:
    query = urlencode([("command", a) for a in argv] + list(flags.items()))
    return f"http://127.0.0.1:{server.port}/exec/default/p/c?{query}"


async def _run(client: Client, stdin: bytes | None = None) -> dict[str, int]:
    ids = {"error": client.open(streamType="error")}
    if stdin is not None:
        ids["stdin"] = client.open(streamType="stdin")
    ids["stdout"] = client.open(streamType="stdout")
    ids["stderr"] = client.open(streamType="stderr")
    await client.until(lambda: set(ids.values()) <= client.replied)
    if stdin is not None:
        client.send(ids["stdin"], stdin, fin=True)
    await client.to_end()
    return ids


def test_exec_as_kube_apiserver_asks_output_exit_code_stdin(dictionary: bytes,  # noqa: F811
                                                            tmp_path: Path) -> None:
    async def main() -> None:
        server = await _server(tmp_path)
        try:
            url = _url(server, ["sh", "-c", "echo out; echo err >&2; exit 3"],
                       output="1", error="1")
            client = await Client.connect(url, dictionary, ("v5.channel.k8s.io", V4))
            assert client.status == 101, client.response
            assert f"X-Stream-Protocol-Version: {V4}".encode() in client.response
            ids = await _run(client)
            assert bytes(client.data[ids["stdout"]]) == b"out\n"
            assert bytes(client.data[ids["stderr"]]) == b"err\n"
            status = json.loads(client.data[ids["error"]])
            assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]

            url = _url(server, ["cat"], input="1", output="1", error="1")
            client = await Client.connect(url, dictionary, (V4,))
            ids = await _run(client, stdin=b"via stdin\n")
            assert bytes(client.data[ids["stdout"]]) == b"via stdin\n"
            assert json.loads(client.data[ids["error"]]) == {"status": "Success"}

            # Refusals come before the upgrade, with kubelet's words and status.
            client = await Client.connect(_url(server, ["true"], output="1", error="1"),
                                          dictionary, ("v9.channel.k8s.io",))
            assert client.status == 403
            assert client.response.count(b"X-Accepted-Stream-Protocol-Versions: ") == 4
            assert b"unable to negotiate protocol" in await client.reader.read(4096)
            client = await Client.connect(_url(server, ["true"], tty="1"), dictionary, (V4,))
            assert client.status == 400
            assert b"a TTY is not supported" in await client.reader.read(4096)
        finally:
            await server.stop()

    asyncio.run(main())
