"""IMEX config, nodes config and hosts file rendering/writing."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.daemon import files
from agent.daemon.files import (
    SENTINEL,
    TemplateError,
    dns_nodes_config,
    ip_nodes_config,
    own_index_changed,
    peers_changed,
    render_config,
    render_hosts,
    write_config,
    write_hosts,
    write_nodes_config,
)
from api import names
from api.names import dns_name

UID = "3f2a9c1e-8d4b-4e7a-9c2d-1b5e6f7a8b9c"
SHIPPED = Path(__file__).parents[2] / "agent/templates/compute-domain-daemon-config.tmpl.cfg"


# --- IMEX config -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "A={{ .IMEXCmdBindInterfaceIP }}\nB={{ .IMEXDaemonNodesConfigPath }}\n",
        "A={{.IMEXCmdBindInterfaceIP}}\nB={{.IMEXDaemonNodesConfigPath}}\n",
        "A={{  .IMEXCmdBindInterfaceIP\t}}\nB={{ .IMEXDaemonNodesConfigPath}}\n",
    ],
)
def test_render_config_spellings(template: str) -> None:
    out = render_config(template, cmd_bind_ip="10.0.0.5", nodes_config_path="/imexd/nodes.cfg")
    assert out == "A=10.0.0.5\nB=/imexd/nodes.cfg\n"


@pytest.mark.parametrize("leftover", ["{{ .Other }}", "{{ .IMEXCmdBindInterfaceIP | x }}", "{{"])
def test_render_config_leftover_placeholder(leftover: str) -> None:
    with pytest.raises(TemplateError, match="line 2"):
        render_config(f"A=1\nB={leftover}\n", cmd_bind_ip="1.2.3.4", nodes_config_path="/n")


def test_shipped_template_renders() -> None:
    out = render_config(
        SHIPPED.read_text(), cmd_bind_ip="10.0.0.5", nodes_config_path="/imexd/nodes.cfg"
    )
    assert "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.5\n" in out
    assert "IMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg\n" in out
    assert all("{{" not in line for line in out.splitlines() if not line.startswith("#"))


def test_write_config(tmp_path: Path) -> None:
    (tmp_path / "imexd.cfg.tmpl").write_text(SHIPPED.read_text())
    (tmp_path / "imexd.cfg").write_text("old")
    (tmp_path / "imexd.cfg").chmod(0o600)
    path = write_config(tmp_path, "127.0.1.7")
    assert path == tmp_path / "imexd.cfg"
    text = path.read_text()
    assert "IMEX_CMD_BIND_INTERFACE_IP=127.0.1.7\n" in text
    assert f"IMEX_NODE_CONFIG_FILE={tmp_path / 'nodes.cfg'}\n" in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["imexd.cfg", "imexd.cfg.tmpl"]


def test_write_config_missing_template(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="kubelet plugin"):
        write_config(tmp_path, "10.0.0.5")
    assert not (tmp_path / "imexd.cfg").exists()


# --- nodes config ------------------------------------------------------------------------


def test_dns_nodes_config() -> None:
    text = dns_nodes_config(UID, 18)
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == 19
    assert lines[0] == f"imex-{UID}-0000" and lines[17] == f"imex-{UID}-0017"


def test_ip_nodes_config_keeps_order() -> None:
    assert ip_nodes_config(["10.0.0.9", "10.0.0.1"]) == "10.0.0.9\n10.0.0.1\n"
    assert ip_nodes_config([]) == ""


def test_write_nodes_config(tmp_path: Path) -> None:
    path = tmp_path / "nodes.cfg"
    write_nodes_config(path, "a\n")
    write_nodes_config(path, "b\n")
    assert path.read_text() == "b\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


# --- hosts file --------------------------------------------------------------------------

KUBELET_HOSTS = (
    "# Kubernetes-managed hosts file.\n"
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    f"10.0.0.5\tcomputedomain-daemon-{UID}-abcde\n"
)


def test_render_hosts_preserves_foreign_lines_and_fills_slots() -> None:
    out = render_hosts(KUBELET_HOSTS, UID, {0: "10.0.0.5", 2: "10.0.0.7"}, 4)
    assert out.startswith(KUBELET_HOSTS)
    assert out[len(KUBELET_HOSTS) :] == (
        f"{files.marker(UID)}\n"
        f"10.0.0.5\t{dns_name(UID, 0)}\n"
        f"{SENTINEL}\t{dns_name(UID, 1)}\n"
        f"10.0.0.7\t{dns_name(UID, 2)}\n"
        f"{SENTINEL}\t{dns_name(UID, 3)}\n"
    )


def test_render_hosts_removes_reference_lines() -> None:
    reference = (
        KUBELET_HOSTS
        + "# Compute Domain Daemon mappings\n"
        + "10.0.0.5\tcompute-domain-daemon-0000\n"
        + "\n# Compute Domain Daemon mappings\n"
        + "10.0.0.6\tcompute-domain-daemon-0001\n"
        + "\n"
    )
    out = render_hosts(reference, UID, {1: "10.0.0.6"}, 2)
    assert "compute-domain-daemon-" not in out
    assert "Compute Domain Daemon mappings" not in out
    assert f"computedomain-daemon-{UID}-abcde" in out
    assert out == render_hosts(KUBELET_HOSTS, UID, {1: "10.0.0.6"}, 2)


def test_render_hosts_replaces_block_on_change() -> None:
    first = render_hosts(KUBELET_HOSTS, UID, {0: "10.0.0.5", 1: "10.0.0.6"}, 3)
    second = render_hosts(first, UID, {0: "10.0.0.5"}, 3)
    assert second == render_hosts(KUBELET_HOSTS, UID, {0: "10.0.0.5"}, 3)
    assert "10.0.0.6" not in second


def test_render_hosts_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="index 4"):
        render_hosts("", UID, {4: "10.0.0.5"}, 4)
    with pytest.raises(ValueError):
        render_hosts("", UID, {0: "not-an-ip"}, 4)


def test_no_growth_over_many_rewrites() -> None:
    text = KUBELET_HOSTS + "\n\n"
    outputs = set()
    for i in range(100):
        mappings = {0: "10.0.0.5"} if i % 2 else {0: "10.0.0.5", 1: f"10.0.1.{i}"}
        text = render_hosts(text, UID, mappings, 18)
        outputs.add(len(text.split("\n")))
    assert outputs == {len(KUBELET_HOSTS.split("\n")) + 19}


ips = st.ip_addresses().map(str)
foreign_line = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=40
)
hosts_text = st.one_of(
    st.lists(
        st.one_of(
            foreign_line,
            st.builds(lambda ip: f"{ip}\tlocalhost", ips),
            st.builds(lambda i, ip: f"{ip}\t{dns_name(UID, i)}", st.integers(0, 9999), ips),
            st.builds(lambda i: f"10.0.0.1\tcompute-domain-daemon-{i:04d}", st.integers(0, 9999)),
            st.just("# Compute Domain Daemon mappings"),
            st.just(files.marker(UID)),
            st.just(""),
        ),
        max_size=20,
    ).map("\n".join),
    st.text(max_size=200),
)


@given(
    existing=hosts_text,
    max_nodes=st.integers(1, 24),
    data=st.data(),
)
def test_render_hosts_idempotent(existing: str, max_nodes: int, data: st.DataObject) -> None:
    mappings = data.draw(st.dictionaries(st.integers(0, max_nodes - 1), ips))
    once = render_hosts(existing, UID, mappings, max_nodes)
    assert render_hosts(once, UID, mappings, max_nodes) == once
    lines = once.split("\n")
    assert lines[-1] == ""
    for index in range(max_nodes):
        name = dns_name(UID, index)
        mine = [line for line in lines if line.endswith(f"\t{name}")]
        assert mine == [f"{mappings.get(index, SENTINEL)}\t{name}"]
    assert sum(line == files.marker(UID) for line in lines) == 1
    assert not any(files._REFERENCE_NAME.search(line) for line in lines)


def test_write_hosts_only_when_changed(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(KUBELET_HOSTS)
    text = render_hosts(KUBELET_HOSTS, UID, {0: "10.0.0.5"}, 2)
    assert write_hosts(path, text) is True
    assert path.read_text() == text
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    mtime = path.stat().st_mtime_ns
    assert write_hosts(path, text) is False
    assert path.stat().st_mtime_ns == mtime


def test_write_hosts_creates_missing_file(tmp_path: Path) -> None:
    assert write_hosts(tmp_path / "hosts", "x\n") is True


@pytest.mark.parametrize("code", [errno.EBUSY, errno.EXDEV])
def test_write_hosts_bind_mount_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    path = tmp_path / "hosts"
    path.write_text(KUBELET_HOSTS)
    inode = path.stat().st_ino

    def refuse(*_args: object, **_kwargs: object) -> Path:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(Path, "replace", refuse)
    monkeypatch.setattr(os, "replace", refuse)
    text = render_hosts(KUBELET_HOSTS, UID, {0: "10.0.0.5"}, 2)
    assert write_hosts(path, text) is True
    assert path.read_text() == text
    assert path.stat().st_ino == inode  # written in place, the bind mount stays intact
    assert [p.name for p in tmp_path.iterdir()] == ["hosts"]  # no temp file left behind


def test_write_hosts_other_errors_propagate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: object, **_kwargs: object) -> Path:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="I/O error"):
        write_hosts(tmp_path / "hosts", "x\n")


# --- peer map helpers --------------------------------------------------------------------


def test_peer_helpers() -> None:
    old = {0: "10.0.0.5", 1: "10.0.0.6"}
    assert not peers_changed(old, dict(old))
    assert peers_changed(old, {0: "10.0.0.5"})
    assert not own_index_changed(old, {0: "10.0.0.5"}, "10.0.0.5")
    assert own_index_changed(old, {1: "10.0.0.5"}, "10.0.0.5")
    assert own_index_changed({}, {0: "10.0.0.5"}, "10.0.0.5")


def test_a_linked_template_is_not_read(tmp_path: Path) -> None:
    """`imexd.cfg.tmpl -> <host file>` planted in the pod-writable domain directory: the
    daemon refuses to render it (its content never reaches the IMEX config or the log)."""
    secret = tmp_path / "checkpoint.json"
    secret.write_text('{"claims": "secret"}')
    imexd = tmp_path / "imexd"
    imexd.mkdir()
    (imexd / names.IMEXD_CONFIG_TEMPLATE).symlink_to(secret)
    with pytest.raises(TemplateError, match="is not the plain file"):
        write_config(imexd, "10.0.0.5")
    assert not (imexd / names.IMEXD_CONFIG).exists()
