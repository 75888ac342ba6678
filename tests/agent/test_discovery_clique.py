"""Clique ID rules, strict and legacy, and the refresh semantics.

The rules are the reference's `getCliqueIDStrict` / `getCliqueIDLegacy` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/nvlib.go.
"""

from __future__ import annotations

import functools
import json

import pytest

from agent.discovery import (
    CliqueTracker,
    DiscoveryError,
    FabricInfo,
    FixtureSource,
    Gpu,
    NvmlError,
    NvmlFailure,
    clique_id,
    clique_id_of,
)

UUID_A = "0f2a6e3c-1111-2222-3333-444455556666"
UUID_B = "0f2a6e3c-1111-2222-3333-777788889999"
ZERO = "00000000-0000-0000-0000-000000000000"
UNKNOWN = 999
IN_PROGRESS, NOT_STARTED, COMPLETED, NOT_SUPPORTED_STATE = 2, 1, 3, 0


def gpu(i, fabric, name="NVIDIA GB200"):
    return Gpu(i, name, f"GPU-{i}", fabric)


def fab(uuid=UUID_A, clique=3, state=COMPLETED, status=0):
    return FabricInfo(uuid, clique, state, status)


OK = f"{UUID_A}.3"

# (case, gpus, strict result, legacy result); a result that is a str starting with "!" is an
# error whose message contains the rest.
CASES = [
    ("no GPUs", [], "", ""),
    ("all attached", [gpu(0, fab()), gpu(1, fab())], OK, OK),
    ("NOT_SUPPORTED call", [gpu(0, None)], "", ""),
    ("NOT_SUPPORTED call + attached", [gpu(0, None), gpu(1, fab())], OK, OK),
    ("state NOT_SUPPORTED", [gpu(0, fab(state=NOT_SUPPORTED_STATE)), gpu(1, fab())], OK, OK),
    (
        "state NOT_STARTED",
        [gpu(0, fab()), gpu(1, fab(state=NOT_STARTED))],
        "!NVLink fabric not attached (device 1/GPU-1): state=1, refusing to start "
        "(NVIDIA GB200, NOT_STARTED)",
        OK,
    ),
    (
        "state IN_PROGRESS",
        [gpu(0, fab(state=IN_PROGRESS))],
        "!NVLink fabric not attached (device 0/GPU-0): state=2, refusing to start "
        "(NVIDIA GB200, IN_PROGRESS)",
        "",
    ),
    (
        "status error",
        [gpu(0, fab(status=UNKNOWN))],
        "!NVLink fabric registration error (device 0/GPU-0): status=999, refusing to start "
        "(NVIDIA GB200, NVML_ERROR_UNKNOWN)",
        "",
    ),
    (
        "status error only counts once COMPLETED",
        [gpu(0, fab(state=NOT_SUPPORTED_STATE, status=UNKNOWN))],
        "",
        "",
    ),
    ("zero cluster UUID skipped", [gpu(0, fab(uuid=ZERO)), gpu(1, fab())], OK, OK),
    ("only zero UUIDs", [gpu(0, fab(uuid=ZERO, clique=0))], "", ""),
    (
        "fabric call error",
        [gpu(0, fab()), gpu(1, NvmlFailure("nvmlDeviceGetGpuFabricInfo", UNKNOWN))],
        "!failed to get GPU fabric info (device 1/GPU-1 (NVIDIA GB200)): NVML_ERROR_UNKNOWN",
        "!failed to get GPU fabric info (device 1/GPU-1 (NVIDIA GB200)): NVML_ERROR_UNKNOWN",
    ),
    (
        "two clique IDs",
        [gpu(0, fab(clique=3)), gpu(1, fab(clique=4))],
        "!unexpected number of unique CliqueIDs found on devices: 3, 4",
        "!unexpected number of unique CliqueIDs found on devices",
    ),
    (
        "two cluster UUIDs",
        [gpu(0, fab()), gpu(1, fab(uuid=UUID_B))],
        "!unexpected number of unique ClusterUUIDs found on devices",
        "!unexpected number of unique ClusterUUIDs found on devices",
    ),
    (
        "DGX Display skipped",
        [
            gpu(0, NvmlFailure("nvmlDeviceGetGpuFabricInfo", UNKNOWN), name="DGX Display"),
            gpu(1, fab(state=IN_PROGRESS), name="NVIDIA DGX Display"),
            gpu(2, fab()),
        ],
        OK,
        OK,
    ),
    ("only a DGX Display", [gpu(0, fab(), name="DGX Display")], "", ""),
    ("uppercase UUID input, lowercase output", [gpu(0, fab(uuid=UUID_A.upper()))], OK, OK),
    (
        "clique ID is decimal uint32",
        [gpu(0, fab(clique=2**32 - 1))],
        f"{UUID_A}.4294967295",
        f"{UUID_A}.4294967295",
    ),
]


def check(result_or_error, compute):
    if result_or_error.startswith("!"):
        with pytest.raises(DiscoveryError) as err:
            compute()
        assert result_or_error[1:] in str(err.value)
        assert "\n" not in str(err.value)
    else:
        assert compute() == result_or_error


