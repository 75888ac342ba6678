"""The JSON fixture NVML source: validation that names the field, and the round trip."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.discovery import (
    DiscoveryError,
    FabricInfo,
    FixtureSource,
    Gpu,
    NvmlError,
    NvmlFailure,
)
from agent.discovery.nvml import fixture_document, write_fixture

UUID_A = "0f2a6e3c-1111-2222-3333-444455556666"
FABRIC = {"clusterUuid": UUID_A, "cliqueId": 3, "state": "COMPLETED", "status": "SUCCESS"}
EXAMPLE = {
    "driverVersion": "580.82.07",
    "gpus": [
        {"name": "NVIDIA GB200", "uuid": "GPU-a", "fabric": FABRIC},
        {"name": "NVIDIA GB200", "uuid": "GPU-b", "fabric": "NOT_SUPPORTED"},
        {"name": "NVIDIA GB200", "uuid": "GPU-c", "fabric": {"error": "NVML_ERROR_UNKNOWN"}},
        {"name": "NVIDIA GB200", "uuid": "GPU-d"},
    ],
}


def source_for(tmp_path, doc) -> FixtureSource:
    path = tmp_path / "nvml.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return FixtureSource(path)


def test_example(tmp_path):
    source = source_for(tmp_path, EXAMPLE)
    assert source.driver_version() == "580.82.07"
    a, b, c, d = source.gpus()
    assert a == Gpu(0, "NVIDIA GB200", "GPU-a", FabricInfo(UUID_A, 3, 3, 0))
    assert a.fabric.cluster_uuid == bytes.fromhex(UUID_A.replace("-", ""))
    assert b == Gpu(1, "NVIDIA GB200", "GPU-b", None)
    assert c.fabric == NvmlFailure("nvmlDeviceGetGpuFabricInfo", 999)
    assert d.fabric is None and d.index == 3


@pytest.mark.parametrize(
    ("state", "status", "expected"),
    [
        (0, 0, (0, 0)),
        ("NOT_STARTED", "NVML_SUCCESS", (1, 0)),
        ("IN_PROGRESS", "ERROR_UNKNOWN", (2, 999)),
        (3, 3, (3, 3)),
        ("COMPLETED", "NVML_ERROR_NOT_SUPPORTED", (3, 3)),
        ("COMPLETED", 12345, (3, 12345)),
    ],
)
def test_states_and_statuses_by_name_or_number(tmp_path, state, status, expected):
    doc = {
        "driverVersion": "1",
        "gpus": [
            {"name": "g", "uuid": "u", "fabric": {**FABRIC, "state": state, "status": status}}
        ],
    }
    (gpu,) = source_for(tmp_path, doc).gpus()
    assert (gpu.fabric.state, gpu.fabric.status) == expected


def test_error_not_supported_means_no_fabric(tmp_path):
    doc = {"driverVersion": "1", "gpus": [{"name": "g", "uuid": "u", "fabric": {"error": 3}}]}
    assert source_for(tmp_path, doc).gpus()[0].fabric is None


def test_reread_on_every_call(tmp_path):
    source = source_for(tmp_path, EXAMPLE)
    assert len(source.gpus()) == 4
    source.path.write_text(json.dumps({"driverVersion": "570.158.01", "gpus": []}))
    assert source.gpus() == [] and source.driver_version() == "570.158.01"


def test_top_level_error_fails_every_call(tmp_path):
    source = source_for(tmp_path, {**EXAMPLE, "error": "DRIVER_NOT_LOADED"})
    for call in (source.gpus, source.driver_version):
        with pytest.raises(NvmlError) as err:
            call()
        assert err.value.code == 9 and err.value.call == "nvmlInitWithFlags"


def gpu_doc(**fields):
    return {"driverVersion": "1", "gpus": [{"name": "g", "uuid": "u", **fields}]}


def fabric_doc(**fields):
    return gpu_doc(fabric={**FABRIC, **fields})


@pytest.mark.parametrize(
    ("doc", "field", "problem"),
    [
        ("[]", "(top level)", "expected an object, got list"),
        ({"gpus": []}, "(top level)", "missing key 'driverVersion'"),
        ({"driverVersion": "1"}, "(top level)", "missing key 'gpus'"),
        ({"driverVersion": 580, "gpus": []}, "driverVersion", "expected a string, got int"),
        ({"driverVersion": "1", "gpus": {}}, "gpus", "expected a list, got dict"),
        ({"driverVersion": "1", "gpus": [], "gpu": []}, "(top level)", "unknown key 'gpu'"),
        ({"driverVersion": "1", "gpus": [None]}, "gpus[0]", "expected an object, got null"),
        ({"driverVersion": "1", "gpus": [{"uuid": "u"}]}, "gpus[0]", "missing key 'name'"),
        (gpu_doc(fabirc="NOT_SUPPORTED"), "gpus[0]", "unknown key 'fabirc'"),
        (gpu_doc(uuid=None), "gpus[0].uuid", "expected a string, got null"),
        (gpu_doc(fabric="NONE"), "gpus[0].fabric", 'expected "NOT_SUPPORTED" or an object'),
        (gpu_doc(fabric=7), "gpus[0].fabric", "expected an object, got int"),
        (gpu_doc(fabric={"error": "SUCCESS"}), "gpus[0].fabric.error", "cannot be NVML_SUCCESS"),
        (gpu_doc(fabric={"error": "BOOM"}), "gpus[0].fabric.error", "unknown NVML return code"),
        (gpu_doc(fabric={"error": 1, "x": 1}), "gpus[0].fabric", "unknown key 'x'"),
        (fabric_doc(clusterUuid="nope"), "gpus[0].fabric.clusterUuid", "expected a UUID"),
        (fabric_doc(clusterUuid=5), "gpus[0].fabric.clusterUuid", "expected a string"),
        (
            fabric_doc(cliqueId=-1),
            "gpus[0].fabric.cliqueId",
            "expected an integer in 0..4294967295",
        ),
        (fabric_doc(cliqueId=2**32), "gpus[0].fabric.cliqueId", "expected an integer"),
        (fabric_doc(cliqueId=True), "gpus[0].fabric.cliqueId", "expected an integer"),
        (fabric_doc(cliqueId="3"), "gpus[0].fabric.cliqueId", "expected an integer"),
        (fabric_doc(state="DONE"), "gpus[0].fabric.state", "expected one of NOT_SUPPORTED"),
        (fabric_doc(state=4), "gpus[0].fabric.state", "or 0-3, got 4"),
        (fabric_doc(state=3.0), "gpus[0].fabric.state", "got 3.0"),
        (fabric_doc(status="OK"), "gpus[0].fabric.status", "unknown NVML return code 'OK'"),
        (fabric_doc(status=-1), "gpus[0].fabric.status", "expected an integer"),
        (fabric_doc(extra=1), "gpus[0].fabric", "unknown key 'extra'"),
        (gpu_doc(fabric={"clusterUuid": UUID_A}), "gpus[0].fabric", "missing key 'cliqueId'"),
    ],
)
def test_validation_errors_name_the_field(tmp_path, doc, field, problem):
    source = source_for(tmp_path, doc)
    with pytest.raises(DiscoveryError) as err:
        source.gpus()
    msg = str(err.value)
    assert not isinstance(err.value, NvmlError)
    assert msg.startswith(f"NVML fixture {source.path}: {field}: ")
    assert problem in msg
    assert "fix the fixture file" in msg


def test_not_json_and_missing_file(tmp_path):
    with pytest.raises(DiscoveryError, match="is not valid JSON"):
        source_for(tmp_path, "{").gpus()
    with pytest.raises(DiscoveryError, match="is not valid JSON"):
        source = source_for(tmp_path, "")
        source.path.write_bytes(b"\xff\xfe\x00")
        source.gpus()
    with pytest.raises(DiscoveryError, match="cannot read NVML fixture"):
        FixtureSource(tmp_path / "absent.json").driver_version()


def test_round_trip(tmp_path):
    gpus = [
        Gpu(0, "NVIDIA GB200", "GPU-a", FabricInfo(UUID_A, 3, 3, 0)),
        Gpu(1, "NVIDIA GB200", "GPU-b", FabricInfo(bytes(16), 0, 2, 999)),
        Gpu(2, "NVIDIA GB200", "GPU-c", None),
        Gpu(3, "NVIDIA GB200", "GPU-d", NvmlFailure("nvmlDeviceGetGpuFabricInfo", 15)),
        Gpu(4, "DGX Display", "", None),
    ]
    path = tmp_path / "nvml.json"
    write_fixture(path, "580.82.07", gpus)
    source = FixtureSource(path)
    assert source.gpus() == gpus and source.driver_version() == "580.82.07"
    assert fixture_document("1", gpus[:1])["gpus"][0]["fabric"] == {
        **FABRIC,
        "status": "NVML_SUCCESS",
    }
    assert [p.name for p in tmp_path.iterdir()] == ["nvml.json"]  # no temp files left


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    [
        "driverVersion",
        "gpus",
        "error",
        "name",
        "uuid",
        "fabric",
        "clusterUuid",
        "cliqueId",
        "state",
        "status",
    ]
)
VALUES = JSON | st.sampled_from(
    [UUID_A, "COMPLETED", "IN_PROGRESS", "SUCCESS", "NVML_ERROR_UNKNOWN", "NOT_SUPPORTED", 3, 0]
)
SHAPED = st.recursive(
    VALUES,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=25,
)


def _only_discovery_errors(path, doc_text):
    path.write_text(doc_text)
    source = FixtureSource(path)
    for call in (source.gpus, source.driver_version):
        with contextlib.suppress(DiscoveryError):
            call()


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=JSON | SHAPED)
def test_arbitrary_json_raises_only_discovery_error(tmp_path, doc):
    _only_discovery_errors(tmp_path / "nvml.json", json.dumps(doc))


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text())
def test_arbitrary_text_raises_only_discovery_error(tmp_path, text):
    _only_discovery_errors(tmp_path / "nvml.json", text)


@pytest.mark.parametrize(
    "args",
    [
        ("not-a-uuid", 1, 3, 0),
        (b"short", 1, 3, 0),
        (16, 1, 3, 0),
        (UUID_A, -1, 3, 0),
        (UUID_A, 2**32, 3, 0),
        (UUID_A, True, 3, 0),
        (UUID_A, 1, "COMPLETED", 0),
        (UUID_A, 1, 3, "SUCCESS"),
    ],
)
def test_fabric_info_rejects_bad_values(args):
    with pytest.raises(ValueError):
        FabricInfo(*args)


def test_fabric_info_forms_compare_equal():
    raw = bytes.fromhex(UUID_A.replace("-", ""))
    assert FabricInfo(UUID_A.upper(), 1, 3) == FabricInfo(bytearray(raw), 1, 3)
    assert FabricInfo(raw, 1, 3).cluster_uuid_text == UUID_A
