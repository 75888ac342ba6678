"""What the CD daemon takes from outside: its environment (`agent.daemon.identity`), the IMEX
config template, and peer IPs from API objects other daemons write (`agent.daemon.files`).

Properties: any environment yields a validated identity (its domain UID a safe path
component and label, its pod IP a plain address, max nodes in 1..1000) or one
`IdentityError` line; any template renders with no `{{ }}` left outside comments or raises
`TemplateError`, and a rejected template writes no config; any peer IP is a plain address
or is refused with ValueError: the hosts file and nodes config never gain a line that is
not ours, whatever the API objects say.
"""

from __future__ import annotations

import ipaddress

import pytest
from fuzz_support import FUZZ, mutated, outcome
from hypothesis import example, given
from hypothesis import strategies as st

from agent.daemon import files
from agent.daemon.identity import IdentityError, identity_from
from api import names
from api.validation import label_value_problem, path_component_problem

UID = "8b5cd1b6-5f1e-4a5b-9a53-0c1d2e3f4a5b"
NASTY_IPS = ["fe80::1%eth0", "fe80::1%x\n10.6.6.6 evil", "10.0.0.1\n", " 10.0.0.1", "10.0.0.1 x",
             "::ffff:10.0.0.1", "::", "0.0.0.0", "256.0.0.1", "10.0.0.01", "1.2.3", "", "\x00"]
ip_text = st.ip_addresses().map(str) | st.sampled_from(NASTY_IPS) | st.text(max_size=20)
ENV_NASTY = ["", " ", UID, "..", "a/b", "a\x00b", "10.0.0.1", "0", "18", "1001", "-1", " 7 ",
             "1e3", "\u0661", "x" * 70, *NASTY_IPS]
env_values = st.sampled_from(ENV_NASTY) | st.text(max_size=12)
env_keys = [names.ENV_COMPUTE_DOMAIN_UUID, names.ENV_NODE_NAME, names.ENV_POD_IP,
            names.ENV_POD_NAME, names.ENV_POD_NAMESPACE, names.ENV_MAX_NODES_PER_IMEX_DOMAIN,
            names.ENV_CLIQUE_ID, names.ENV_COMPUTE_DOMAIN_NAMESPACE]
BASE = {names.ENV_COMPUTE_DOMAIN_UUID: UID, names.ENV_NODE_NAME: "n1", names.ENV_POD_IP: "10.0.0.1",
        names.ENV_POD_NAME: "p", names.ENV_POD_NAMESPACE: "ns"}


def plain_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return "%" not in text


@FUZZ
@given(st.dictionaries(st.sampled_from(env_keys), env_values), st.booleans())
@example({names.ENV_POD_IP: "fe80::1%x\n10.6.6.6 evil"}, True)
@example({names.ENV_MAX_NODES_PER_IMEX_DOMAIN: "9" * 5000}, True)
def test_identity_from_environment(env, over_base):
    merged = (BASE | env) if over_base else env
    ident, _ = outcome(lambda: identity_from(merged), IdentityError)
    if ident is None:
        return
    assert path_component_problem(ident.cd_uid) is None
    assert label_value_problem(ident.cd_uid) is None
    assert plain_ip(ident.pod_ip), f"pod IP {ident.pod_ip!r} accepted"
    assert 1 <= ident.max_nodes <= 1000
    names.dns_name(ident.cd_uid, ident.max_nodes - 1)


template_parts = st.sampled_from(
    ["{{ .IMEXCmdBindInterfaceIP }}", "{{.IMEXDaemonNodesConfigPath}}", "{{ .Other }}", "{{",
     "}}", "{", "}", "#", "\n", " ", "IMEX_CMD_PORT=50005", "{{ . }}", "{{ .IMEXCmdBindInterfaceIP"]
)
templates = st.lists(template_parts | st.text(max_size=6), max_size=12).map("".join)


@FUZZ
@given(templates)
def test_render_config(template):
    text, _ = outcome(
        lambda: files.render_config(template, cmd_bind_ip="10.0.0.1", nodes_config_path="/n.cfg"),
        files.TemplateError,
    )
    if text is not None:
        for line in text.split("\n"):
            if not line.lstrip().startswith("#"):
                assert "{{" not in line and "}}" not in line


@FUZZ
@given(templates)
def test_write_config_writes_nothing_for_a_rejected_template(tmp_path_factory, template):
    d = tmp_path_factory.mktemp("imexd")
    (d / names.IMEXD_CONFIG_TEMPLATE).write_text(template)
    try:
        files.write_config(d, "10.0.0.1")
    except files.TemplateError as err:
        assert "\n" not in str(err)
        assert sorted(p.name for p in d.iterdir()) == [names.IMEXD_CONFIG_TEMPLATE]
    else:
        assert (d / names.IMEXD_CONFIG).is_file()


@FUZZ
@given(st.dictionaries(st.integers(0, 5), ip_text, max_size=4), mutated("127.0.0.1\tlocalhost\n"))
@example({0: "fe80::1%x\n10.6.6.6 evil"}, b"")
def test_hosts_file_never_gains_foreign_lines(mappings, existing):
    existing_text = existing.decode("utf-8", errors="replace")
    text, err = outcome(lambda: files.render_hosts(existing_text, UID, mappings, 6), ValueError)
    if err is not None:
        assert any(not plain_ip(ip) for ip in mappings.values())
        return
    assert all(plain_ip(ip) for ip in mappings.values())
    block = text.split(files.marker(UID) + "\n", 1)[1].splitlines()
    assert len(block) == 6
    for index, line in enumerate(block):
        ip, name = line.split("\t")
        assert plain_ip(ip) and name == names.dns_name(UID, index)


@FUZZ
@given(st.lists(ip_text, max_size=5))
@example(["10.0.0.1", "fe80::1%x\n10.6.6.6 evil"])
def test_ip_nodes_config_is_one_plain_ip_per_line(ips):
    text, err = outcome(lambda: files.ip_nodes_config(ips), ValueError)
    if err is None:
        assert text.splitlines() == ips
        assert all(plain_ip(ip) for ip in ips)
    else:
        assert any(not plain_ip(ip) for ip in ips)


@pytest.mark.parametrize("ip", ["fe80::1%x\n10.6.6.6 evil", "fe80::1%eth0", 17, None])
def test_zone_ids_and_non_strings_cannot_reach_the_files(ip):
    # Found by this fuzzing: ipaddress accepts an IPv6 zone ID holding anything, newlines
    # included, so an ipAddress in a clique entry could inject /etc/hosts and nodes.cfg lines
    # (agent/daemon/files.py check_peer_ip); a POD_IP like that is refused at startup
    # (agent/daemon/identity.py).
    with pytest.raises(ValueError, match="peer IP address"):
        files.render_hosts("", UID, {0: ip}, 2)
    with pytest.raises(ValueError, match="peer IP address"):
        files.ip_nodes_config([ip])
    if isinstance(ip, str):
        with pytest.raises(IdentityError, match="POD_IP"):
            identity_from(BASE | {names.ENV_POD_IP: ip})
