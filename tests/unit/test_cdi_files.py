"""Spec files on disk: names, crash-safe writes, removal, loading and device resolution."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cdi_helpers import (
    CLAIM_KIND,
    CLAIM_UID,
    DAEMON_CLAIM_UID,
    DEVICE_KIND,
    SCHEMA_DIR,
    assert_schema_valid,
    channel_claim_spec,
    daemon_claim_spec,
    read_yaml,
    write_checked,
)

from cdi import (
    CDIError,
    ContainerEdits,
    Device,
    DeviceNode,
    QualifiedName,
    Spec,
    container_edits_for,
    load_spec,
    load_specs,
    remove_spec,
    resolve_device,
    resolve_devices,
    spec_file_name,
    spec_files,
    spec_path,
    spec_to_json,
    write_spec,
)


def _base_spec() -> Spec:
    """The node-wide spec with edits shared by every claim device."""
    return Spec(
        kind=DEVICE_KIND,
        container_edits=ContainerEdits(env=["NVIDIA_IMEX_BASE=1"]),
        devices=[
            Device(
                name="all",
                container_edits=ContainerEdits(
                    device_nodes=[DeviceNode(path="/dev/nvidia-caps-imex-channels", type="c")]
                ),
            )
        ],
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def strict_umask(set_umask: Callable[[int], int]) -> None:
    """A umask that would strip group/other bits from anything created normally."""
    set_umask(0o077)


# --- file names -------------------------------------------------------------------------


def test_file_names_follow_the_transient_spec_rule() -> None:
    assert spec_file_name(CLAIM_KIND, CLAIM_UID) == (
        f"k8s.compute-domain.nvidia.com-claim_{CLAIM_UID}.yaml"
    )
    assert spec_file_name(DEVICE_KIND, "base") == "k8s.compute-domain.nvidia.com-device_base.yaml"
    assert spec_file_name("vendor.com/gpu", "") == "vendor.com-gpu.yaml"


def test_slashes_in_the_name_cannot_escape_the_directory(tmp_path: Path) -> None:
    assert spec_file_name(CLAIM_KIND, "ns/claim/../x") == (
        "k8s.compute-domain.nvidia.com-claim_ns_claim_.._x.yaml"
    )
    assert spec_path(tmp_path, CLAIM_KIND, "../../etc/passwd").parent == tmp_path


@pytest.mark.parametrize("kind", ["claim", "/claim", "nvidia.com/", "nvidia.com/cl aim"])
def test_file_name_needs_a_valid_kind(kind: str) -> None:
    with pytest.raises(CDIError, match="invalid kind"):
        spec_file_name(kind, "x")


# --- atomic write -----------------------------------------------------------------------


def test_write_creates_one_private_yaml_file_that_reloads_equal(tmp_path: Path) -> None:
    spec = channel_claim_spec()
    path = write_checked(spec, tmp_path, CLAIM_UID)

    assert path == tmp_path / f"k8s.compute-domain.nvidia.com-claim_{CLAIM_UID}.yaml"
    assert list(tmp_path.iterdir()) == [path]  # no temporary files left behind
    assert _mode(path) == 0o600
    assert path.read_text().startswith("---\n")
    reloaded = load_spec(path)
    assert reloaded.cdi_version == "0.5.0"
    spec.cdi_version = "0.5.0"
    assert reloaded == spec


def test_write_does_not_modify_the_callers_spec(tmp_path: Path) -> None:
    spec = channel_claim_spec()
    write_checked(spec, tmp_path, "x")
    assert spec.cdi_version == ""
    assert spec == channel_claim_spec()


def test_requested_mode_is_applied_regardless_of_umask(tmp_path: Path, strict_umask: None) -> None:
    path = write_checked(channel_claim_spec(), tmp_path, "shared", mode=0o644)
    assert _mode(path) == 0o644


def test_write_creates_a_missing_directory(tmp_path: Path) -> None:
    target = tmp_path / "var" / "run" / "cdi"
    path = write_checked(channel_claim_spec(), target, CLAIM_UID)
    assert path.parent == target
    assert load_spec(path).kind == CLAIM_KIND


def test_overwrite_replaces_the_content_in_place(tmp_path: Path) -> None:
    first = write_checked(channel_claim_spec(), tmp_path, "claim", mode=0o640)
    second = write_checked(daemon_claim_spec(), tmp_path, "claim")
    assert first == second
    assert list(tmp_path.iterdir()) == [second]
    assert load_spec(second).devices[0].name == f"{DAEMON_CLAIM_UID}-daemon-0"
    assert _mode(second) == 0o600  # the mode of this write, not the previous one


def test_crash_before_rename_keeps_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_checked(channel_claim_spec(), tmp_path, "claim")
    before = path.read_bytes()

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", crash)
    monkeypatch.setattr(os, "rename", crash)
    with pytest.raises(OSError, match="simulated crash"):
        write_spec(daemon_claim_spec(), tmp_path, "claim")
    monkeypatch.undo()

    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]
    assert load_spec(path).devices[0].name == f"{CLAIM_UID}-channel-0"  # still complete


def test_failed_fsync_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        write_spec(channel_claim_spec(), tmp_path, "claim")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_invalid_spec_is_never_written(tmp_path: Path) -> None:
    path = write_checked(channel_claim_spec(), tmp_path, "claim")
    before = path.read_bytes()
    bad = channel_claim_spec()
    bad.devices[0].container_edits.device_nodes[0].type = "x"
    with pytest.raises(CDIError, match="invalid type 'x'"):
        write_spec(bad, tmp_path, "claim")
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]


# --- removal ----------------------------------------------------------------------------


def test_remove_deletes_the_file_and_tolerates_a_missing_one(tmp_path: Path) -> None:
    path = write_checked(channel_claim_spec(), tmp_path, CLAIM_UID)
    assert remove_spec(tmp_path, CLAIM_KIND, CLAIM_UID) is True
    assert not path.exists()
    assert remove_spec(tmp_path, CLAIM_KIND, CLAIM_UID) is False
    assert remove_spec(tmp_path / "never-created", CLAIM_KIND, CLAIM_UID) is False


def test_remove_only_touches_its_own_file(tmp_path: Path) -> None:
    keep = write_checked(daemon_claim_spec(), tmp_path, DAEMON_CLAIM_UID)
    write_checked(channel_claim_spec(), tmp_path, CLAIM_UID)
    remove_spec(tmp_path, CLAIM_KIND, CLAIM_UID)
    assert list(tmp_path.iterdir()) == [keep]


# --- loading ----------------------------------------------------------------------------


def test_json_spec_files_load_too(tmp_path: Path) -> None:
    spec = daemon_claim_spec()
    spec.cdi_version = "0.5.0"
    path = tmp_path / "vendor.json"
    path.write_text(spec_to_json(spec))
    assert_schema_valid(json.loads(path.read_text()))
    assert load_spec(path) == spec


def test_the_official_example_loads(tmp_path: Path) -> None:
    spec = load_spec(SCHEMA_DIR / "example-good.json")
    assert spec.kind == "vendor.com/device"
    assert [hook.hook_name for hook in spec.container_edits.hooks] == [
        "createContainer",
        "startContainer",
    ]
    assert spec.container_edits.device_nodes[0].uid == 1000


def test_yml_suffix_is_read_as_yaml(tmp_path: Path) -> None:
    source = write_checked(channel_claim_spec(), tmp_path, "x")
    other = tmp_path / "copy.yml"
    other.write_bytes(source.read_bytes())
    assert load_spec(other) == load_spec(source)


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("a.yaml", "cdiVersion: [unclosed", "invalid YAML"),
        ("a.json", "{", "invalid JSON"),
        ("a.yaml", "", "spec: expected an object, got null"),
        ("a.yaml", "- 1\n", "spec: expected an object, got array"),
        ("a.yaml", "cdiVersion: 0.3.0\nkind: v/c\n", "spec: missing required key 'devices'"),
        (
            "a.yaml",
            "cdiVersion: 0.5\nkind: v/c\ndevices: []\n",
            "spec.cdiVersion: expected a string, got number",
        ),
        (
            "a.yaml",
            "cdiVersion: 0.3.0\nkind: v/c\ndevices:\n- name: d\n  containerEdits:\n"
            "    deviceNodes:\n    - path: /dev/d\n      major: 'x'\n",
            "spec.devices[0].containerEdits.deviceNodes[0].major: expected an integer, got string",
        ),
        (
            "a.yaml",
            "cdiVersion: 0.3.0\nkind: v/c\ndevices:\n- name: d\n  containerEdits:\n"
            "    deviceNodes:\n    - path: /dev/d\n      filemode: 438\n",
            "unknown key 'filemode'",
        ),
        ("a.yaml", "cdiVersion: 0.3.0\nkind: v/c\ndevices: []\n", "at least one device"),
        ("a.txt", "cdiVersion: 0.3.0\n", "not a CDI spec file"),
    ],
)
def test_bad_spec_files_fail_with_the_path_and_the_problem(
    tmp_path: Path, name: str, content: str, problem: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(CDIError) as excinfo:
        load_spec(path)
    assert str(path) in str(excinfo.value)
    assert problem in str(excinfo.value)


def test_non_utf8_file_is_a_cdi_error(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_bytes(b"kind: \xff\n")
    with pytest.raises(CDIError, match="not UTF-8"):
        load_spec(path)


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_spec(tmp_path / "absent.yaml")


# --- resolution -------------------------------------------------------------------------


@pytest.fixture
def two_dirs(tmp_path: Path) -> tuple[Path, Path]:
    static, dynamic = tmp_path / "etc-cdi", tmp_path / "var-run-cdi"
    write_checked(_base_spec(), static, "base")
    write_checked(channel_claim_spec(), dynamic, CLAIM_UID)
    write_checked(daemon_claim_spec(), dynamic, DAEMON_CLAIM_UID)
    return static, dynamic


def test_devices_resolve_across_directories(two_dirs: tuple[Path, Path]) -> None:
    static, dynamic = two_dirs
    channel = resolve_device(f"{CLAIM_KIND}={CLAIM_UID}-channel-0", [static, dynamic])
    assert channel.path == dynamic / spec_file_name(CLAIM_KIND, CLAIM_UID)
    assert channel.device.container_edits.device_nodes[0].path == (
        "/dev/nvidia-caps-imex-channels/channel0"
    )
    assert str(channel.name) == f"{CLAIM_KIND}={CLAIM_UID}-channel-0"

    base = resolve_device(QualifiedName.parse(f"{DEVICE_KIND}=all"), [static, dynamic])
    assert base.path == static / "k8s.compute-domain.nvidia.com-device_base.yaml"
    assert base.spec.kind == DEVICE_KIND


def test_a_single_directory_may_be_passed_as_a_string(two_dirs: tuple[Path, Path]) -> None:
    _, dynamic = two_dirs
    found = resolve_device(f"{CLAIM_KIND}={DAEMON_CLAIM_UID}-daemon-0", str(dynamic))
    assert found.device.name == f"{DAEMON_CLAIM_UID}-daemon-0"


def test_container_view_merges_spec_edits_before_device_edits(two_dirs: tuple[Path, Path]) -> None:
    names = [f"{DEVICE_KIND}=all", f"{CLAIM_KIND}={DAEMON_CLAIM_UID}-daemon-0"]
    devices = resolve_devices(names, list(two_dirs))
    assert [str(d.name) for d in devices] == names

    base_only = devices[0].container_edits()
    assert base_only.env == ["NVIDIA_IMEX_BASE=1"]
    assert [n.path for n in base_only.device_nodes] == ["/dev/nvidia-caps-imex-channels"]

    view = container_edits_for(devices)
    assert view.env[0] == "NVIDIA_IMEX_BASE=1"  # spec-level edits come first
    assert view.env[1:] == daemon_claim_spec().devices[0].container_edits.env
    assert [n.path for n in view.device_nodes] == [
        "/dev/nvidia-caps-imex-channels",
        "/dev/nvidia-caps/nvidia-cap7",
    ]
    assert [(m.host_path.rsplit("/", 2)[-2], m.container_path) for m in view.mounts] == [
        ("domains", "/imexd")
    ]


def test_shared_spec_edits_are_applied_once_per_spec(tmp_path: Path) -> None:
    spec = Spec(
        kind="vendor.com/gpu",
        container_edits=ContainerEdits(env=["SHARED=1"]),
        devices=[
            Device(name=f"gpu{i}", container_edits=ContainerEdits(env=[f"GPU{i}=1"]))
            for i in range(2)
        ],
    )
    write_checked(spec, tmp_path, "")
    view = container_edits_for(
        resolve_devices(["vendor.com/gpu=gpu0", "vendor.com/gpu=gpu1"], tmp_path)
    )
    assert view.env == ["SHARED=1", "GPU0=1", "GPU1=1"]


def test_merged_view_is_independent_of_the_loaded_spec(two_dirs: tuple[Path, Path]) -> None:
    found = resolve_device(f"{CLAIM_KIND}={CLAIM_UID}-channel-0", list(two_dirs))
    view = found.container_edits()
    view.device_nodes[0].path = "/changed"
    view.env.append("X=1")
    assert found.device.container_edits.device_nodes[0].path != "/changed"
    assert found.device.container_edits.env == []


def test_unknown_device_is_not_found(two_dirs: tuple[Path, Path]) -> None:
    with pytest.raises(CDIError, match="unresolvable CDI device") as excinfo:
        resolve_device(f"{CLAIM_KIND}=nosuch-channel-0", list(two_dirs))
    assert str(two_dirs[0]) in str(excinfo.value)


def test_missing_directories_are_skipped(two_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    dirs = [tmp_path / "absent", *two_dirs]
    assert resolve_device(f"{DEVICE_KIND}=all", dirs).device.name == "all"
    with pytest.raises(CDIError, match="unresolvable"):
        resolve_device(f"{DEVICE_KIND}=all", [tmp_path / "absent"])


def test_unqualified_request_is_rejected(two_dirs: tuple[Path, Path]) -> None:
    with pytest.raises(CDIError, match="missing vendor"):
        resolve_device("all", list(two_dirs))


def test_device_defined_in_two_directories_is_an_error(two_dirs: tuple[Path, Path]) -> None:
    static, dynamic = two_dirs
    stale = write_checked(channel_claim_spec(), static, CLAIM_UID)
    with pytest.raises(CDIError, match="defined by more than one spec") as excinfo:
        resolve_device(f"{CLAIM_KIND}={CLAIM_UID}-channel-0", [static, dynamic])
    assert str(stale) in str(excinfo.value)
    assert str(dynamic / stale.name) in str(excinfo.value)
    # Other devices still resolve.
    assert resolve_device(f"{DEVICE_KIND}=all", [static, dynamic]).path.parent == static


def test_device_defined_by_two_files_in_one_directory_is_an_error(tmp_path: Path) -> None:
    write_checked(channel_claim_spec(), tmp_path, "one")
    write_checked(channel_claim_spec(), tmp_path, "two")
    with pytest.raises(CDIError, match="more than one spec"):
        resolve_device(f"{CLAIM_KIND}={CLAIM_UID}-channel-0", tmp_path)


def test_scanning_ignores_temp_files_subdirectories_and_other_files(tmp_path: Path) -> None:
    path = write_checked(channel_claim_spec(), tmp_path, CLAIM_UID)
    (tmp_path / f".{path.name}.abc123.tmp").write_text("partial")
    (tmp_path / ".hidden.yaml").write_text("{")
    (tmp_path / "README").write_text("not a spec")
    (tmp_path / "nested.yaml").mkdir()
    assert spec_files(tmp_path) == [path]
    assert [loaded.path for loaded in load_specs(tmp_path)] == [path]


def test_an_invalid_spec_file_in_the_directory_is_reported(tmp_path: Path) -> None:
    write_checked(channel_claim_spec(), tmp_path, CLAIM_UID)
    broken = tmp_path / "broken.yaml"
    broken.write_text("cdiVersion: 0.3.0\nkind: bad\ndevices: []\n")
    with pytest.raises(CDIError, match="invalid kind") as excinfo:
        resolve_device(f"{CLAIM_KIND}={CLAIM_UID}-channel-0", tmp_path)
    assert str(broken) in str(excinfo.value)


def test_written_files_are_schema_valid_yaml(two_dirs: tuple[Path, Path]) -> None:
    for path in spec_files(list(two_dirs)):
        assert_schema_valid(read_yaml(path))
