"""Claim CDI specs: channel and daemon edits, the root transform, CDI IDs, orphans, UID safety."""

from __future__ import annotations

import dataclasses
import json
import posixpath
import random
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from cdi_helpers import assert_schema_valid, read_yaml

from agent.cdispecs import (
    RootTransform,
    UnsafeClaimUIDError,
    channel_edits,
    claim_cdi_ids,
    claim_spec,
    claim_spec_path,
    daemon_edits,
    orphaned_claim_specs,
    remove_claim_spec,
    transform_spec,
    write_claim_spec,
)
from agent.cdispecs.simplify import path_order, simplify_edits
from agent.discovery import CharDevice
from cdi import (
    CDIError,
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    Mount,
    Spec,
    load_spec,
    minimum_version,
    validate_spec,
)

UID = "c1a2b3d4-0000-4000-8000-000000000001"  # starts with a letter
DIGIT_UID = "5f0c1e9a-2b3d-4c5e-8f60-718293a4b5c6"  # starts with a digit
CD_UID = "0b6a7c8d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
MAJOR = 234
CAP_MAJOR = 238
CLIQUE = "8a0d5e6f-1111-2222-3333-444455556666.32766"
DOMAIN_DIR = Path(f"/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/{CD_UID}")
DEFAULT = RootTransform("/driver-root", "/")  # the default deployment
IDENTITY = RootTransform("/", "/")
CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"


def written(spec: Spec | None, cdi_root: Path, claim_uid: str) -> dict:
    """Write the claim spec, check the file against the official schema and our loader,
    and return the document as read independently."""
    assert spec is not None
    validate_spec(dataclasses.replace(spec, cdi_version=minimum_version(spec)))
    path = write_claim_spec(cdi_root, claim_uid, spec)
    assert path == claim_spec_path(cdi_root, claim_uid)
    assert path.name == f"k8s.compute-domain.nvidia.com-claim_{claim_uid}.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = read_yaml(path)
    assert_schema_valid(doc)
    assert load_spec(path).to_dict() == doc
    assert path.read_text().startswith("---\n")
    return doc


# --- edits --------------------------------------------------------------------------


def test_channel_edits_give_char_nodes_with_mode_0666():
    edits = channel_edits(MAJOR, [0, 7])
    assert [n.to_dict() for n in edits.device_nodes] == [
        {"path": f"{CHANNEL_DIR}/channel0", "type": "c", "major": MAJOR, "fileMode": 0o666},
        {
            "path": f"{CHANNEL_DIR}/channel7",
            "type": "c",
            "major": MAJOR,
            "minor": 7,
            "fileMode": 0o666,
        },
    ]
    assert not edits.env and not edits.mounts


def test_daemon_edits_env_order_mount_and_cap_node():
    edits = daemon_edits(
        CLIQUE,
        CD_UID,
        "imex-domain",
        "team-a",
        DOMAIN_DIR,
        CharDevice("/dev/nvidia-caps/nvidia-cap7", CAP_MAJOR, 7, 0o400),
    )
    assert edits.env == [
        f"CLIQUE_ID={CLIQUE}",
        f"COMPUTE_DOMAIN_UUID={CD_UID}",
        "COMPUTE_DOMAIN_NAME=imex-domain",
        "COMPUTE_DOMAIN_NAMESPACE=team-a",
    ]
    assert [m.to_dict() for m in edits.mounts] == [
        {
            "hostPath": str(DOMAIN_DIR),
            "containerPath": "/imexd",
            "options": ["rw", "nosuid", "nodev", "bind"],
        }
    ]
    assert [n.to_dict() for n in edits.device_nodes] == [
        {
            "path": "/dev/nvidia-caps/nvidia-cap7",
            "type": "c",
            "major": CAP_MAJOR,
            "minor": 7,
            "fileMode": 0o400,
        }
    ]


def test_daemon_edits_without_cap_have_no_device_nodes():
    edits = daemon_edits("", CD_UID, "d", "ns", DOMAIN_DIR, None)
    assert edits.env[0] == "CLIQUE_ID="
    assert edits.device_nodes == []


