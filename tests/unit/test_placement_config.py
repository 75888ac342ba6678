"""Where nvidia-imex runs (`--imex-placement`): the agent's and the controller's flags and
their validation, and the readiness poller's fast first polls that agent placement uses."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from eventually import eventually_async, run_virtual

from agent.daemon.readiness import FAST_POLLS, ReadinessPoller
from agent.plugin.config import PluginConfig, add_plugin_flags
from agent.plugin.config import config_from_args as plugin_config_from_args
from api import names
from api.validation_error import ValidationError
from controller.config import ControllerConfig, add_controller_flags
from controller.config import config_from_args as controller_config_from_args

BIN = Path(sys.executable).parent
HOST_MANAGED = ("--imex-mode", "hostManaged", "--feature-gates", "HostManagedIMEXDaemon=true")
NOT_A_PLACEMENT = ("'host' is not an IMEX placement: use pod (a daemon pod per ComputeDomain "
                   "and node) or agent (the node agent runs nvidia-imex itself)")


def plugin(*args: str, env: Mapping[str, str] | None = None) -> PluginConfig:
    """The agent's config from flags and an environment of its own (not os.environ)."""
    parser = argparse.ArgumentParser()
    add_plugin_flags(parser, environ=env or {})
    return plugin_config_from_args(parser.parse_args(["--node-name", "n1", *args]))


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The controller's flags read os.environ: none of the IMEX variables set."""
    for name in (names.ENV_IMEX_PLACEMENT, names.ENV_IMEX_MODE, names.ENV_FEATURE_GATES):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def controller(*args: str) -> ControllerConfig:
    parser = argparse.ArgumentParser()
    add_controller_flags(parser)
    return controller_config_from_args(parser.parse_args(["--image-name", "img", *args]))


# --- the agent ----------------------------------------------------------------------------


def test_the_agent_defaults_to_pod_placement():
    config = plugin()
    assert config.imex_placement == names.PLACEMENT_POD == "pod"
    assert not config.agent_placement and config.imex_address == ""


def test_the_agent_takes_agent_placement_from_its_environment():
    config = plugin(env={"IMEX_PLACEMENT": "agent", "IMEX_ADDRESS": "192.0.2.10"})
    assert config.agent_placement and config.imex_placement == "agent"
    assert config.imex_address == "192.0.2.10"


@pytest.mark.parametrize("spelled", ["agent", "Agent", " AGENT "])
def test_the_placement_is_read_case_and_space_insensitively(spelled):
    assert plugin("--imex-placement", spelled, "--imex-address", "192.0.2.10").agent_placement
    assert plugin(env={"IMEX_PLACEMENT": spelled, "IMEX_ADDRESS": "192.0.2.10"}).agent_placement


def test_a_flag_overrides_the_environment():
    config = plugin("--imex-placement", "pod", env={"IMEX_PLACEMENT": "agent"})
    assert not config.agent_placement


def test_a_bad_placement_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        plugin("--imex-placement", "host")
    assert exited.value.code == 2
    assert f"argument --imex-placement: {NOT_A_PLACEMENT}" in capsys.readouterr().err


def test_a_bad_placement_in_the_environment_names_the_variable():
    with pytest.raises(SystemExit) as exited:
        plugin(env={"IMEX_PLACEMENT": "host"})
    assert str(exited.value) == (
        f"invalid value 'host' in environment variable IMEX_PLACEMENT (--imex-placement): "
        f"{NOT_A_PLACEMENT}")


def test_agent_placement_without_an_address_is_refused():
    with pytest.raises(ValidationError) as refused:
        plugin(env={"IMEX_PLACEMENT": "agent"})
    message = str(refused.value)
    assert message.startswith("--imex-address (IMEX_ADDRESS) '' is not an IP address")
    assert "the chart sets it from the pod IP" in message


@pytest.mark.parametrize("address", ["node-1", "10.0.0.300", "10.0.0.1:8477",
                                     "fe80::1%eth0", "10.0.0.0/24", "http://10.0.0.1"])
