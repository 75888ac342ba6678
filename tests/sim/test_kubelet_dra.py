"""The simulated kubelet's DRA half against the real agent over its real unix sockets."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc.aio
import pytest
from eventually import eventually_async
from plugin_env import NODE, AgentThread, NodeEnv

from api import names
from api.kubelet.pluginregistration import api_pb2 as reg
from api.kubelet.pluginregistration import api_pb2_grpc as reg_grpc
from sim.cluster import dra
from sim.cluster.containerview import container_view
from sim.cluster.dra import (
    V1,
    ClaimRef,
    DraClient,
    DraError,
    PluginWatcher,
    RegisteredPlugin,
)


class Agent:
    """The real agent in a thread; `stop` may be called early, once."""

    def __init__(self, env: NodeEnv, kubeconfig: Path) -> None:
        self.env = env
        self.thread: AgentThread | None = AgentThread(env.config(kubeconfig))

    def stop(self) -> None:
        if self.thread is not None:
            thread, self.thread = self.thread, None
            thread.close()


@pytest.fixture
def start_agent(apiserver, cluster, short_dir, tmp_path) -> Iterator[Callable[..., Agent]]:
    started: list[Agent] = []

    def start(*extra: str) -> Agent:
        env = NodeEnv(short_dir / f"n{len(started)}", extra_args=list(extra))
        agent = Agent(env, apiserver.write_kubeconfig(tmp_path / f"kc{len(started)}"))
        started.append(agent)
        return agent

    try:
        yield start
    finally:
        for agent in started:
            agent.stop()


async def registered(env: NodeEnv) -> RegisteredPlugin:
    async with PluginWatcher(env.root / "registry", poll=0.05) as watcher:
        return await watcher.wait_registered(names.DRIVER_NAME, timeout=10)


def test_watcher_registers_v1_and_deregisters_when_the_agent_stops(start_agent):
    agent = start_agent()

    async def main() -> None:
        async with PluginWatcher(agent.env.root / "registry", poll=0.05) as watcher:
            plugin = await watcher.wait_registered(names.DRIVER_NAME, timeout=10)
            assert plugin.version == V1
            assert plugin.endpoint == agent.env.dra_socket
            assert plugin.socket == agent.env.registration_socket
            assert watcher.refused == {}
            await asyncio.to_thread(agent.stop)
            await watcher.wait_deregistered(names.DRIVER_NAME, timeout=5)
            assert watcher.plugins == {}

    asyncio.run(main())


def test_a_quiet_watcher_sees_an_agent_that_starts_and_restarts_later(
    start_agent, apiserver, tmp_path, monkeypatch
):
    """The watcher skips its looks while the directory is unchanged and settled: an
    agent that starts (or starts again on the same sockets) after a quiet while is still
    registered, as kubelet's fsnotify watcher would see it."""
    monkeypatch.setattr(dra, "SETTLED_NS", 50_000_000)
    first = start_agent()
    env = first.env
    first.stop()

    async def main() -> None:
        async with PluginWatcher(env.root / "registry", poll=0.02) as watcher:
            await asyncio.sleep(0.3)  # quiet: nothing changes, looks are skipped
            assert watcher.plugins == {}
            for round_ in range(2):
                kubeconfig = apiserver.write_kubeconfig(tmp_path / f"again{round_}")
                agent = await asyncio.to_thread(Agent, env, kubeconfig)
                try:
                    await watcher.wait_registered(names.DRIVER_NAME, timeout=10)
                finally:
                    await asyncio.to_thread(agent.stop)
                await watcher.wait_deregistered(names.DRIVER_NAME, timeout=5)
                await asyncio.sleep(0.3)

    asyncio.run(main())


class FakeRegistration(reg_grpc.RegistrationServicer):
    """A plugin registration server that answers what the test tells it to."""

    def __init__(self, info: reg.PluginInfo) -> None:
        self.info = info
        self.statuses: list[reg.RegistrationStatus] = []

    async def GetInfo(self, request, context):
        return self.info

    async def NotifyRegistrationStatus(self, request, context):
        self.statuses.append(request)
        return reg.RegistrationStatusResponse()


def test_registration_with_a_bad_endpoint_is_refused(short_dir):
    registry = short_dir / "registry"
    registry.mkdir()
    socket = registry / "bad-reg.sock"
    fake = FakeRegistration(
        reg.PluginInfo(
            type="DRAPlugin",
            name="bad.example.com",
            endpoint=str(short_dir / "nowhere" / "dra.sock"),
            supported_versions=[V1],
        )
    )

    async def main() -> None:
        server = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(fake, server)
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        try:
            async with PluginWatcher(registry, poll=0.05) as watcher:
                reason = await watcher.wait_refused(socket, timeout=5)
                assert "does not exist" in reason
                assert watcher.plugins == {}
                # Refused once, not asked again on every poll.
                scans: list[None] = []
                real_scan = watcher.scan

                async def scan() -> None:
                    await real_scan()
                    scans.append(None)

                watcher.scan = scan  # type: ignore[method-assign]
                await eventually_async(lambda: len(scans) >= 3, "three more polls")
        finally:
            await server.stop(None)
        assert len(fake.statuses) == 1
        assert not fake.statuses[0].plugin_registered
        assert "nowhere/dra.sock does not exist" in fake.statuses[0].error

    asyncio.run(main())


