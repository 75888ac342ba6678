"""The frozen single-file agent as every node's agent (and IMEX daemon) in the simulated
cluster: the same end-to-end flow as `make demo`, with no Python entry point involved."""

from __future__ import annotations

import asyncio

from sim.cluster.demo import DemoOptions, run_demo


def test_demo_with_the_frozen_agent(frozen_agent, short_dir):
    opts = DemoOptions(nodes=2, cliques=1, root=short_dir, timeout=120, agent_program=frozen_agent)
    result = asyncio.run(run_demo(opts))
    assert result.ok, result.failed_step
    [chain] = result.chains
    assert chain.link("device").count == "2/2"
    # The node agents ran from the binary: it is the image's /usr/bin/compute-domain-agent,
    # which the kubelet-plugin and IMEX daemon containers run.
    for node in ("node-01", "node-02"):
        pods = short_dir / "nodes" / node / "pods"
        [log] = pods.glob("*_dra-driver-nvidia-gpu-kubelet-plugin-*/compute-domains.log")
        assert "(single-file binary, pid" in log.read_text()
