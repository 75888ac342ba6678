"""The real NVML source: library loading errors, and device walks over simulated pynvml calls.

There is no GPU here, so pynvml's functions are replaced; the library handle is set to a
stand-in carrying the expected path so that nothing is dlopen'ed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from types import SimpleNamespace

import pynvml
import pytest

from agent.discovery import (
    DiscoveryError,
    FabricInfo,
    Gpu,
    NvmlError,
    NvmlFailure,
    PynvmlSource,
    clique_id,
)
from agent.discovery.nvml import load_library

UUID_A = "0f2a6e3c-1111-2222-3333-444455556666"


@pytest.fixture
def no_library(monkeypatch):
    """pynvml with no library loaded; restored afterwards."""
    monkeypatch.setattr(pynvml, "nvmlLib", None)


def test_missing_library(tmp_path, no_library):
    path = tmp_path / "libnvidia-ml.so.1"
    with pytest.raises(NvmlError) as err:
        PynvmlSource(path).gpus()
    msg = str(err.value)
    assert isinstance(err.value, DiscoveryError)
    assert err.value.code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert f"loading {path} failed: NVML_ERROR_LIBRARY_NOT_FOUND" in msg
    assert "--container-driver-root" in msg
    assert pynvml.nvmlLib is None


def test_not_a_library(tmp_path, no_library):
    path = tmp_path / "libnvidia-ml.so.1"
    path.write_text("not an ELF file")
    with pytest.raises(NvmlError, match="NVML_ERROR_LIBRARY_NOT_FOUND"):
        PynvmlSource(path).driver_version()
    assert pynvml.nvmlLib is None


def test_library_loaded_from_the_given_path(tmp_path, no_library):
    """A real shared object (libc stands in for NVML) is loaded by path and kept."""
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc to load")
    loaded = ctypes.CDLL(libc)
    path = loaded._name
    load_library(path)
    assert pynvml.nvmlLib._name == path
    load_library(path)  # same path again: fine
    with pytest.raises(NvmlError, match="already uses NVML from"):
        load_library(tmp_path / "other.so")


SNAKE = {
    "nvmlInitWithFlags": "init_with_flags",
    "nvmlShutdown": "shutdown",
    "nvmlSystemGetDriverVersion": "system_get_driver_version",
    "nvmlDeviceGetCount": "device_get_count",
    "nvmlDeviceGetHandleByIndex": "device_get_handle_by_index",
    "nvmlDeviceGetName": "device_get_name",
    "nvmlDeviceGetUUID": "device_get_uuid",
    "nvmlDeviceGetGpuFabricInfoV": "device_get_fabric_info_v",
    "nvmlDeviceGetGpuFabricInfo": "device_get_fabric_info",
}


class FakeNvml:
    """Simulated devices behind pynvml's function names."""

    def __init__(self, devices, *, init_error=None, version="580.82.07"):
        self.devices = devices
        self.init_error = init_error
        self.version = version
        self.sessions = 0
        self.open = 0
        self.flags = []

    def install(self, monkeypatch, path):
        monkeypatch.setattr(pynvml, "nvmlLib", SimpleNamespace(_name=str(path)))
        for name in (
            "nvmlInitWithFlags",
            "nvmlShutdown",
            "nvmlSystemGetDriverVersion",
            "nvmlDeviceGetCount",
            "nvmlDeviceGetHandleByIndex",
            "nvmlDeviceGetName",
            "nvmlDeviceGetUUID",
            "nvmlDeviceGetGpuFabricInfoV",
            "nvmlDeviceGetGpuFabricInfo",
        ):
            monkeypatch.setattr(pynvml, name, getattr(self, SNAKE[name]))

    def init_with_flags(self, flags):
        self.flags.append(flags)
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.sessions += 1
        self.open += 1

    def shutdown(self):
        self.open -= 1
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)  # only logged

    def system_get_driver_version(self):
        return self.version

    def device_get_count(self):
        return len(self.devices)

    def device_get_handle_by_index(self, index):
        return index

    def _field(self, handle, key):
        value = self.devices[handle][key]
        if isinstance(value, int) and not isinstance(value, bool):
            raise pynvml.NVMLError(value)
        return value

    def device_get_name(self, handle):
        return self._field(handle, "name")

    def device_get_uuid(self, handle):
        return self._field(handle, "uuid")

    def _fill(self, handle, ref, versioned):
        device = self.devices[handle]
        if versioned and device.get("legacy_only"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        fabric = device["fabric"]
        if isinstance(fabric, int):
            raise pynvml.NVMLError(fabric)
        info = ref._obj
        assert hasattr(info, "version") is versioned
        info.clusterUuid[:] = list(bytes.fromhex(fabric[0].replace("-", "")))
        info.cliqueId, info.state, info.status = fabric[1:]

    def device_get_fabric_info_v(self, handle, ref):
        self._fill(handle, ref, versioned=True)

    def device_get_fabric_info(self, handle, ref):
        self._fill(handle, ref, versioned=False)


def test_device_walk(tmp_path, monkeypatch):
    path = tmp_path / "libnvidia-ml.so.1"
    fake = FakeNvml(
        [
            {"name": "NVIDIA GB200", "uuid": "GPU-0", "fabric": (UUID_A, 3, 3, 0)},
            {
                "name": b"NVIDIA GB200",
                "uuid": b"GPU-1",
                "fabric": (UUID_A, 3, 3, 0),
                "legacy_only": True,
            },
            {"name": "NVIDIA H100", "uuid": "GPU-2", "fabric": pynvml.NVML_ERROR_NOT_SUPPORTED},
            {"name": "NVIDIA GB200", "uuid": "GPU-3", "fabric": pynvml.NVML_ERROR_UNKNOWN},
            # A display device is not asked for its UUID or fabric (both would fail here).
            {"name": "DGX Display", "uuid": pynvml.NVML_ERROR_UNKNOWN, "fabric": 999},
        ]
    )
    fake.install(monkeypatch, path)
    source = PynvmlSource(path)
    assert source.gpus() == [
        Gpu(0, "NVIDIA GB200", "GPU-0", FabricInfo(UUID_A, 3, 3, 0)),
        Gpu(1, "NVIDIA GB200", "GPU-1", FabricInfo(UUID_A, 3, 3, 0)),
        Gpu(2, "NVIDIA H100", "GPU-2", None),
        Gpu(3, "NVIDIA GB200", "GPU-3", NvmlFailure("nvmlDeviceGetGpuFabricInfo", 999)),
        Gpu(4, "DGX Display", "", None),
    ]
    assert source.driver_version() == "580.82.07"
    assert fake.flags == [pynvml.NVML_INIT_FLAG_NO_GPUS] * 2
    assert fake.sessions == 2 and fake.open == 0  # one session per call, always shut down


def test_clique_over_simulated_nvml(tmp_path, monkeypatch):
    path = tmp_path / "libnvidia-ml.so.1"
    FakeNvml(
        [
            {"name": "NVIDIA GB200", "uuid": "GPU-0", "fabric": (UUID_A, 7, 3, 0)},
            {"name": "NVIDIA GB200", "uuid": "GPU-1", "fabric": (UUID_A, 7, 2, 0)},
        ]
    ).install(monkeypatch, path)
    source = PynvmlSource(path)
    assert clique_id(source, strict=False) == f"{UUID_A}.7"
    with pytest.raises(DiscoveryError, match=r"not attached \(device 1/GPU-1"):
        clique_id(source, strict=True)


def test_init_failure(tmp_path, monkeypatch):
    path = tmp_path / "libnvidia-ml.so.1"
    fake = FakeNvml([], init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    fake.install(monkeypatch, path)
    with pytest.raises(
        NvmlError,
        match=r"nvmlInitWithFlags failed: "
        r"NVML_ERROR_LIB_RM_VERSION_MISMATCH; .*different driver versions",
    ):
        PynvmlSource(path).gpus()
    assert fake.open == 0


def test_uuid_failure_is_fatal(tmp_path, monkeypatch):
    path = tmp_path / "libnvidia-ml.so.1"
    fake = FakeNvml([{"name": "NVIDIA GB200", "uuid": pynvml.NVML_ERROR_GPU_IS_LOST}])
    fake.install(monkeypatch, path)
    with pytest.raises(NvmlError, match="nvmlDeviceGetUUID failed: NVML_ERROR_GPU_IS_LOST") as e:
        PynvmlSource(path).gpus()
    assert e.value.call == "nvmlDeviceGetUUID"
    assert fake.open == 0