# --- channel claims -----------------------------------------------------------------------


def test_channel_single_default_deployment_is_the_reference_example(tmp_path):
    spec = claim_spec(UID, [("channel-0", channel_edits(MAJOR, [0]))], transform=DEFAULT)
    doc = written(spec, tmp_path, UID)
    assert doc == {
        "cdiVersion": "0.5.0",
        "kind": "k8s.compute-domain.nvidia.com/claim",
        "devices": [
            {
                "name": f"{UID}-channel-0",
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": f"{CHANNEL_DIR}/channel0",
                            "hostPath": f"{CHANNEL_DIR}/channel0",
                            "type": "c",
                            "major": MAJOR,
                            "fileMode": 438,
                        }
                    ]
                },
            }
        ],
    }


@pytest.mark.parametrize(
    ("claim_uid", "transform", "version"),
    [
        (UID, None, "0.3.0"),
        (UID, IDENTITY, "0.3.0"),  # equal roots: no hostPath filled in
        (UID, DEFAULT, "0.5.0"),  # hostPath filled in by the transform
        (DIGIT_UID, None, "0.5.0"),  # device name starts with a digit
        (DIGIT_UID, DEFAULT, "0.5.0"),
    ],
)
def test_channel_single_minimal_version(tmp_path, claim_uid, transform, version):
    spec = claim_spec(claim_uid, [("channel-0", channel_edits(MAJOR, [0]))], transform=transform)
    doc = written(spec, tmp_path, claim_uid)
    assert doc["cdiVersion"] == version
    node = doc["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert ("hostPath" in node) == (transform is DEFAULT)


def test_channel_all_2048_nodes_sorted_by_depth_then_lexicographically(tmp_path):
    channels = list(range(2048))
    random.Random(7).shuffle(channels)
    spec = claim_spec(UID, [("channel-0", channel_edits(MAJOR, channels))], transform=DEFAULT)
    doc = written(spec, tmp_path, UID)
    nodes = doc["devices"][0]["containerEdits"]["deviceNodes"]
    paths = [n["path"] for n in nodes]
    assert paths[:6] == [f"{CHANNEL_DIR}/channel{i}" for i in (0, 1, 10, 100, 1000, 1001)]
    assert paths == [f"{CHANNEL_DIR}/channel{i}" for i in sorted(range(2048), key=str)]
    assert all(n["hostPath"] == n["path"] and n["major"] == MAJOR for n in nodes)
    assert all(n.get("minor", 0) == int(n["path"].rsplit("channel", 1)[1]) for n in nodes)
    assert doc["cdiVersion"] == "0.5.0"


def test_claim_spec_does_not_modify_the_given_edits():
    edits = channel_edits(MAJOR, [2, 1])
    claim_spec(UID, [("channel-0", edits)], transform=DEFAULT)
    assert [n.path for n in edits.device_nodes] == [
        f"{CHANNEL_DIR}/channel2",
        f"{CHANNEL_DIR}/channel1",
    ]
    assert all(n.host_path == "" for n in edits.device_nodes)


def test_claim_spec_dedupes_identical_entries():
    edits = ContainerEdits(device_nodes=channel_edits(MAJOR, [0, 0, 1]).device_nodes)
    spec = claim_spec(UID, [("channel-0", edits)])
    assert spec is not None
    assert len(spec.devices[0].container_edits.device_nodes) == 2


def _json_dedupe(items: list) -> list:
    """The exact-duplicate rule as first written: equal JSON, keys sorted."""
    seen, out = set(), []
    for item in items:
        key = json.dumps(item.to_dict(), sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def test_dedupe_keys_agree_with_the_json_of_each_entry():
    """Entries that differ in any one field are kept, equal ones dropped, as comparing
    their JSON does."""
    base = DeviceNode(path="/dev/a", host_path="/h", type="c", major=1, minor=2, file_mode=0o666,
                      permissions="rw", uid=0, gid=0)  # fmt: skip
    nodes = [base, dataclasses.replace(base)]
    for f in dataclasses.fields(DeviceNode):
        value = getattr(base, f.name)
        changed = None if value == 0 and f.name in ("uid", "gid") else (
            value + 1 if isinstance(value, int) else value + "x")  # fmt: skip
        nodes += [dataclasses.replace(base, **{f.name: changed})] * 2
    mount = Mount(host_path="/h", container_path="/c", options=["ro"], type="bind")
    mounts = [mount, dataclasses.replace(mount, options=["ro"]),
              dataclasses.replace(mount, type="")]  # fmt: skip
    hook = Hook(hook_name="createContainer", path="/p", args=["a"], env=["A=1"], timeout=0)
    hooks = [hook, dataclasses.replace(hook, args=["a"]), dataclasses.replace(hook, timeout=None)]
    edits = simplify_edits(ContainerEdits(device_nodes=nodes, mounts=mounts, hooks=hooks))
    assert sorted(edits.device_nodes, key=repr) == sorted(_json_dedupe(nodes), key=repr)
    assert edits.mounts == _json_dedupe(mounts)
    assert edits.hooks == _json_dedupe(hooks)
    assert len(edits.device_nodes) == 1 + len(dataclasses.fields(DeviceNode))


@pytest.mark.parametrize(
    "path", ["/", "/a", "/a/", "//a", "///a", "/a//b", "/a/./b", "/a/../b", "/a/.b", "/.", "/..",
             "/a/.", "a/b", "./a", "", "/dev/nvidia-caps-imex-channels/channel7"])  # fmt: skip
def test_path_order_is_depth_then_normalised_path(path):
    clean = posixpath.normpath(path) if path else path
    assert path_order(path) == (clean.count("/"), clean)


# --- daemon claims -----------------------------------------------------------------------


def test_daemon_claim_on_fabric_node(tmp_path):
    cap = CharDevice("/dev/nvidia-caps/nvidia-cap7", CAP_MAJOR, 7, 256)
    edits = daemon_edits(CLIQUE, CD_UID, "imex-domain", "default", DOMAIN_DIR, cap)
    doc = written(claim_spec(UID, [("daemon-0", edits)], transform=DEFAULT), tmp_path, UID)
    assert doc == {
        "cdiVersion": "0.5.0",
        "kind": "k8s.compute-domain.nvidia.com/claim",
        "devices": [
            {
                "name": f"{UID}-daemon-0",
                "containerEdits": {
                    "env": [
                        f"CLIQUE_ID={CLIQUE}",
                        f"COMPUTE_DOMAIN_UUID={CD_UID}",
                        "COMPUTE_DOMAIN_NAME=imex-domain",
                        "COMPUTE_DOMAIN_NAMESPACE=default",
                    ],
                    "deviceNodes": [
                        {
                            "path": "/dev/nvidia-caps/nvidia-cap7",
                            "hostPath": "/dev/nvidia-caps/nvidia-cap7",
                            "type": "c",
                            "major": CAP_MAJOR,
                            "minor": 7,
                            "fileMode": 256,
                        }
                    ],
                    "mounts": [
                        {
                            "hostPath": str(DOMAIN_DIR),
                            "containerPath": "/imexd",
                            "options": ["rw", "nosuid", "nodev", "bind"],
                        }
                    ],
                },
            }
        ],
    }


@pytest.mark.parametrize(("claim_uid", "version"), [(UID, "0.3.0"), (DIGIT_UID, "0.5.0")])
def test_daemon_claim_on_non_fabric_node(tmp_path, claim_uid, version):
    edits = daemon_edits("", CD_UID, "imex-domain", "default", DOMAIN_DIR, None)
    doc = written(
        claim_spec(claim_uid, [("daemon-0", edits)], transform=DEFAULT), tmp_path, claim_uid
    )
    assert doc["cdiVersion"] == version
    device = doc["devices"][0]
    assert device["name"] == f"{claim_uid}-daemon-0"
    assert device["containerEdits"]["env"][0] == "CLIQUE_ID="
    assert "deviceNodes" not in device["containerEdits"]
    # The plugin dir is not under the driver root: the transform leaves it alone.
    assert device["containerEdits"]["mounts"][0]["hostPath"] == str(DOMAIN_DIR)


def test_no_edits_means_no_spec(tmp_path):
    assert claim_spec(UID, []) is None
    assert claim_spec(UID, [("channel-0", ContainerEdits())], transform=DEFAULT) is None


def test_only_devices_with_edits_get_a_cdi_device():
    spec = claim_spec(
        UID, [("channel-0", ContainerEdits()), ("daemon-0", ContainerEdits(env=["A=1"]))]
    )
    assert spec is not None
    assert [d.name for d in spec.devices] == [f"{UID}-daemon-0"]
    assert spec.container_edits.is_empty()


def test_a_device_listed_twice_is_refused():
    edits = channel_edits(MAJOR, [0])
    with pytest.raises(ValueError, match="listed twice"):
        claim_spec(UID, [("channel-0", edits), ("channel-0", edits)])


def test_write_refuses_a_spec_of_another_kind(tmp_path):
    spec = Spec(
        kind="k8s.compute-domain.nvidia.com/device",
        devices=[Device(name="all", container_edits=ContainerEdits(env=["A=1"]))],
    )
    with pytest.raises(ValueError, match="kind"):
        write_claim_spec(tmp_path, UID, spec)
    assert list(tmp_path.iterdir()) == []


def test_write_then_remove(tmp_path):
    cdi_root = tmp_path / "cdi"  # created on first write
    spec = claim_spec(UID, [("channel-0", channel_edits(MAJOR, [0]))])
    path = write_claim_spec(cdi_root, UID, spec)
    assert path.exists()
    assert remove_claim_spec(cdi_root, UID) is True
    assert not path.exists()
    assert remove_claim_spec(cdi_root, UID) is False  # retried unprepare is fine


# --- claim UID safety ------------------------------------------------------------------------

UNSAFE_UIDS = ["", ".", "..", "a/b", "../etc", "/abs", "x/..", "a\0b", "u" * 201]


@pytest.mark.parametrize("bad_uid", UNSAFE_UIDS)
def test_unsafe_claim_uids_are_refused_before_touching_the_filesystem(tmp_path, bad_uid):
    cdi_root = tmp_path / "cdi"
    cdi_root.mkdir()
    victim = tmp_path / "k8s.compute-domain.nvidia.com-claim_x.yaml"
    victim.write_text("keep me")
    spec = claim_spec(UID, [("channel-0", channel_edits(MAJOR, [0]))])
    with pytest.raises(UnsafeClaimUIDError, match="refusing claim UID"):
        write_claim_spec(cdi_root, bad_uid, spec)
    with pytest.raises(UnsafeClaimUIDError):
        remove_claim_spec(cdi_root, bad_uid)
    with pytest.raises(UnsafeClaimUIDError):
        claim_spec(bad_uid, [("channel-0", channel_edits(MAJOR, [0]))])
    with pytest.raises(UnsafeClaimUIDError):
        claim_spec_path(cdi_root, bad_uid)
    with pytest.raises(UnsafeClaimUIDError):
        claim_cdi_ids(bad_uid, "channel-0", True, False)
    assert list(cdi_root.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cdi", victim.name]
    assert victim.read_text() == "keep me"


def test_longest_safe_uid_is_accepted(tmp_path):
    uid = "u" * 200
    spec = claim_spec(uid, [("channel-0", channel_edits(MAJOR, [0]))])
    assert write_claim_spec(tmp_path, uid, spec).exists()


def test_uid_that_is_no_valid_cdi_name_writes_nothing(tmp_path):
    uid = "has space"
    spec = claim_spec(uid, [("channel-0", channel_edits(MAJOR, [0]))])
    with pytest.raises(CDIError):
        write_claim_spec(tmp_path, uid, spec)
    assert list(tmp_path.iterdir()) == []


# --- CDI IDs returned to kubelet --------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "has_edits", "daemon", "expected"),
    [
        ("channel-0", True, False, [f"k8s.compute-domain.nvidia.com/claim={UID}-channel-0"]),
        ("channel-0", False, False, []),  # channel on a non-fabric node
        (
            "daemon-0",
            True,
            True,
            [
                "k8s.compute-domain.nvidia.com/device=all",
                f"k8s.compute-domain.nvidia.com/claim={UID}-daemon-0",
            ],
        ),
        ("daemon-0", False, True, ["k8s.compute-domain.nvidia.com/device=all"]),
        ("channel-5", True, False, [f"k8s.compute-domain.nvidia.com/claim={UID}-channel-5"]),
    ],
)
def test_claim_cdi_ids(device, has_edits, daemon, expected):
    assert claim_cdi_ids(UID, device, has_edits, daemon) == expected


def test_claim_cdi_ids_name_devices_of_the_written_spec(tmp_path):
    edits = daemon_edits("", CD_UID, "d", "ns", DOMAIN_DIR, None)
    path = write_claim_spec(tmp_path, UID, claim_spec(UID, [("daemon-0", edits)]))
    spec = load_spec(path)
    ids = claim_cdi_ids(UID, "daemon-0", True, True)
    kind, _, name = ids[-1].partition("=")
    assert kind == spec.kind and spec.device(name) is not None


# --- orphans ------------------------------------------------------------------------------------


def test_orphaned_claim_specs(tmp_path):
    spec_for = {}
    for uid in ("aaa", "bbb", "ccc"):
        spec_for[uid] = write_claim_spec(
            tmp_path, uid, claim_spec(uid, [("channel-0", channel_edits(MAJOR, [0]))])
        )
    (tmp_path / "k8s.compute-domain.nvidia.com-device_base.yaml").write_text("---\n")
    (tmp_path / "nvidia.com-gpu_aaa.yaml").write_text("---\n")
    (tmp_path / ".k8s.compute-domain.nvidia.com-claim_ddd.yaml.x1.tmp").write_text("")
    (tmp_path / "k8s.compute-domain.nvidia.com-claim_.yaml").write_text("")
    (tmp_path / "k8s.compute-domain.nvidia.com-claim_eee.yaml").mkdir()
    (tmp_path / "k8s.compute-domain.nvidia.com-claim_fff.yaml").symlink_to(spec_for["aaa"])
    assert orphaned_claim_specs(tmp_path, {"aaa"}) == [spec_for["bbb"], spec_for["ccc"]]
    assert orphaned_claim_specs(tmp_path, ["aaa", "bbb", "ccc"]) == []
    assert orphaned_claim_specs(tmp_path / "missing", set()) == []


# --- root transform ------------------------------------------------------------------------------


def _spec(edits: ContainerEdits) -> Spec:
    return Spec(
        kind="k8s.compute-domain.nvidia.com/claim",
        devices=[Device(name="d", container_edits=edits)],
        container_edits=edits,
    )


@pytest.mark.parametrize(
    ("container_root", "host_root", "path", "expected"),
    [
        ("/driver-root", "/", "/driver-root/usr/bin/nvidia-imex", "/usr/bin/nvidia-imex"),
        (
            "/driver-root",
            "/run/nvidia/driver",
            "/driver-root/dev/nvidia0",
            "/run/nvidia/driver/dev/nvidia0",
        ),
        ("/driver-root/", "/", "/driver-root/dev/nvidia0", "/dev/nvidia0"),
        ("/driver-root", "/", "/driver-root", "/"),
        ("/driver-root", "/host", "/driver-root", "/host"),
        ("/driver-root", "/", "/driver-root-old/x", "/driver-root-old/x"),  # whole components only
        ("/driver-root", "/", "/dev/nvidia0", "/dev/nvidia0"),
        ("/driver-root", "/", "relative/path", "relative/path"),
        ("/driver-root", "/", "--flag", "--flag"),
        ("/", "/host", "/dev/nvidia0", "/host/dev/nvidia0"),
        ("/driver-root", "/", "/driver-root/a/../b", "/b"),
    ],
)
def test_transform_path(container_root, host_root, path, expected):
    assert RootTransform(container_root, host_root).path(path) == expected


def test_transform_device_nodes_mounts_and_hooks():
    edits = ContainerEdits(
        env=["A=/driver-root/x"],
        device_nodes=[
            DeviceNode(path="/dev/nvidia0"),
            DeviceNode(path="/dev/nvidia1", host_path="/driver-root/dev/nvidia1"),
            DeviceNode(path="/dev/nvidia2", host_path="/elsewhere/nvidia2"),
        ],
        mounts=[
            Mount(
                host_path="/driver-root/usr/lib64/libx.so",
                container_path="/driver-root/usr/lib64/libx.so",
            ),
            Mount(host_path="/var/lib/x", container_path="/x"),
        ],
        hooks=[
            Hook(
                hook_name="createRuntime",
                path="/driver-root/usr/bin/nvidia-cdi-hook",
                args=[
                    "nvidia-cdi-hook",
                    "create-symlinks",
                    "--link",
                    "/driver-root/lib/a.so::/driver-root/lib/b.so",
                    "/driver-root/a::/driver-root/b::/driver-root/c",
                    "/driver-root/etc",
                ],
            ),
            Hook(
                hook_name="createContainer",
                path="/driver-root/usr/bin/hook",
                args=["/driver-root/x"],
            ),
            Hook(
                hook_name="startContainer",
                path="/driver-root/usr/bin/hook",
                args=["/driver-root/x"],
            ),
            Hook(
                hook_name="poststop", path="/driver-root/usr/bin/hook", args=["a::/driver-root/b"]
            ),
        ],
    )
    before = _spec(edits).to_dict()
    out = transform_spec(_spec(edits), "/driver-root", "/")
    assert _spec(edits).to_dict() == before  # input untouched
    for result in (out.devices[0].container_edits, out.container_edits):
        assert result.env == ["A=/driver-root/x"]  # env is never rewritten
        assert [(n.path, n.host_path) for n in result.device_nodes] == [
            ("/dev/nvidia0", "/dev/nvidia0"),
            ("/dev/nvidia1", "/dev/nvidia1"),
            ("/dev/nvidia2", "/elsewhere/nvidia2"),
        ]
        assert [(m.host_path, m.container_path) for m in result.mounts] == [
            ("/usr/lib64/libx.so", "/driver-root/usr/lib64/libx.so"),
            ("/var/lib/x", "/x"),
        ]
        assert [(h.path, h.args) for h in result.hooks] == [
            (
                "/usr/bin/nvidia-cdi-hook",
                [
                    "nvidia-cdi-hook",
                    "create-symlinks",
                    "--link",
                    "/lib/a.so::/lib/b.so",
                    "/driver-root/a::/driver-root/b::/driver-root/c",
                    "/etc",
                ],
            ),
            ("/usr/bin/hook", ["/driver-root/x"]),
            ("/driver-root/usr/bin/hook", ["/driver-root/x"]),
            ("/usr/bin/hook", ["a::/b"]),
        ]


def test_transform_keeps_every_other_device_node_field():
    """The transform copies nodes field by field: a field added to DeviceNode must be too."""
    values = {f.name: f"/driver-root/{f.name}" if f.type == "str" else 7
              for f in dataclasses.fields(DeviceNode)}  # fmt: skip
    node = DeviceNode(**values)
    out = DEFAULT.edits(ContainerEdits(device_nodes=[node])).device_nodes[0]
    assert out == dataclasses.replace(node, host_path="/host_path")
    assert out is not node


def test_equal_roots_skip_the_transform_entirely():
    spec = _spec(ContainerEdits(device_nodes=[DeviceNode(path="/dev/nvidia0")]))
    assert not RootTransform("/driver-root", "/driver-root").active
    assert transform_spec(spec, "/driver-root", "/driver-root") is spec
    assert spec.devices[0].container_edits.device_nodes[0].host_path == ""


def test_roots_must_be_absolute():
    with pytest.raises(ValueError, match="absolute"):
        RootTransform("driver-root", "/")
    with pytest.raises(ValueError, match="absolute"):
        RootTransform("/driver-root", "")