def test_agent_placement_with_a_bad_address_is_refused(address):
    with pytest.raises(ValidationError, match=r"^--imex-address \(IMEX_ADDRESS\) ") as refused:
        plugin(env={"IMEX_PLACEMENT": "agent", "IMEX_ADDRESS": address})
    assert repr(address) in str(refused.value)


@pytest.mark.parametrize(("address", "kept"), [
    ("192.0.2.10", "192.0.2.10"), (" 192.0.2.10 ", "192.0.2.10"), ("fd00::5", "fd00::5")])
def test_agent_placement_takes_an_ipv4_or_ipv6_address(address, kept):
    config = plugin("--imex-placement", "agent", "--imex-address", address)
    assert config.imex_address == kept


def test_the_address_is_not_checked_in_pod_placement():
    """It means nothing there (the daemon pods have their own IPs)."""
    assert not plugin(env={"IMEX_ADDRESS": "not an address"}).agent_placement


def test_agent_placement_with_host_managed_imex_is_refused():
    with pytest.raises(ValidationError) as refused:
        plugin(*HOST_MANAGED, env={"IMEX_PLACEMENT": "agent", "IMEX_ADDRESS": "192.0.2.10"})
    assert str(refused.value) == (
        "--imex-placement=agent (IMEX_PLACEMENT) applies to imex.mode=driverManaged only: "
        "with hostManaged the host runs nvidia-imex; unset it")
    host = plugin(*HOST_MANAGED)  # pod placement (the default) stays valid
    assert host.host_managed and not host.agent_placement


@pytest.mark.parametrize(("count", "valid"), [(0, False), (1, True), (1000, True),
                                              (1001, False)])
def test_agent_placement_checks_the_nodes_per_domain(count, valid):
    args = ("--imex-placement", "agent", "--imex-address", "192.0.2.10",
            "--max-nodes-per-imex-domain", str(count))
    if valid:
        assert plugin(*args).max_nodes_per_imex_domain == count
    else:
        with pytest.raises(ValidationError, match=r"max-nodes-per-imex-domain must be 1\.\.1000"):
            plugin(*args)


@pytest.mark.parametrize("flags", [("--imex-poll-interval", "0"),
                                   ("--imex-reload-interval", "-1")])
def test_agent_placement_checks_its_intervals(flags):
    with pytest.raises((ValidationError, SystemExit)):
        plugin("--imex-placement", "agent", "--imex-address", "192.0.2.10", *flags)


