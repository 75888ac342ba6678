"""Daemon identity: every missing or invalid variable fails with one line naming it."""

from __future__ import annotations

import pytest

from agent.daemon.identity import CDI_NOT_APPLIED, DaemonIdentity, IdentityError, identity_from

UID = "3f2a9c1e-8d4b-4e7a-9c2d-1b5e6f7a8b9c"

VALID = {
    "CLIQUE_ID": "cluster-uuid.1",
    "COMPUTE_DOMAIN_UUID": UID,
    "COMPUTE_DOMAIN_NAME": "cd1",
    "COMPUTE_DOMAIN_NAMESPACE": "team-a",
    "NODE_NAME": "node-1",
    "POD_IP": "10.0.0.5",
    "POD_UID": "pod-uid-1",
    "POD_NAME": "computedomain-daemon-abc-xyz12",
    "POD_NAMESPACE": "nvidia-dra-driver",
    "MAX_NODES_PER_IMEX_DOMAIN": "18",
}


def test_full_env_parses() -> None:
    ident = identity_from(VALID)
    assert ident == DaemonIdentity(
        clique_id="cluster-uuid.1",
        cd_uid=UID,
        cd_name="cd1",
        cd_namespace="team-a",
        node_name="node-1",
        pod_ip="10.0.0.5",
        pod_uid="pod-uid-1",
        pod_name="computedomain-daemon-abc-xyz12",
        pod_namespace="nvidia-dra-driver",
        max_nodes=18,
    )
    assert not ident.non_fabric


def test_empty_clique_is_non_fabric() -> None:
    assert identity_from({**VALID, "CLIQUE_ID": ""}).non_fabric
    assert identity_from({k: v for k, v in VALID.items() if k != "CLIQUE_ID"}).non_fabric


def test_overrides_win() -> None:
    ident = identity_from(VALID, {"POD_IP": "127.0.1.7", "MAX_NODES_PER_IMEX_DOMAIN": "4"})
    assert (ident.pod_ip, ident.max_nodes) == ("127.0.1.7", 4)


def test_max_nodes_defaults_when_unset() -> None:
    env = {k: v for k, v in VALID.items() if k != "MAX_NODES_PER_IMEX_DOMAIN"}
    assert identity_from(env).max_nodes == 18


def test_frozen() -> None:
    with pytest.raises(AttributeError):
        identity_from(VALID).pod_ip = "1.2.3.4"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("COMPUTE_DOMAIN_UUID", None, CDI_NOT_APPLIED),
        ("COMPUTE_DOMAIN_UUID", "", CDI_NOT_APPLIED),
        ("COMPUTE_DOMAIN_UUID", "../etc", "COMPUTE_DOMAIN_UUID"),
        ("COMPUTE_DOMAIN_UUID", "a/b", "COMPUTE_DOMAIN_UUID"),
        ("COMPUTE_DOMAIN_UUID", "-bad-", "COMPUTE_DOMAIN_UUID"),
        ("COMPUTE_DOMAIN_UUID", "x" * 60, "COMPUTE_DOMAIN_UUID"),
        ("NODE_NAME", None, "NODE_NAME"),
        ("NODE_NAME", " ", "NODE_NAME"),
        ("POD_IP", None, "POD_IP"),
        ("POD_IP", "", "POD_IP"),
        ("POD_IP", "10.0.0.300", "POD_IP"),
        ("POD_IP", "node-1", "POD_IP"),
        ("POD_NAME", None, "POD_NAME"),
        ("POD_NAMESPACE", "", "POD_NAMESPACE"),
        ("MAX_NODES_PER_IMEX_DOMAIN", "abc", "MAX_NODES_PER_IMEX_DOMAIN"),
        ("MAX_NODES_PER_IMEX_DOMAIN", "0", "MAX_NODES_PER_IMEX_DOMAIN"),
        ("MAX_NODES_PER_IMEX_DOMAIN", "1001", "MAX_NODES_PER_IMEX_DOMAIN"),
        ("MAX_NODES_PER_IMEX_DOMAIN", "-3", "MAX_NODES_PER_IMEX_DOMAIN"),
    ],
)
def test_invalid(var: str, value: str | None, expected: str) -> None:
    env = dict(VALID)
    if value is None:
        del env[var]
    else:
        env[var] = value
    with pytest.raises(IdentityError) as info:
        identity_from(env)
    message = str(info.value)
    assert expected in message
    assert "\n" not in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("var", ["NODE_NAME", "POD_IP", "POD_NAME", "POD_NAMESPACE"])
def test_downward_api_hint(var: str) -> None:
    env = {k: v for k, v in VALID.items() if k != var}
    with pytest.raises(IdentityError, match="downward API"):
        identity_from(env)


def test_cdi_message_has_hint() -> None:
    env = {k: v for k, v in VALID.items() if k != "COMPUTE_DOMAIN_UUID"}
    with pytest.raises(IdentityError) as info:
        identity_from(env)
    assert str(info.value).startswith(CDI_NOT_APPLIED)
    assert len(str(info.value)) > len(CDI_NOT_APPLIED)
