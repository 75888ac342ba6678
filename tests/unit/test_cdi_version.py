"""The cdiVersion a spec needs, and refusal of versions a runtime would not accept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cdi_helpers import channel_claim_spec, read_yaml, write_checked

from cdi import (
    KNOWN_VERSIONS,
    CDIError,
    ContainerEdits,
    Device,
    DeviceNode,
    IntelRdt,
    Mount,
    NetDevice,
    Spec,
    check_version,
    load_spec,
    minimum_version,
    normalize_version,
    validate_spec,
    write_spec,
)


def _spec(kind: str = "vendor.com/gpu", name: str = "gpu0", **edits: object) -> Spec:
    return Spec(
        kind=kind,
        devices=[
            Device(name=name, container_edits=ContainerEdits(env=["A=1"], **edits))  # type: ignore[arg-type]
        ],
    )


def _with_spec_edits(**edits: object) -> Spec:
    spec = _spec()
    spec.container_edits = ContainerEdits(**edits)  # type: ignore[arg-type]
    return spec


def _with_spec_annotations() -> Spec:
    spec = _spec()
    spec.annotations = {"example.com/owner": "driver"}
    return spec


def _with_device_annotations() -> Spec:
    spec = _spec()
    spec.devices[0].annotations = {"owner": "driver"}
    return spec


NODE_WITH_HOST_PATH = DeviceNode(path="/dev/x", host_path="/dev/y")

RULES: list[tuple[str, Callable[[], Spec], str]] = [
    ("plain env", lambda: _spec(), "0.3.0"),
    ("dotted vendor only", lambda: _spec(kind="k8s.compute-domain.nvidia.com/claim"), "0.3.0"),
    (
        "device node without hostPath",
        lambda: _spec(device_nodes=[DeviceNode(path="/dev/x")]),
        "0.3.0",
    ),
    (
        "mount with type",
        lambda: _spec(mounts=[Mount(host_path="/a", container_path="/b", type="bind")]),
        "0.4.0",
    ),
    (
        "spec-level mount with type",
        lambda: _with_spec_edits(mounts=[Mount(host_path="/a", container_path="/b", type="tmpfs")]),
        "0.4.0",
    ),
    (
        "mount without type",
        lambda: _spec(mounts=[Mount(host_path="/a", container_path="/b")]),
        "0.3.0",
    ),
    ("device node hostPath", lambda: _spec(device_nodes=[NODE_WITH_HOST_PATH]), "0.5.0"),
    (
        "spec-level device node hostPath",
        lambda: _with_spec_edits(device_nodes=[NODE_WITH_HOST_PATH]),
        "0.5.0",
    ),
    ("device name starts with a digit", lambda: _spec(name="0gpu"), "0.5.0"),
    ("spec annotations", _with_spec_annotations, "0.6.0"),
    ("device annotations", _with_device_annotations, "0.6.0"),
    ("dot in class", lambda: _spec(kind="vendor.com/gpu.mig"), "0.6.0"),
    ("intelRdt closID only", lambda: _spec(intel_rdt=IntelRdt(clos_id="gold")), "0.7.0"),
    ("empty intelRdt", lambda: _spec(intel_rdt=IntelRdt()), "0.7.0"),
    ("additionalGids", lambda: _spec(additional_gids=[44]), "0.7.0"),
    ("spec-level additionalGids", lambda: _with_spec_edits(additional_gids=[44]), "0.7.0"),
    (
        "netDevices",
        lambda: _spec(net_devices=[NetDevice(host_interface_name="eth1", name="net0")]),
        "1.1.0",
    ),
    (
        "spec-level netDevices",
        lambda: _with_spec_edits(net_devices=[NetDevice(host_interface_name="eth1", name="net0")]),
        "1.1.0",
    ),
    ("intelRdt schemata", lambda: _spec(intel_rdt=IntelRdt(schemata=["L3:0=ff"])), "1.1.0"),
    ("intelRdt monitoring", lambda: _spec(intel_rdt=IntelRdt(enable_monitoring=True)), "1.1.0"),
    (
        "newest feature wins",
        lambda: _spec(
            name="0gpu",
            additional_gids=[1],
            net_devices=[NetDevice(host_interface_name="eth1", name="net0")],
        ),
        "1.1.0",
    ),
]


@pytest.mark.parametrize(("case", "build", "expected"), RULES, ids=[r[0] for r in RULES])
def test_each_feature_requires_its_version(
    case: str, build: Callable[[], Spec], expected: str, tmp_path: Path
) -> None:
    spec = build()
    assert minimum_version(spec) == expected
    # The version is what the written file declares, and the file still loads.
    path = write_checked(spec, tmp_path, "v")
    assert read_yaml(path)["cdiVersion"] == expected
    assert load_spec(path).cdi_version == expected


def test_known_versions_are_the_released_ones() -> None:
    assert KNOWN_VERSIONS == (
        "0.1.0",
        "0.2.0",
        "0.3.0",
        "0.4.0",
        "0.5.0",
        "0.6.0",
        "0.7.0",
        "0.8.0",
        "1.0.0",
        "1.1.0",
    )


@pytest.mark.parametrize("version", ["v0.5.0", "0.5.0", "v1.1.0"])
def test_leading_v_is_tolerated(version: str) -> None:
    spec = channel_claim_spec()
    spec.cdi_version = version
    check_version(spec)
    validate_spec(spec)
    assert normalize_version(version) == version.removeprefix("v")


def test_pinned_version_with_leading_v_is_written_without_it(tmp_path: Path) -> None:
    path = write_checked(channel_claim_spec(), tmp_path, "pinned", version="v0.6.0")
    assert read_yaml(path)["cdiVersion"] == "0.6.0"


@pytest.mark.parametrize("version", ["", "0.9.0", "1.2.0", "0.5", "vv0.5.0", "latest", "V0.5.0"])
def test_unknown_version_is_rejected(version: str) -> None:
    spec = channel_claim_spec()
    spec.cdi_version = version
    with pytest.raises(CDIError, match="unknown CDI version") as excinfo:
        validate_spec(spec)
    assert repr(version) in str(excinfo.value)
    assert "1.1.0" in str(excinfo.value)  # lists the known versions


def test_too_low_version_is_rejected_with_the_version_needed() -> None:
    spec = channel_claim_spec()  # needs 0.5.0 for its hostPath
    spec.cdi_version = "0.4.0"
    with pytest.raises(CDIError, match=r"the spec version must be at least v0\.5\.0"):
        validate_spec(spec)


def test_versions_below_the_baseline_are_too_low() -> None:
    spec = Spec(
        kind="vendor.com/gpu",
        cdi_version="0.2.0",
        devices=[Device(name="gpu0", container_edits=ContainerEdits(env=["A=1"]))],
    )
    with pytest.raises(CDIError, match=r"at least v0\.3\.0"):
        validate_spec(spec)


def test_higher_version_than_needed_is_accepted(tmp_path: Path) -> None:
    path = write_checked(channel_claim_spec(), tmp_path, "high", version="1.1.0")
    assert load_spec(path).cdi_version == "1.1.0"


def test_pinning_a_too_low_version_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(CDIError, match=r"at least v0\.5\.0"):
        write_spec(channel_claim_spec(), tmp_path, "low", version="0.4.0")
    with pytest.raises(CDIError, match="unknown CDI version"):
        write_spec(channel_claim_spec(), tmp_path, "bad", version="2.0.0")
    assert list(tmp_path.iterdir()) == []


def test_loading_a_file_that_claims_too_low_a_version_fails(tmp_path: Path) -> None:
    path = tmp_path / "vendor.com-gpu.yaml"
    path.write_text(
        "cdiVersion: 0.3.0\nkind: vendor.com/gpu\ndevices:\n"
        "- name: gpu0\n  containerEdits:\n    deviceNodes:\n"
        "    - path: /dev/gpu0\n      hostPath: /dev/gpu0\n"
    )
    with pytest.raises(CDIError, match=r"the spec version must be at least v0\.5\.0") as excinfo:
        load_spec(path)
    assert str(path) in str(excinfo.value)