def test_prepare_daemon_claim_and_container_view(start_agent, cluster):
    agent = start_agent()
    env = agent.env
    cd = cluster.compute_domain("cd1")
    cd_uid = cd["metadata"]["uid"]
    ref = ClaimRef.of(cluster.daemon_claim("daemon", cd_uid))

    async def main() -> None:
        plugin = await registered(env)
        client = DraClient()
        prepared = await client.prepare(plugin, [ref])
        assert list(prepared) == [ref.uid]
        claim = prepared[ref.uid]
        assert claim.claim == ref
        assert [(d.request_names, d.pool, d.device) for d in claim.devices] == [
            (("daemon",), NODE, "daemon-0")
        ]
        ids = claim.cdi_ids("daemon")
        assert ids == [
            "k8s.compute-domain.nvidia.com/device=all",
            f"k8s.compute-domain.nvidia.com/claim={ref.uid}-daemon-0",
        ]
        assert claim.cdi_ids("other") == []
        view = container_view(ids, [env.root / "cdi"])
        assert view.env["CLIQUE_ID"] == env.clique_id
        assert view.env["COMPUTE_DOMAIN_UUID"] == cd_uid
        assert view.env["COMPUTE_DOMAIN_NAME"] == "cd1"
        imexd = view.mount_at("/imexd")
        assert imexd is not None
        assert Path(imexd.host_path).is_relative_to(env.plugin_dir)
        caps = [n for n in view.device_nodes if n.path == "/dev/nvidia-caps/nvidia-cap7"]
        assert len(caps) == 1
        assert (caps[0].type, caps[0].major, caps[0].minor) == ("c", 238, 7)
        data = view.to_dict()
        assert data["cdiDevices"] == ids
        assert data["env"]["CLIQUE_ID"] == env.clique_id
        assert {"hostPath": imexd.host_path, "containerPath": "/imexd"}.items() <= data["mounts"][
            [m["containerPath"] for m in data["mounts"]].index("/imexd")
        ].items()
        await client.unprepare(plugin, [ref])
        assert env.cdi_files() == ["k8s.compute-domain.nvidia.com-device_base.yaml"]

    asyncio.run(main())


def test_prepare_errors_as_kubelet_reports_them(start_agent, cluster):
    agent = start_agent("--prepare-timeout", "1s")
    cd = cluster.compute_domain("cd1")
    channel = ClaimRef.of(cluster.channel_claim("wl", "default", cd["metadata"]["uid"], "Single"))
    ghost = ClaimRef("default", "ghost", "u-1")

    async def main() -> None:
        plugin = await registered(agent.env)
        client = DraClient()
        with pytest.raises(DraError) as err:
            await client.prepare(plugin, [ghost])
        assert str(err.value).startswith("NodePrepareResources: rpc error: code = ")
        assert "retrieve claim default/ghost" in str(err.value)
        assert err.value.code is not None
        start = time.monotonic()
        # Still waiting for the domain at the end of the call: the reason, for the pod's Events.
        with pytest.raises(DraError) as err:
            await client.prepare(plugin, [channel])
        assert str(err.value).startswith(
            f"NodePrepareResources failed for ResourceClaim wl: error preparing devices for "
            f"claim 'default/wl:{channel.uid}': not ready yet, kubelet will retry"
        )
        assert time.monotonic() - start < 10

    asyncio.run(main())


def test_container_view_later_entries_win(tmp_path):
    spec = {
        "cdiVersion": "0.6.0",
        "kind": "example.com/x",
        "containerEdits": {"env": ["A=spec"]},
        "devices": [
            {
                "name": "one",
                "containerEdits": {
                    "env": ["A=one", "B=one"],
                    "mounts": [{"hostPath": "/h1", "containerPath": "/c/d", "options": ["ro"]}],
                },
            },
            {
                "name": "two",
                "containerEdits": {
                    "env": ["B=two"],
                    "mounts": [
                        {"hostPath": "/h2", "containerPath": "/c/d"},
                        {"hostPath": "/h3", "containerPath": "/c"},
                    ],
                    "deviceNodes": [{"path": "/dev/x", "type": "c", "major": 1, "minor": 3}],
                },
            },
        ],
    }
    (tmp_path / "x.json").write_text(json.dumps(spec))
    view = container_view(["example.com/x=one", "example.com/x=two"], [tmp_path])
    assert view.env == {"A": "one", "B": "two"}
    assert [(m.host_path, m.container_path) for m in view.mounts] == [
        ("/h3", "/c"),
        ("/h2", "/c/d"),
    ]
    assert view.to_dict()["deviceNodes"] == [
        {"path": "/dev/x", "type": "c", "major": 1, "minor": 3, "hostPath": "/dev/x"}
    ]
