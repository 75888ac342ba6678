"""An informer whose watch times out resumes from the last resourceVersion it saw instead
of listing the whole collection again; it lists again only when that version is gone
(410). At scale every component's re-list every 30 s, in step, was a storm of full LISTs."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from eventually import eventually_async
from kubernetes import client

from runtime import informer
from runtime.informer import Informer
from sim.apiserver.runner import ServerThread

USER = ""  # the fixture's client sends no credentials


def _requests(server: ServerThread) -> dict[str, int]:
    with urllib.request.urlopen(f"{server.url}/_sim/stats") as response:
        return json.loads(response.read())["byUser"].get(USER, {})


def _post(server: ServerThread, action: str) -> None:
    request = urllib.request.Request(f"{server.url}/_sim/{action}", data=b"{}", method="POST")
    with urllib.request.urlopen(request):
        pass


def test_a_timed_out_watch_resumes_and_only_410_lists_again(
        apiserver: ServerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informer, "WATCH_TIMEOUT_S", 1)  # the server ends each watch after 1 s
    api = apiserver.api_client()
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", {"metadata": {"name": "first"}})

    async def scenario() -> None:
        informer = Informer(asyncio.get_running_loop(), core.list_namespaced_config_map,
                            lambda o: o["metadata"]["name"], "configmaps",
                            {"namespace": "default"}, to_dict=api.sanitize_for_serialization)
        informer.start()
        try:
            async with asyncio.timeout(20):
                await informer.synced.wait()
            await eventually_async(lambda: _requests(apiserver).get("watch", 0) >= 4,
                                   "three watches timed out", timeout=20, interval=0.2)
            assert _requests(apiserver).get("list") == 1
            # An object written after several resumed watches still arrives.
            await asyncio.to_thread(core.create_namespaced_config_map, "default",
                                    {"metadata": {"name": "later"}})
            assert await informer.wait_for(lambda: "later" in informer.items, 10)
            assert {"first", "later"} <= set(informer.items)
            assert _requests(apiserver).get("list") == 1
            # From the next watch on, no timeout (nor its bookmark) comes during the rest.
            monkeypatch.setattr("runtime.informer.WATCH_TIMEOUT_S", 600)  # the module
            watches = _requests(apiserver).get("watch", 0)
            await eventually_async(lambda: _requests(apiserver).get("watch", 0) > watches,
                                   "the next watch", timeout=20, interval=0.2)
            # Writes the informer does not see (another namespace) move the server past its
            # last version; that history compacted away and the watch cut: 410 on resume,
            # so one new list.
            await asyncio.to_thread(core.create_namespace, {"metadata": {"name": "other"}})
            await asyncio.to_thread(core.create_namespaced_config_map, "other",
                                    {"metadata": {"name": "unseen"}})
            await asyncio.to_thread(_post, apiserver, "compact")
            await asyncio.to_thread(_post, apiserver, "close-watches")
            await asyncio.to_thread(core.delete_namespaced_config_map, "first", "default")
            assert await informer.wait_for(lambda: "first" not in informer.items, 10)
            assert _requests(apiserver).get("list") == 2
        finally:
            informer.stop()

    asyncio.run(scenario())
