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
    # The node agents ran from the binary (the daemon containers find the same program
    # first on their PATH).
    for node in ("node-01", "node-02"):
        log = (short_dir / "nodes" / node / "agent.log").read_text()
        assert f"--- start 1: {frozen_agent} plugin" in log