def test_the_agent_command_says_what_is_wrong(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMEX_")}
    env |= {"IMEX_PLACEMENT": "agent", "NODE_NAME": "n1"}
    out = subprocess.run([BIN / "compute-domain-agent", "plugin"], capture_output=True,
                         text=True, timeout=60, env=env, cwd=tmp_path)
    assert out.returncode == 1
    assert ("compute-domain-agent plugin: --imex-address (IMEX_ADDRESS) '' is not an IP "
            "address") in out.stderr


# --- the controller -----------------------------------------------------------------------


def test_the_controller_defaults_to_pod_placement(clean_env):
    config = controller()
    assert config.imex_placement == "pod"
    assert not config.agent_placement and config.daemon_pods


def test_the_controller_takes_agent_placement_from_its_environment(clean_env):
    clean_env.setenv("IMEX_PLACEMENT", "agent")
    config = controller()
    assert config.agent_placement and not config.daemon_pods
    assert config.cliques  # the cliques gate is independent of the placement


def test_the_controller_flag(clean_env):
    assert controller("--imex-placement", "Agent").agent_placement
    assert controller("--imex-placement", "pod").daemon_pods


def test_host_managed_means_no_daemon_pods_whatever_the_placement(clean_env):
    config = controller(*HOST_MANAGED, "--imex-placement", "agent")
    assert config.host_managed and not config.agent_placement and not config.daemon_pods


def test_a_bad_placement_in_the_controllers_environment_names_the_variable(clean_env):
    clean_env.setenv("IMEX_PLACEMENT", "host")
    with pytest.raises(SystemExit) as exited:
        controller()
    assert str(exited.value) == (
        f"invalid value 'host' in environment variable IMEX_PLACEMENT (--imex-placement): "
        f"{NOT_A_PLACEMENT}")


def test_the_controller_command_refuses_a_bad_placement():
    out = subprocess.run([BIN / "compute-domain-controller", "--image-name", "img",
                          "--kubeconfig", "/nonexistent", "--imex-placement", "host"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert f"argument --imex-placement: {NOT_A_PLACEMENT}" in out.stderr


# --- ReadinessPoller's first_interval (virtual clock) -------------------------------------


def poll_times(answers: list[str], polls: int, *, interval: float,
               first_interval: float | None) -> tuple[list[float], list[tuple[bool, str]]]:
    """The gaps between the first `polls` polls, answered in turn from `answers` (the last
    one from then on), and the readiness changes reported."""
    polled_at: list[float] = []
    changes: list[tuple[bool, str]] = []
    replies = itertools.chain(answers, itertools.repeat(answers[-1]))

    async def query() -> str:
        polled_at.append(asyncio.get_running_loop().time())
        return next(replies)

    async def on_change(ready: bool, state: str) -> None:
        changes.append((ready, state))

    async def scenario() -> None:
        poller = ReadinessPoller(query, on_change, interval=interval,
                                 first_interval=first_interval)
        task = asyncio.create_task(poller.run())
        try:
            await eventually_async(lambda: len(polled_at) >= polls, f"{polls} polls",
                                   timeout=10_000)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    run_virtual(scenario(), timeout=20_000)
    gaps = [b - a for a, b in itertools.pairwise(polled_at[:polls])]
    return gaps, changes


def test_polls_at_first_interval_until_ready_then_at_interval():
    gaps, changes = poll_times(["INITIALIZING"] * 3 + ["READY"], 8, interval=5.0,
                               first_interval=0.1)
    assert gaps == pytest.approx([0.1, 0.1, 0.1, 5.0, 5.0, 5.0, 5.0])
    assert changes == [(False, "INITIALIZING"), (True, "READY")]


def test_at_most_fast_polls_fast_polls_while_never_ready():
    gaps, changes = poll_times(["UNAVAILABLE"], FAST_POLLS + 4, interval=5.0,
                               first_interval=0.1)
    assert gaps[:FAST_POLLS] == pytest.approx([0.1] * FAST_POLLS)
    assert gaps[FAST_POLLS:] == pytest.approx([5.0] * 3)
    assert changes == [(False, "UNAVAILABLE")]


def test_a_later_outage_is_polled_fast_again_once_reported():
    """READY, then three failed polls: the first two are held READY (hysteresis) and
    polled at the interval; once NotReady is reported the fast polls resume."""
    answers = ["INITIALIZING", "READY", "READY"] + ["UNAVAILABLE"] * 5 + ["READY"]
    gaps, changes = poll_times(answers, 11, interval=5.0, first_interval=0.1)
    assert gaps == pytest.approx([0.1, 5.0, 5.0, 5.0, 5.0, 0.1, 0.1, 0.1, 5.0, 5.0])
    assert changes == [(False, "INITIALIZING"), (True, "READY"), (False, "UNAVAILABLE"),
                       (True, "READY")]


def test_a_fresh_outage_gets_all_fast_polls_again():
    answers = ["UNAVAILABLE"] * 10 + ["READY"] + ["UNAVAILABLE"] * (FAST_POLLS + 10)
    gaps, _ = poll_times(answers, len(answers), interval=5.0, first_interval=0.1)
    # 10 fast polls, READY, two held at the interval, then the third failure is reported.
    assert gaps[:10] == pytest.approx([0.1] * 10)
    assert gaps[10:13] == pytest.approx([5.0] * 3)
    assert gaps[13:13 + FAST_POLLS] == pytest.approx([0.1] * FAST_POLLS)
    assert gaps[13 + FAST_POLLS:] == pytest.approx([5.0] * (len(gaps) - 13 - FAST_POLLS))


@pytest.mark.parametrize(("first_interval", "expected"), [(None, 2.0), (10.0, 2.0)])
def test_no_first_interval_or_a_longer_one_polls_at_the_interval(first_interval, expected):
    gaps, _ = poll_times(["INITIALIZING"], 6, interval=2.0, first_interval=first_interval)
    assert gaps == pytest.approx([expected] * 5)
