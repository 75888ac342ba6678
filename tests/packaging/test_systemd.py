"""The systemd unit and environment file for a host-managed node (or one whose agent runs
nvidia-imex itself: agent placement)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.cli import add_commands
from agent.plugin.config import config_from_args
from api.featuregates import COMPUTE_DOMAIN_CLIQUES, HOST_MANAGED_IMEX_DAEMON
from runtime.cli import program_parser
from sim.cluster import manifests

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "compute-domain-agent.service"
ENV_FILE = REPO / "systemd" / "compute-domain-agent.env"
ENV_INSTALLED = "/etc/compute-domain-agent/compute-domain-agent.env"
BINARY = "/usr/local/bin/compute-domain-agent"


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections of a unit file; a key given twice (Wants=, After=) keeps every value."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{line!r} outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"not key=value: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def words(values: list[str]) -> list[str]:
    return [w for v in values for w in v.split()]


def parse_env_file(path: Path) -> dict[str, str]:
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z][A-Z0-9_]*", key), f"bad line {line!r}"
        assert not value.startswith(("'", '"')), "keep values unquoted (no spaces needed)"
        out[key] = value
    return out


def plugin_parser():
    _parser, sub = program_parser("compute-domain-agent", None)
    add_commands(sub)
    return sub.choices["plugin"]


def plugin_env_names() -> set[str]:
    """Every environment variable `compute-domain-agent plugin` reads (from env_option help)."""
    found: set[str] = set()
    for action in plugin_parser()._actions:
        for match in re.finditer(r"\[env ([A-Z0-9_/]+)\]", action.help or ""):
            found.update(match.group(1).split("/"))
    return found


@pytest.fixture(scope="module")
def unit() -> dict[str, dict[str, list[str]]]:
    return parse_unit(UNIT)


def test_unit_runs_the_plugin_next_to_the_host_imex_service(unit):
    u, s, i = unit["Unit"], unit["Service"], unit["Install"]
    for dep in ("nvidia-imex.service", "kubelet.service"):
        assert dep in words(u["After"])
        assert dep in words(u.get("Wants", []) + u.get("Requires", []))
    assert s["ExecStart"] == [f"{BINARY} plugin"]
    assert s["Restart"] == ["on-failure"] and s["RestartSec"]
    assert s["EnvironmentFile"] == [ENV_INSTALLED]
    assert s["Environment"] == ["NODE_NAME=%H"]
    assert i["WantedBy"] == ["multi-user.target"]


def test_unit_stops_only_the_agent_so_its_imex_children_outlive_a_restart(unit):
    """Agent placement: a restart or upgrade of the agent leaves the nvidia-imex it started
    running for the next agent to adopt (systemd still reaps them)."""
    s = unit["Service"]
    assert s["KillMode"] == ["process"]
    assert s["KillSignal"] == ["SIGTERM"]


def test_unit_sandbox_leaves_only_the_plugin_paths_writable(unit):
    s = unit["Service"]
    assert s["ProtectSystem"] == ["strict"]
    for key in ("ProtectHome", "NoNewPrivileges", "PrivateTmp", "ProtectKernelModules",
                "ProtectControlGroups", "RestrictSUIDSGID"):
        assert s[key] == ["yes"], key
    # NVML opens /dev/nvidia*: no device allow list (ProtectClock= implies one).
    assert not {"PrivateDevices", "DeviceAllow", "DevicePolicy", "ProtectClock"} & set(s)
    assert "CAP_SYS_CHROOT" in words(s["CapabilityBoundingSet"])  # chroot nvidia-imex-ctl
    assert "AF_UNIX" in words(s["RestrictAddressFamilies"])
    writable = set(words(s["ReadWritePaths"]))
    env = parse_env_file(ENV_FILE)
    for key in ("CDI_ROOT", "KUBELET_PLUGINS_DIRECTORY_PATH", "KUBELET_REGISTRAR_DIRECTORY_PATH"):
        path = env[key].replace("/var/run/", "/run/", 1)  # /var/run is a link to /run
        assert path in writable, f"{key}={env[key]} is not in ReadWritePaths"
    # ExecStartPre creates them (with full privileges) before the read-only namespace exists.
    pre = s["ExecStartPre"][0]
    assert pre.startswith("+/bin/mkdir -p") and set(pre.split()[2:]) == writable


def test_env_file_names_only_variables_the_agent_reads():
    known = plugin_env_names()
    assert {"NODE_NAME", "IMEX_MODE", "KUBECONFIG", "LOG_VERBOSITY"} <= known
    env = parse_env_file(ENV_FILE)
    assert set(env) - known == set()
    commented = set(re.findall(r"^#([A-Z][A-Z0-9_]*)=", ENV_FILE.read_text(), re.M))
    assert commented - known == set()


def test_env_file_selects_host_managed_mode(monkeypatch):
    """The shipped environment, as the agent parses it, is a valid host-managed config."""
    for name in plugin_env_names():
        monkeypatch.delenv(name, raising=False)
    for key, value in parse_env_file(ENV_FILE).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("NODE_NAME", "gb200-node-1")  # what the unit's %H gives
    config = config_from_args(plugin_parser().parse_args([]))
    assert config.host_managed
    assert config.gates.enabled(HOST_MANAGED_IMEX_DAEMON)
    assert not config.gates.enabled(COMPUTE_DOMAIN_CLIQUES)
    assert config.container_driver_root == Path("/") == config.host_driver_root
    assert config.kubeconfig == "/etc/compute-domain-agent/kubeconfig"
    assert str(config.plugins_dir) == "/var/lib/kubelet/plugins"
    # The cliques live in the namespace the Helm chart (and packaging/deploy) installs into.
    assert config.namespace == manifests.NAMESPACE


def test_env_file_agent_placement_lines_as_its_comments_say(monkeypatch):
    """The commented IMEX_PLACEMENT and IMEX_ADDRESS, turned on with the changes the file
    lists (driverManaged, no HostManagedIMEXDaemon gate, no host socket), are a valid
    agent-placement config."""
    text = ENV_FILE.read_text()
    commented = dict(re.findall(r"^#(IMEX_PLACEMENT|IMEX_ADDRESS)=(\S+)$", text, re.M))
    assert commented == {"IMEX_PLACEMENT": "agent", "IMEX_ADDRESS": "192.0.2.10"}
    for name in plugin_env_names():
        monkeypatch.delenv(name, raising=False)
    env = parse_env_file(ENV_FILE)
    for key in ("FEATURE_GATES", "IMEX_HOST_SOCKET_PATH"):
        del env[key]
    env |= commented | {"IMEX_MODE": "driverManaged"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("NODE_NAME", "gb200-node-1")
    config = config_from_args(plugin_parser().parse_args([]))
    assert config.agent_placement and not config.host_managed
    assert config.imex_address == "192.0.2.10"
    assert config.gates.enabled(COMPUTE_DOMAIN_CLIQUES)
    # Left as shipped, the file is still host-managed: placement is pod.
    assert "IMEX_PLACEMENT" not in parse_env_file(ENV_FILE)


def verified_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at an executable that exists on this machine."""
    stand_in = tmp_path / "compute-domain-agent"
    stand_in.write_text("#!/bin/sh\nexit 0\n")
    stand_in.chmod(0o755)
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text().replace(BINARY, str(stand_in)))
    return copy


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (apt-get install systemd)")
def test_systemd_analyze_verify(tmp_path):
    out = subprocess.run(["systemd-analyze", "verify", "--man=no", str(verified_copy(tmp_path))],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (apt-get install systemd)")
def test_systemd_analyze_security_exposure_is_low(tmp_path):
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager",
                          str(verified_copy(tmp_path))],
                         capture_output=True, text=True, timeout=60, check=False)
    match = re.search(r"Overall exposure level for \S+: ([\d.]+)", out.stdout)
    if match is None:
        pytest.skip(f"this systemd-analyze has no offline security check: {out.stderr.strip()}")
    assert float(match.group(1)) <= 5.0, out.stdout
