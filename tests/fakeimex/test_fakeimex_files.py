"""Config, nodes-config and hosts parsing, knobs, state vocabulary (no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.names import IMEX_CMD_PORT, IMEX_SERVER_PORT
from sim.fakeimex.config import ConfigError, load_config, parse_config
from sim.fakeimex.ctl import render_nodes
from sim.fakeimex.install import install
from sim.fakeimex.knobs import Knobs
from sim.fakeimex.nodes import Placeholders, parse_hosts, parse_nodes_config, resolve
from sim.fakeimex.states import DaemonState, DomainState, LinkStatus, domain_state

TEMPLATE = """\
# IMEX config as the driver renders it
LOG_LEVEL=4
LOG_FILE_NAME=
DAEMONIZE=0
BIND_INTERFACE_IP=
SERVER_PORT=50000
IMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg

IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP=10.0.0.7
IMEX_CMD_PORT=50005
IMEX_CMD_UNIX_DOMAIN_PATH=
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
IMEX_GSS_SERVICE_NAME=host
"""


def test_template_config_parses():
    cfg = parse_config(TEMPLATE, Path("imexd.cfg"))
    assert cfg.server_port == IMEX_SERVER_PORT
    assert cfg.cmd_port == IMEX_CMD_PORT
    assert cfg.cmd_enabled and not cfg.daemonize
    assert cfg.cmd_bind_interface_ip == "10.0.0.7"
    assert cfg.node_config_file == "/imexd/nodes.cfg"
    assert cfg.node_disconnected_grace_time == -1
    assert cfg.unknown_keys == []
    assert cfg.where("SERVER_PORT") == "imexd.cfg:6"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("garbage", "imexd.cfg:3: expected KEY=VALUE"),
        ("lower=1", "imexd.cfg:3: invalid key"),
        ("SERVER_PORT=http", "imexd.cfg:3: SERVER_PORT='http' is not an integer"),
        ("IMEX_CMD_PORT=70000", "imexd.cfg:3: IMEX_CMD_PORT=70000 is out of range"),
        ("IMEX_CMD_ENABLED=yes", "imexd.cfg:3: IMEX_CMD_ENABLED='yes' is not an integer"),
        ("IMEX_WAIT_FOR_QUORUM=ALL", "imexd.cfg:3: IMEX_WAIT_FOR_QUORUM='ALL' is not one of"),
        ("BIND_INTERFACE_IP=eth0", "imexd.cfg:3: BIND_INTERFACE_IP='eth0' is not an IP"),
    ],
)
def test_malformed_config_names_file_and_line(line, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_config(f"# header\nLOG_LEVEL=4\n{line}\n", Path("imexd.cfg"))


def test_cmd_port_absent_is_default_and_empty_disables_tcp():
    assert parse_config("", Path("c")).cmd_port == IMEX_CMD_PORT
    assert parse_config("IMEX_CMD_PORT=\n", Path("c")).cmd_port is None


def test_node_config_file_missing_or_unset(tmp_path):
    with pytest.raises(ConfigError, match=r"c\.cfg: IMEX_NODE_CONFIG_FILE is not set"):
        parse_config("LOG_LEVEL=4\n", Path("c.cfg")).node_config_path()
    cfg = parse_config(f"\nIMEX_NODE_CONFIG_FILE={tmp_path}/nope\n", Path("c.cfg"))
    with pytest.raises(ConfigError, match=r"c.cfg:2: IMEX_NODE_CONFIG_FILE .*nope: no such file"):
        cfg.node_config_path()


def test_unreadable_config_uses_the_real_wording(tmp_path):
    with pytest.raises(ConfigError, match=r"Unable to open configuration file at .*missing\.cfg"):
        load_config(tmp_path / "missing.cfg")


def test_nodes_config_lines_ports_and_errors():
    text = "# slots\nnode-0\n\n10.0.0.2\n127.0.1.9:4100\n[::1]:4101\nfe80::1\n"
    entries = parse_nodes_config(text, Path("n.cfg"))
    assert [(e.index, e.host, e.port, e.line) for e in entries] == [
        (0, "node-0", None, 2),
        (1, "10.0.0.2", None, 4),
        (2, "127.0.1.9", 4100, 5),
        (3, "::1", 4101, 6),
        (4, "fe80::1", None, 7),
    ]
    with pytest.raises(ConfigError, match=r"n\.cfg:2: invalid port"):
        parse_nodes_config("a\nb:99999\n", Path("n.cfg"))
    with pytest.raises(ConfigError, match=r"n\.cfg:1: expected one host per line"):
        parse_nodes_config("a b\n", Path("n.cfg"))


def test_hosts_resolution_and_placeholders():
    hosts = parse_hosts("# c\n10.0.0.1 a alias-a # x\n10.0.0.9 a\n0.0.0.0 empty\nbroken\n")
    assert resolve("a", hosts) == "10.0.0.1"
    assert resolve("ALIAS-A", hosts) == "10.0.0.1"
    assert resolve("missing", hosts) is None
    assert resolve("10.1.2.3", hosts) == "10.1.2.3"
    placeholders = Placeholders.parse(["127.0.0.2"])
    assert "0.0.0.0" in placeholders and "192.0.2.7" in placeholders
    assert "127.0.0.2" in placeholders and "2001:db8::5" in placeholders
    assert "127.0.1.1" not in placeholders and None not in placeholders


def test_domain_state_rules():
    ready, up = DaemonState.READY, LinkStatus.CONNECTED
    assert domain_state(DaemonState.INIT_GPU, []) is DomainState.DOWN
    assert domain_state(ready, []) is DomainState.UP
    assert domain_state(ready, [(up, "READY"), (up, "READY")]) is DomainState.UP
    assert domain_state(ready, [(up, "READY"), (LinkStatus.INVALID, None)]) is DomainState.DEGRADED
    assert domain_state(ready, [(up, "INIT_GPU")]) is DomainState.DEGRADED
    assert domain_state(ready, [(LinkStatus.RECOVERING, None)]) is DomainState.DEGRADED
    assert [s.code for s in DaemonState] == list(range(8))
    assert DaemonState.READY.code == 5


def test_knobs_from_env():
    assert Knobs.from_env({}) == Knobs()
    knobs = Knobs.from_env(
        {"FAKE_IMEX_EXIT_CODE": "3", "FAKE_IMEX_HOLD_STATE": "WAITING_FOR_PEERS"}
    )
    assert knobs.crash_after == 0.0 and knobs.exit_code == 3
    assert knobs.hold_state is DaemonState.WAITING_FOR_PEERS
    for bad in (
        {"FAKE_IMEX_START_DELAY": "soon"},
        {"FAKE_IMEX_HOLD_STATE": "READY"},
        {"FAKE_IMEX_EXIT_CODE": "-1"},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Knobs.from_env(bad)


def test_render_nodes_text():
    cell = {"host": "10.0.0.1", "status": "CONNECTED", "changed": False}
    document = {
        "nodes": {
            "0": {
                "status": "READY",
                "host": "10.0.0.1",
                "version": "570.172.08",
                "connections": {"0": cell, "1": {**cell, "status": "RECOVERING"}},
            },
            "1": {"status": "UNAVAILABLE", "host": "10.0.0.2", "version": "", "connections": {}},
        },
        "timestamp": "9/4/2026 00:37:39.905",
        "status": "DEGRADED",
    }
    text = render_nodes(document)
    assert "Node #0   - 10.0.0.1        - READY                - Version: 570.172.08" in text
    assert text.splitlines()[-3:] == [
        "       0           C    R",
        "       1           I    I",
        "Domain State: DEGRADED",
    ]
    assert "!M! - Node map mismatch" in text


def test_install_writes_launchers_and_refuses_python_bin(tmp_path):
    import sys

    paths = install(tmp_path / "bin")
    assert sorted(paths) == ["nvidia-imex", "nvidia-imex-ctl"]
    for path in paths.values():
        assert path.stat().st_mode & 0o111
        assert path.read_text().startswith("#!/bin/bash\n")
    with pytest.raises(ValueError, match="refusing"):
        install(Path(sys.executable).parent)