@pytest.mark.parametrize(("case", "gpus", "strict", "legacy"), CASES, ids=[c[0] for c in CASES])
def test_rules(case, gpus, strict, legacy):
    check(strict, lambda: clique_id_of(gpus, strict=True))
    check(legacy, lambda: clique_id_of(gpus, strict=False))


@pytest.mark.parametrize("state", [NOT_STARTED, IN_PROGRESS])
def test_fm_partitioning_single_node_skips_unregistered(state):
    gpus = [gpu(0, fab(state=state)), gpu(1, fab())]
    assert clique_id_of(gpus, strict=True, fm_partitioning=True, single_node_nvlink=True) == OK
    only = [gpu(0, fab(state=state))]
    assert clique_id_of(only, strict=True, fm_partitioning=True, single_node_nvlink=True) == ""
    # Either condition alone is not enough.
    for fm, single in ((True, False), (False, True)):
        with pytest.raises(DiscoveryError, match="NVLink fabric not attached"):
            clique_id_of(gpus, strict=True, fm_partitioning=fm, single_node_nvlink=single)


def test_fm_partitioning_does_not_hide_status_errors():
    gpus = [gpu(0, fab(status=UNKNOWN))]
    with pytest.raises(DiscoveryError, match="registration error"):
        clique_id_of(gpus, strict=True, fm_partitioning=True, single_node_nvlink=True)


def test_strict_errors_carry_a_hint():
    with pytest.raises(DiscoveryError) as err:
        clique_id_of([gpu(0, fab(state=IN_PROGRESS))], strict=True)
    assert "CrashOnNVLinkFabricErrors=false" in str(err.value)


def write(path, gpus_json, **top):
    path.write_text(json.dumps({"driverVersion": "580.82.07", "gpus": gpus_json, **top}))


def test_clique_id_from_fixture(tmp_path):
    path = tmp_path / "nvml.json"
    fabric = {"clusterUuid": UUID_A, "cliqueId": 3, "state": "COMPLETED", "status": "SUCCESS"}
    write(
        path,
        [
            {"name": "NVIDIA GB200", "uuid": "GPU-0", "fabric": fabric},
            {"name": "NVIDIA GB200", "uuid": "GPU-1", "fabric": "NOT_SUPPORTED"},
        ],
    )
    source = FixtureSource(path)
    assert clique_id(source, strict=True) == OK
    assert clique_id(source, strict=False) == OK


def test_nvml_error_propagates_as_discovery_error(tmp_path):
    path = tmp_path / "nvml.json"
    write(path, [], error="NVML_ERROR_DRIVER_NOT_LOADED")
    with pytest.raises(NvmlError, match="NVML: nvmlInitWithFlags failed") as err:
        clique_id(FixtureSource(path), strict=True)
    assert isinstance(err.value, DiscoveryError)
    assert "load the NVIDIA kernel module" in str(err.value)


# --- tracker -------------------------------------------------------------------------------


class Answers:
    """A reader that returns (or raises) the queued answers in turn."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def __call__(self):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_tracker_start_raises():
    with pytest.raises(DiscoveryError, match="boom"):
        CliqueTracker.start(Answers(DiscoveryError("boom")))


def test_tracker_refresh_semantics():
    tracker = CliqueTracker.start(Answers("", "", "a.1", "", "a.1", "b.2", DiscoveryError("x")))
    assert tracker.value == ""
    assert tracker.refresh() is None and tracker.value == ""  # empty stays empty
    assert tracker.refresh() is None and tracker.value == "a.1"  # new non-empty replaces
    assert tracker.refresh() is None and tracker.value == "a.1"  # empty never clears
    assert tracker.refresh() is None and tracker.value == "a.1"  # same value
    assert tracker.refresh() is None and tracker.value == "b.2"  # different non-empty
    error = tracker.refresh()
    assert isinstance(error, DiscoveryError) and str(error) == "x"
    assert tracker.value == "b.2"  # an error keeps the value


def test_tracker_over_a_changing_fixture(tmp_path, caplog):
    path = tmp_path / "nvml.json"

    def set_fabric(**fabric):
        fabric = {"clusterUuid": UUID_A, "cliqueId": 3, "state": 3, "status": 0, **fabric}
        write(path, [{"name": "NVIDIA GB200", "uuid": "GPU-0", "fabric": fabric}])

    set_fabric()
    tracker = CliqueTracker.start(functools.partial(clique_id, FixtureSource(path), strict=True))
    assert tracker.value == OK
    set_fabric(cliqueId=4)
    assert tracker.refresh() is None and tracker.value == f"{UUID_A}.4"
    set_fabric(state="IN_PROGRESS")
    assert isinstance(tracker.refresh(), DiscoveryError)
    assert tracker.value == f"{UUID_A}.4"
    assert "refreshing the NVLink clique ID failed" in caplog.text
    set_fabric(clusterUuid=ZERO)
    assert tracker.refresh() is None and tracker.value == f"{UUID_A}.4"
