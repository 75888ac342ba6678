"""The spec model: the JSON/YAML runtimes read, validation, and robust decoding."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cdi_helpers import (
    CLAIM_KIND,
    CLAIM_UID,
    DAEMON_CLAIM_UID,
    DOMAIN_UID,
    SCHEMA_DIR,
    all_channels_spec,
    assert_schema_valid,
    channel_claim_spec,
    daemon_claim_spec,
    read_yaml,
    schema_errors,
    write_checked,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi import (
    CDIError,
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    IntelRdt,
    Mount,
    NetDevice,
    Spec,
    load_spec,
    merge_edits,
    minimum_version,
    spec_from_text,
    spec_to_json,
    spec_to_yaml,
    validate_spec,
)

# --- the schema helper itself -----------------------------------------------------------


def test_schema_helper_accepts_the_official_example_and_rejects_bad_documents() -> None:
    assert schema_errors(json.loads((SCHEMA_DIR / "example-good.json").read_text())) == []
    bad = {
        "cdiVersion": "0.3.0",
        "kind": "v/c",
        "devices": [{"name": "d", "containerEdits": {"deviceNodes": [{"uid": -1}]}}],
    }
    errors = schema_errors(bad)
    assert any("'path' is a required property" in e for e in errors)
    assert any("-1 is less than the minimum of 0" in e for e in errors)  # via defs.json


# --- the specs the driver writes --------------------------------------------------------


def test_workload_channel_claim_spec(tmp_path: Path) -> None:
    spec = channel_claim_spec()
    assert minimum_version(spec) == "0.5.0"
    path = write_checked(spec, tmp_path, CLAIM_UID)
    assert path.read_text() == (
        "---\n"
        "cdiVersion: 0.5.0\n"
        "kind: k8s.compute-domain.nvidia.com/claim\n"
        "devices:\n"
        f"- name: {CLAIM_UID}-channel-0\n"
        "  containerEdits:\n"
        "    deviceNodes:\n"
        "    - path: /dev/nvidia-caps-imex-channels/channel0\n"
        "      hostPath: /dev/nvidia-caps-imex-channels/channel0\n"
        "      type: c\n"
        "      major: 234\n"
        "      fileMode: 438\n"
    )
    spec.cdi_version = "0.5.0"
    assert load_spec(path) == spec


def test_daemon_claim_spec_on_a_fabric_node(tmp_path: Path) -> None:
    spec = daemon_claim_spec()
    path = write_checked(spec, tmp_path, DAEMON_CLAIM_UID)
    raw = read_yaml(path)
    assert raw["cdiVersion"] == "0.5.0"  # the claim UID makes the device name start with a digit
    edits = raw["devices"][0]["containerEdits"]
    assert list(edits) == ["env", "deviceNodes", "mounts"]
    assert edits["env"] == [
        f"CLIQUE_ID={DOMAIN_UID}.32766",
        f"COMPUTE_DOMAIN_UUID={DOMAIN_UID}",
        "COMPUTE_DOMAIN_NAME=imex-domain",
        "COMPUTE_DOMAIN_NAMESPACE=default",
    ]
    assert edits["deviceNodes"] == [
        {
            "path": "/dev/nvidia-caps/nvidia-cap7",
            "type": "c",
            "major": 238,
            "minor": 7,
            "fileMode": 0o400,
        }
    ]
    assert edits["mounts"] == [
        {
            "hostPath": f"/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/{DOMAIN_UID}",
            "containerPath": "/imexd",
            "options": ["rw", "nosuid", "nodev", "bind"],
        }
    ]
    spec.cdi_version = "0.5.0"
    assert load_spec(path) == spec


def test_all_2048_channels_spec(tmp_path: Path) -> None:
    spec = all_channels_spec()
    path = write_checked(spec, tmp_path, CLAIM_UID)
    nodes = read_yaml(path)["devices"][0]["containerEdits"]["deviceNodes"]
    assert len(nodes) == 2048
    assert "minor" not in nodes[0]  # channel 0: zero minor is omitted, as Go omits it
    assert nodes[2047]["minor"] == 2047
    spec.cdi_version = "0.5.0"
    assert load_spec(path) == spec


def test_full_featured_spec_round_trips_through_a_file(tmp_path: Path) -> None:
    spec = Spec(
        kind="vendor.com/gpu",
        annotations={"vendor.com/owner": "driver"},
        container_edits=ContainerEdits(
            env=["SHARED=1"],
            hooks=[
                Hook(
                    hook_name="createContainer",
                    path="/bin/hook",
                    args=["hook", "-v"],
                    env=["DEBUG=1"],
                    timeout=0,
                )
            ],
            additional_gids=[0, 44],
        ),
        devices=[
            Device(
                name="gpu0",
                annotations={"note": "x"},
                container_edits=ContainerEdits(
                    device_nodes=[
                        DeviceNode(
                            path="/dev/gpu0",
                            file_mode=0,
                            uid=0,
                            gid=0,
                            permissions="rw",
                            type="b",
                            major=-1,
                        )
                    ],
                    net_devices=[NetDevice(host_interface_name="eth1", name="net0")],
                    intel_rdt=IntelRdt(
                        clos_id="gold",
                        l3_cache_schema="L3:0=f",
                        mem_bw_schema="MB:0=50",
                        schemata=["L2:0=3"],
                        enable_monitoring=True,
                    ),
                    mounts=[Mount(host_path="tmpfs", container_path="/scratch", type="tmpfs")],
                ),
            )
        ],
    )
    path = write_checked(spec, tmp_path, "full")
    loaded = load_spec(path)
    assert loaded.cdi_version == "1.1.0"
    spec.cdi_version = "1.1.0"
    assert loaded == spec
    node = read_yaml(path)["devices"][0]["containerEdits"]["deviceNodes"][0]
    # fileMode/uid/gid are pointers in Go: an explicit zero is kept.
    assert node == {
        "path": "/dev/gpu0",
        "type": "b",
        "major": -1,
        "fileMode": 0,
        "permissions": "rw",
        "uid": 0,
        "gid": 0,
    }


# --- the JSON shape ---------------------------------------------------------------------


def test_keys_come_in_spec_order() -> None:
    spec = Spec(
        kind="v/c",
        cdi_version="0.6.0",
        annotations={"a": "b"},
        container_edits=ContainerEdits(env=["A=1"]),
        devices=[
            Device(name="d", annotations={"a": "b"}, container_edits=ContainerEdits(env=["B=1"]))
        ],
    )
    data = spec.to_dict()
    assert list(data) == ["cdiVersion", "kind", "annotations", "devices", "containerEdits"]
    assert list(data["devices"][0]) == ["name", "annotations", "containerEdits"]
    full = DeviceNode(
        path="/p",
        host_path="/h",
        type="c",
        major=1,
        minor=2,
        file_mode=1,
        permissions="r",
        uid=3,
        gid=4,
    ).to_dict()
    assert list(full) == [
        "path",
        "hostPath",
        "type",
        "major",
        "minor",
        "fileMode",
        "permissions",
        "uid",
        "gid",
    ]
    edits = ContainerEdits(
        env=["A=1"],
        device_nodes=[DeviceNode(path="/p")],
        net_devices=[NetDevice(host_interface_name="h", name="n")],
        hooks=[Hook(hook_name="prestart", path="/h")],
        mounts=[Mount(host_path="/a", container_path="/b")],
        intel_rdt=IntelRdt(),
        additional_gids=[1],
    ).to_dict()
    assert list(edits) == [
        "env",
        "deviceNodes",
        "netDevices",
        "hooks",
        "mounts",
        "intelRdt",
        "additionalGids",
    ]


def test_empty_optional_parts_are_omitted() -> None:
    spec = Spec(
        kind="v/c",
        cdi_version="0.3.0",
        devices=[Device(name="d", container_edits=ContainerEdits())],
    )
    assert spec.to_dict() == {
        "cdiVersion": "0.3.0",
        "kind": "v/c",
        "devices": [{"name": "d", "containerEdits": {}}],
    }
    assert DeviceNode(path="/dev/x").to_dict() == {"path": "/dev/x"}
    assert Mount(host_path="/a", container_path="/b").to_dict() == {
        "hostPath": "/a",
        "containerPath": "/b",
    }
    assert Hook(hook_name="poststop", path="/h").to_dict() == {"hookName": "poststop", "path": "/h"}


def test_yaml_starts_with_document_marker_and_reparses() -> None:
    spec = daemon_claim_spec()
    spec.cdi_version = "0.5.0"
    text = spec_to_yaml(spec)
    assert text.startswith("---\ncdiVersion: 0.5.0\nkind: ")
    assert spec_from_text(text) == spec


def test_model_objects_are_independent_of_their_dicts() -> None:
    spec = daemon_claim_spec()
    data = spec.to_dict()
    data["devices"][0]["containerEdits"]["env"].append("X=1")
    assert "X=1" not in spec.devices[0].container_edits.env


# --- validation -------------------------------------------------------------------------


def _valid() -> Spec:
    spec = daemon_claim_spec()
    spec.cdi_version = "1.1.0"
    return spec


def _edits(spec: Spec) -> ContainerEdits:
    return spec.devices[0].container_edits


INVALID: list[tuple[str, Callable[[Spec], Any], str]] = [
    ("kind without class", lambda s: setattr(s, "kind", "nvidia.com"), "spec.kind"),
    ("bad vendor", lambda s: setattr(s, "kind", "-nvidia.com/claim"), "must start with a letter"),
    (
        "bad device name",
        lambda s: setattr(s.devices[0], "name", "bad name"),
        "spec.devices[0]: invalid device name 'bad name'",
    ),
    (
        "duplicate device",
        lambda s: s.devices.append(s.devices[0]),
        "spec.devices[1]: device name '8d3e2f10-4a5b-4c6d-9e7f-a0b1c2d3e4f5-daemon-0' is already "
        "used by spec.devices[0]",
    ),
    ("no devices", lambda s: s.devices.clear(), "at least one device"),
    (
        "empty device edits",
        lambda s: setattr(s.devices[0], "container_edits", ContainerEdits()),
        "has empty containerEdits",
    ),
    (
        "env without =",
        lambda s: _edits(s).env.append("NOVALUE"),
        "spec.devices[0].containerEdits.env[4]: invalid environment variable 'NOVALUE'",
    ),
    ("env without name", lambda s: _edits(s).env.append("=x"), "invalid environment variable"),
    ("spec-level env", lambda s: s.container_edits.env.append("BAD"), "spec.containerEdits.env[0]"),
    (
        "device node type",
        lambda s: setattr(_edits(s).device_nodes[0], "type", "x"),
        "invalid type 'x' (expected one of b, c, u, p)",
    ),
    (
        "device node path",
        lambda s: setattr(_edits(s).device_nodes[0], "path", ""),
        "deviceNodes[0]: missing device path",
    ),
    (
        "permissions",
        lambda s: setattr(_edits(s).device_nodes[0], "permissions", "rwx"),
        "invalid permissions 'rwx'",
    ),
    (
        "uid range",
        lambda s: setattr(_edits(s).device_nodes[0], "uid", 2**32),
        "deviceNodes[0].uid: 4294967296 is out of range",
    ),
    ("negative gid", lambda s: setattr(_edits(s).device_nodes[0], "gid", -1), ".gid: -1"),
    ("major range", lambda s: setattr(_edits(s).device_nodes[0], "major", 2**63), ".major"),
    (
        "hook name",
        lambda s: _edits(s).hooks.append(Hook(hook_name="preStart", path="/h")),
        "invalid hook name 'preStart'",
    ),
    (
        "hook path",
        lambda s: _edits(s).hooks.append(Hook(hook_name="prestart", path="")),
        "prestart hook has an empty path",
    ),
    (
        "hook env",
        lambda s: _edits(s).hooks.append(Hook(hook_name="prestart", path="/h", env=["X"])),
        "hooks[0].env[0]",
    ),
    (
        "mount host path",
        lambda s: setattr(_edits(s).mounts[0], "host_path", ""),
        "mounts[0]: mount has an empty hostPath",
    ),
    (
        "mount container path",
        lambda s: setattr(_edits(s).mounts[0], "container_path", ""),
        "mount has an empty containerPath",
    ),
    (
        "net device name",
        lambda s: _edits(s).net_devices.append(NetDevice(host_interface_name="eth0", name="")),
        "net device has an empty name",
    ),
    (
        "duplicate net device",
        lambda s: _edits(s).net_devices.extend(
            [
                NetDevice(host_interface_name="eth0", name="a"),
                NetDevice(host_interface_name="eth0", name="b"),
            ]
        ),
        "netDevices[1]: hostInterfaceName 'eth0' is already used by",
    ),
    (
        "closID",
        lambda s: setattr(_edits(s), "intel_rdt", IntelRdt(clos_id="..")),
        "intelRdt.closID: '..' is not a valid file name",
    ),
    ("gid list", lambda s: _edits(s).additional_gids.append(-5), "additionalGids[0]"),
    (
        "annotation key",
        lambda s: s.annotations.update({"bad key": "v"}),
        "spec.annotations: invalid annotation key 'bad key'",
    ),
    (
        "annotation prefix",
        lambda s: s.devices[0].annotations.update({"/x": "v"}),
        "prefix part must be non-empty",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "problem"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_specs_are_rejected_with_a_clear_message(
    case: str, mutate: Callable[[Spec], Any], problem: str
) -> None:
    spec = _valid()
    validate_spec(spec)
    mutate(spec)
    with pytest.raises(CDIError) as excinfo:
        validate_spec(spec)
    assert problem in str(excinfo.value)


@pytest.mark.parametrize(
    "hook_name",
    ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
)
def test_every_oci_hook_name_is_accepted(hook_name: str, tmp_path: Path) -> None:
    spec = _valid()
    _edits(spec).hooks.append(Hook(hook_name=hook_name, path="/bin/true"))
    write_checked(spec, tmp_path, hook_name)


@pytest.mark.parametrize("node_type", ["b", "c", "u", "p", ""])
def test_every_device_node_type_is_accepted(node_type: str) -> None:
    spec = _valid()
    _edits(spec).device_nodes[0].type = node_type
    validate_spec(spec)


def test_root_clos_id_is_allowed() -> None:
    spec = _valid()
    _edits(spec).intel_rdt = IntelRdt(clos_id="/")
    validate_spec(spec)


# --- decoding ---------------------------------------------------------------------------

MINIMAL: dict[str, Any] = {
    "cdiVersion": "0.3.0",
    "kind": "v/c",
    "devices": [{"name": "d", "containerEdits": {"env": ["A=1"]}}],
}


def _with(path: list[str | int], value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(MINIMAL))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


def _without(*keys: str) -> dict[str, Any]:
    return {k: v for k, v in MINIMAL.items() if k not in keys}


DECODE_ERRORS: list[tuple[object, str]] = [
    (None, "spec: expected an object, got null"),
    ([], "spec: expected an object, got array"),
    (_without("cdiVersion"), "spec: missing required key 'cdiVersion'"),
    (_without("kind"), "spec: missing required key 'kind'"),
    (_without("devices"), "spec: missing required key 'devices'"),
    (_with(["devices"], {}), "spec.devices: expected an array, got object"),
    (_with(["kind"], 5), "spec.kind: expected a string, got integer"),
    (_with(["devices", 0], "d"), "spec.devices[0]: expected an object, got string"),
    (
        _with(["devices", 0, "containerEdits"], None),
        "spec.devices[0]: missing required key 'containerEdits'",
    ),
    (_with(["devices", 0, "name"], None), "spec.devices[0]: missing required key 'name'"),
    (
        _with(["devices", 0, "containerEdits", "env"], "A=1"),
        "spec.devices[0].containerEdits.env: expected an array, got string",
    ),
    (
        _with(["devices", 0, "containerEdits", "env"], [1]),
        "spec.devices[0].containerEdits.env[0]: expected a string, got integer",
    ),
    (
        _with(["devices", 0, "containerEdits", "deviceNodes"], [{}]),
        "deviceNodes[0]: missing required key 'path'",
    ),
    (
        _with(["devices", 0, "containerEdits", "deviceNodes"], [{"path": "/d", "major": True}]),
        "deviceNodes[0].major: expected an integer, got boolean",
    ),
    (
        _with(["devices", 0, "containerEdits", "deviceNodes"], [{"path": "/d", "fileMode": 4.5}]),
        "deviceNodes[0].fileMode: expected an integer, got number",
    ),
    (
        _with(["devices", 0, "containerEdits", "mounts"], [{"hostPath": "/a"}]),
        "mounts[0]: missing required key 'containerPath'",
    ),
    (
        _with(["devices", 0, "containerEdits", "hooks"], [{"path": "/h"}]),
        "hooks[0]: missing required key 'hookName'",
    ),
    (
        _with(["devices", 0, "containerEdits", "netDevices"], [{"name": "n"}]),
        "netDevices[0]: missing required key 'hostInterfaceName'",
    ),
    (
        _with(["devices", 0, "containerEdits", "intelRdt"], {"enableMonitoring": "yes"}),
        "intelRdt.enableMonitoring: expected a boolean, got string",
    ),
    (
        _with(["devices", 0, "containerEdits", "additionalGids"], ["0"]),
        "additionalGids[0]: expected an integer, got string",
    ),
    (_with(["annotations"], {"a": 1}), "spec.annotations.a: expected a string, got integer"),
    (_with(["annotations"], []), "spec.annotations: expected an object, got array"),
    (
        _with(["devices", 0, "containerEdits", "extra"], 1),
        "spec.devices[0].containerEdits: unknown key 'extra'",
    ),
    ({**MINIMAL, 1: "x"}, "spec: keys must be strings, got integer 1"),
]


@pytest.mark.parametrize(("data", "problem"), DECODE_ERRORS)
def test_from_dict_names_the_bad_key(data: object, problem: str) -> None:
    with pytest.raises(CDIError) as excinfo:
        Spec.from_dict(data)
    assert problem in str(excinfo.value)


def test_nulls_for_optional_keys_read_as_absent() -> None:
    data = _with(["devices", 0, "containerEdits", "mounts"], None)
    data["annotations"] = None
    data["containerEdits"] = None
    spec = Spec.from_dict(data)
    assert spec == Spec.from_dict(MINIMAL)
    assert spec.to_dict() == MINIMAL


@pytest.mark.parametrize(
    "item",
    [
        DeviceNode(
            path="/d",
            host_path="/h",
            type="c",
            major=1,
            minor=2,
            file_mode=0o640,
            permissions="rw",
            uid=0,
            gid=5,
        ),
        Mount(host_path="/a", container_path="/b", options=["ro"], type="bind"),
        Hook(hook_name="poststart", path="/h", args=["a"], env=["E=1"], timeout=30),
        NetDevice(host_interface_name="eth0", name="net0"),
        IntelRdt(
            clos_id="c",
            l3_cache_schema="l3",
            mem_bw_schema="mb",
            schemata=["s"],
            enable_monitoring=True,
        ),
        daemon_claim_spec().devices[0],
        daemon_claim_spec().devices[0].container_edits,
    ],
    ids=lambda item: type(item).__name__,
)
def test_each_model_class_round_trips(item: Any) -> None:
    assert type(item).from_dict(item.to_dict()) == item
    assert type(item).from_dict(json.loads(json.dumps(item.to_dict()))) == item


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)

SPEC_KEYS = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
DEVICE_KEYS = ("name", "annotations", "containerEdits")
EDIT_KEYS = ("env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt", "additionalGids")
LEAF_KEYS = (
    "path",
    "hostPath",
    "type",
    "major",
    "minor",
    "fileMode",
    "permissions",
    "uid",
    "gid",
    "containerPath",
    "options",
    "hookName",
    "args",
    "env",
    "timeout",
    "hostInterfaceName",
    "name",
    "closID",
    "l3CacheSchema",
    "memBwSchema",
    "schemata",
    "enableMonitoring",
)
LEAF_VALUES = (
    JSON_VALUES
    | st.text(max_size=8)
    | st.integers(-(2**64), 2**64)
    | st.lists(st.text(max_size=4) | st.integers(), max_size=3)
)
LEAVES = st.dictionaries(st.sampled_from(LEAF_KEYS), LEAF_VALUES, max_size=5)
EDITS = st.dictionaries(
    st.sampled_from(EDIT_KEYS),
    st.lists(st.text(max_size=6), max_size=3)
    | st.lists(LEAVES, max_size=3)
    | LEAVES
    | st.lists(st.integers(), max_size=3)
    | JSON_VALUES,
    max_size=4,
)
DEVICES = st.lists(
    st.dictionaries(
        st.sampled_from(DEVICE_KEYS),
        st.text(max_size=8)
        | EDITS
        | st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=2)
        | JSON_VALUES,
        max_size=3,
    )
    | JSON_VALUES,
    max_size=3,
)
SPECS = st.fixed_dictionaries(
    {
        "cdiVersion": st.sampled_from(["0.3.0", "0.5.0", "1.1.0", "v0.6.0", "9"]) | JSON_VALUES,
        "kind": st.sampled_from(["vendor.com/gpu", "a/b.c", "bad"]) | JSON_VALUES,
        "devices": DEVICES | JSON_VALUES,
    },
    optional={
        "annotations": st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=2)
        | JSON_VALUES,
        "containerEdits": EDITS | JSON_VALUES,
    },
)


def _decode_and_validate(data: object) -> None:
    try:
        spec = Spec.from_dict(data)
    except CDIError:
        return
    # Whatever decodes re-encodes to the same model, and validation only ever says CDIError.
    assert Spec.from_dict(spec.to_dict()) == spec
    try:
        validate_spec(spec)
    except CDIError:
        return
    assert_schema_valid(spec.to_dict())
    assert spec_from_text(spec_to_yaml(spec)) == spec


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES)
def test_from_dict_on_any_json_raises_only_cdi_error(data: object) -> None:
    _decode_and_validate(data)


@settings(max_examples=200, deadline=None)
@given(SPECS)
def test_from_dict_on_spec_shaped_json_raises_only_cdi_error(data: dict[str, Any]) -> None:
    _decode_and_validate(data)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([DeviceNode, Mount, Hook, NetDevice, IntelRdt, ContainerEdits, Device]),
    LEAVES | EDITS | JSON_VALUES,
)
def test_every_model_class_decodes_any_json_or_raises_cdi_error(cls: Any, data: object) -> None:
    try:
        item = cls.from_dict(data)
    except CDIError:
        return
    assert cls.from_dict(item.to_dict()) == item


_NAME = st.from_regex(r"\A[A-Za-z0-9]([A-Za-z0-9_.:-]{0,6}[A-Za-z0-9])?\Z")
_TEXT = st.text(max_size=10)
_PATH = st.text(min_size=1, max_size=10)
_ENV = st.builds(lambda k, v: f"{k}={v}", st.from_regex(r"\A[A-Z_]{1,5}\Z"), _TEXT)
_UINT32 = st.integers(0, 2**32 - 1)
MODEL_EDITS = st.builds(
    ContainerEdits,
    env=st.lists(_ENV, max_size=3),
    device_nodes=st.lists(
        st.builds(
            DeviceNode,
            path=_PATH,
            host_path=_TEXT,
            type=st.sampled_from(["", "b", "c", "u", "p"]),
            major=st.integers(-(2**63), 2**63 - 1),
            minor=st.integers(-(2**63), 2**63 - 1),
            file_mode=st.none() | _UINT32,
            permissions=st.sampled_from(["", "r", "rw", "rwm"]),
            uid=st.none() | _UINT32,
            gid=st.none() | _UINT32,
        ),
        max_size=2,
    ),
    mounts=st.lists(
        st.builds(
            Mount,
            host_path=_PATH,
            container_path=_PATH,
            options=st.lists(_TEXT, max_size=2),
            type=_TEXT,
        ),
        max_size=2,
    ),
    hooks=st.lists(
        st.builds(
            Hook,
            hook_name=st.sampled_from(["prestart", "poststop"]),
            path=_PATH,
            args=st.lists(_TEXT, max_size=2),
            env=st.lists(_ENV, max_size=2),
            timeout=st.none() | _UINT32,
        ),
        max_size=2,
    ),
    intel_rdt=st.none()
    | st.builds(
        IntelRdt,
        clos_id=st.sampled_from(["", "/", "gold"]),
        l3_cache_schema=_TEXT,
        schemata=st.lists(_TEXT, max_size=2),
        enable_monitoring=st.booleans(),
    ),
    additional_gids=st.lists(_UINT32, max_size=2),
)
MODEL_SPECS = st.builds(
    Spec,
    kind=st.sampled_from(["vendor.com/gpu", "k8s.compute-domain.nvidia.com/claim", "a/b.c"]),
    devices=st.lists(
        st.builds(
            Device,
            name=_NAME,
            container_edits=MODEL_EDITS,
            annotations=st.dictionaries(st.sampled_from(["a", "x.io/b"]), _TEXT, max_size=1),
        ),
        min_size=1,
        max_size=3,
    ),
    annotations=st.dictionaries(st.sampled_from(["owner", "vendor.com/note"]), _TEXT, max_size=2),
    container_edits=MODEL_EDITS,
)


@settings(max_examples=80, deadline=None)
@given(MODEL_SPECS)
def test_any_valid_spec_survives_yaml_and_json_and_matches_the_schema(spec: Spec) -> None:
    spec.cdi_version = minimum_version(spec)
    try:
        validate_spec(spec)
    except CDIError:
        return  # e.g. an empty path or a duplicate name: refused, and with our error type
    assert_schema_valid(spec.to_dict())
    assert spec_from_text(spec_to_yaml(spec)) == spec
    assert spec_from_text(spec_to_json(spec), is_json=True) == spec


# --- merging ----------------------------------------------------------------------------


def test_merge_appends_in_order_and_the_last_intel_rdt_wins() -> None:
    first = ContainerEdits(
        env=["A=1"],
        additional_gids=[1],
        intel_rdt=IntelRdt(clos_id="a"),
        mounts=[Mount(host_path="/1", container_path="/1")],
    )
    second = ContainerEdits(
        env=["B=2"],
        additional_gids=[2],
        intel_rdt=IntelRdt(clos_id="b"),
        device_nodes=[DeviceNode(path="/dev/x")],
    )
    third = ContainerEdits(env=["C=3"])
    merged = merge_edits(first, second, third)
    assert merged.env == ["A=1", "B=2", "C=3"]
    assert merged.additional_gids == [1, 2]
    assert merged.intel_rdt == IntelRdt(clos_id="b")
    assert [m.host_path for m in merged.mounts] == ["/1"]
    assert [n.path for n in merged.device_nodes] == ["/dev/x"]
    merged.mounts[0].host_path = "/changed"
    assert first.mounts[0].host_path == "/1"
    assert merge_edits() == ContainerEdits()


def test_device_lookup_by_unqualified_name() -> None:
    spec = daemon_claim_spec()
    assert spec.device(f"{DAEMON_CLAIM_UID}-daemon-0") is spec.devices[0]
    assert spec.device("nope") is None
    assert spec.kind == CLAIM_KIND


_node_numbers = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=False), st.sampled_from([-(2**63) - 1, 2**64]),
    st.integers(min_value=-(2**63), max_value=2**63),
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(
    path=st.sampled_from(["", "/dev/x", 5]),
    type_=st.sampled_from(["", "c", "b", "x", None]),
    perms=st.sampled_from(["", "rw", "rwm", "rwx", "mr", None]),
    numbers=st.tuples(*[_node_numbers] * 5),
)
def test_quick_device_node_check_only_passes_what_the_full_check_passes(
    path: Any, type_: Any, perms: Any, numbers: tuple[Any, ...]
) -> None:
    """validate.py skips the full, message-building check for nodes the quick one passes."""
    from cdi.validate import _check_device_node, _plainly_valid_node

    major, minor, mode, uid, gid = numbers
    node = DeviceNode(path=path, type=type_, permissions=perms, major=major, minor=minor,
                      file_mode=mode, uid=uid, gid=gid)  # fmt: skip
    try:
        full = True
        _check_device_node("n", node)
    except (CDIError, TypeError):
        full = False
    if _plainly_valid_node(node):
        assert full
    channel = DeviceNode(path="/dev/c7", type="c", major=234, minor=7, file_mode=0o666)
    assert _plainly_valid_node(channel)
