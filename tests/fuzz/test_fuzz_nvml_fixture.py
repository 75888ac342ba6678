"""NVML fixture files (`agent.discovery.FixtureSource`, `--nvml-source fixture:PATH`).

Properties: for any JSON shape or value, random bytes, or a mutated real fixture,
`driver_version()` / `gpus()` return well-typed records or raise `DiscoveryError` (its
subclass `NvmlError` for a fixture-declared init error) with one line naming the file;
a clique ID worked out from the records is "" or `<uuid>.<uint32>` (a valid label value),
else a `DiscoveryError`; a valid fixture written by `write_fixture` reads back unchanged.
"""

from __future__ import annotations

import json
import uuid

import pytest
from fuzz_support import FUZZ, dumps, json_scalars, json_values, mutated, outcome
from hypothesis import example, given
from hypothesis import strategies as st

from agent.discovery import DiscoveryError, FabricInfo, FixtureSource, Gpu
from agent.discovery.nvlink_clique import clique_id_of
from agent.discovery.nvml import NvmlFailure, write_fixture
from api.validation import label_value_problem

UUID = "0f2a6e3c-1111-4a5b-9a53-0c1d2e3f4a5b"
VALID = {
    "driverVersion": "580.82.07",
    "gpus": [
        {"name": "NVIDIA GB200", "uuid": "GPU-1",
         "fabric": {"clusterUuid": UUID, "cliqueId": 3, "state": "COMPLETED", "status": "SUCCESS"}},
        {"name": "NVIDIA GB200", "uuid": "GPU-2", "fabric": "NOT_SUPPORTED"},
        {"name": "NVIDIA GB200", "uuid": "GPU-3", "fabric": {"error": "NVML_ERROR_UNKNOWN"}},
    ],
}

values = json_scalars | st.sampled_from(
    ["COMPLETED", "IN_PROGRESS", "NOT_SUPPORTED", "SUCCESS", "UNKNOWN", "NVML_SUCCESS", UUID,
     "{" + UUID + "}", "urn:uuid:" + UUID, UUID.upper(), 3, 4, -1, 2**32, 2**32 - 1, True]
)
fabric = st.one_of(
    st.just("NOT_SUPPORTED"),
    st.fixed_dictionaries({}, optional={"error": values}),
    st.fixed_dictionaries(
        {}, optional={"clusterUuid": values, "cliqueId": values, "state": values, "status": values}
    ),
    json_values,
)
gpu = st.fixed_dictionaries(
    {}, optional={"name": values | st.just("DGX Display"), "uuid": values, "fabric": fabric}
) | json_values
document = st.fixed_dictionaries(
    {},
    optional={
        "driverVersion": values | st.just("580.82.07"),
        "gpus": st.lists(gpu, max_size=4) | json_values,
        "error": values,
    },
) | json_values


def load(tmp_path_factory, data: bytes):
    path = tmp_path_factory.mktemp("nvml") / "fixture.json"
    path.write_bytes(data)
    source = FixtureSource(path)
    version, err = outcome(source.driver_version, DiscoveryError)
    gpus, err2 = outcome(source.gpus, DiscoveryError)
    assert (err is None) == (err2 is None)  # both read the whole document
    for e in (err, err2):
        if e is not None:
            assert str(path) in str(e) or "from fixture" in str(e)
    if gpus is None:
        return None
    assert isinstance(version, str)
    for index, g in enumerate(gpus):
        assert isinstance(g, Gpu) and g.index == index
        assert isinstance(g.name, str) and isinstance(g.uuid, str)
        assert g.fabric is None or isinstance(g.fabric, FabricInfo | NvmlFailure)
    for strict in (True, False):
        cid, _ = outcome(lambda s=strict: clique_id_of(gpus, strict=s), DiscoveryError)
        if cid:
            cluster, _, clique = cid.partition(".")
            assert str(uuid.UUID(cluster)) == cluster and 0 <= int(clique) < 2**32
            assert label_value_problem(cid) is None
    return gpus


@FUZZ
@given(document)
def test_fixture_shapes(tmp_path_factory, doc):
    load(tmp_path_factory, dumps(doc))


@FUZZ
@given(mutated(json.dumps(VALID)))
def test_mutated_fixture(tmp_path_factory, data):
    load(tmp_path_factory, data)


@FUZZ
@given(st.binary(max_size=100))
@example(b"[" * 100_000)
@example(b"1" * 5000)
@example(b"\xff\xfe")
def test_random_bytes(tmp_path_factory, data):
    assert load(tmp_path_factory, data) is None or data.strip().startswith(b"{")


def test_valid_fixture_round_trips(tmp_path):
    gpus = FixtureSource(_write(tmp_path, VALID)).gpus()
    write_fixture(tmp_path / "again.json", "580.82.07", gpus)
    assert FixtureSource(tmp_path / "again.json").gpus() == gpus


def _write(tmp_path, doc):
    path = tmp_path / "fixture.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "gpu_fabric, fragment",
    [
        ({"clusterUuid": UUID, "cliqueId": 2**32, "state": 3, "status": 0}, "cliqueId"),
        ({"clusterUuid": UUID, "cliqueId": True, "state": 3, "status": 0}, "cliqueId"),
        ({"clusterUuid": "not-a-uuid", "cliqueId": 1, "state": 3, "status": 0}, "clusterUuid"),
        ({"clusterUuid": UUID, "cliqueId": 1, "state": 4, "status": 0}, "state"),
        ({"error": "SUCCESS"}, "cannot be NVML_SUCCESS"),
        ({"error": 1, "extra": 1}, "unknown key 'extra'"),
    ],
)
def test_nasty_fabric_values(tmp_path, gpu_fabric, fragment):
    doc = {"driverVersion": "1", "gpus": [{"name": "g", "uuid": "u", "fabric": gpu_fabric}]}
    with pytest.raises(DiscoveryError, match=fragment) as info:
        FixtureSource(_write(tmp_path, doc)).gpus()
    assert "gpus[0].fabric" in str(info.value)
