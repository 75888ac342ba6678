"""NVML facts from the host driver's libnvidia-ml.so.1, through the `pynvml` bindings."""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from agent.discovery.nvmltypes import (
    NVML_ERROR_NOT_SUPPORTED,
    FabricInfo,
    Gpu,
    NvmlError,
    NvmlFailure,
    is_display_device,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

FABRIC_INFO_CALL = "nvmlDeviceGetGpuFabricInfo"
# The versioned call is tried first; drivers without it (or without its struct version)
# answer with one of these, and the legacy call gives the same fields.
_USE_LEGACY_FABRIC_CALL = frozenset(
    {pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _call(name: str, fn: Callable[..., T], *args: Any) -> T:
    try:
        return fn(*args)
    except pynvml.NVMLError as e:
        raise NvmlError(name, e.value) from e


def load_library(path: Path | str) -> None:
    """Make pynvml use the library at `path`.

    pynvml loads `libnvidia-ml.so.1` by name, through the container's loader path, and only
    while its handle is unset; setting the handle (under pynvml's own lock) before the first
    init makes it use the host driver's copy. The handle is process-wide, so a second,
    different path is refused rather than silently ignored.
    """
    wanted = os.fspath(path)
    with pynvml.libLoadLock:
        current = pynvml.nvmlLib
        if current is None:
            try:
                pynvml.nvmlLib = ctypes.CDLL(wanted)
            except OSError as e:
                raise NvmlError(
                    f"loading {wanted}", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, str(e)
                ) from e
            return
    loaded = getattr(current, "_name", None)
    if loaded != wanted:
        raise NvmlError(
            f"loading {wanted}",
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
            f"this process already uses NVML from {loaded}",
        )


def _read_fabric(handle: Any) -> Any:
    """Fill a fabric-info struct, with the versioned call where the driver has it."""
    info = pynvml.c_nvmlGpuFabricInfoV_t()
    try:
        pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        return info
    except pynvml.NVMLError as e:
        if e.value not in _USE_LEGACY_FABRIC_CALL:
            raise
    legacy = pynvml.c_nvmlGpuFabricInfo_t()
    pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(legacy))
    return legacy


def _fabric(handle: Any) -> FabricInfo | NvmlFailure | None:
    try:
        info = _read_fabric(handle)
    except pynvml.NVMLError as e:
        if e.value == NVML_ERROR_NOT_SUPPORTED:
            return None
        return NvmlFailure(FABRIC_INFO_CALL, e.value)
    return FabricInfo(
        cluster_uuid=bytes(info.clusterUuid),
        clique_id=int(info.cliqueId),
        state=int(info.state),
        status=int(info.status),
    )


class PynvmlSource:
    """The real NvmlSource. Every call is its own `nvmlInitWithFlags(NO_GPUS)` ... `nvmlShutdown`
    session, as in the reference, so a long-running agent never holds NVML open."""

    def __init__(self, library_path: Path | str) -> None:
        self.library_path = Path(library_path)

    @contextmanager
    def _session(self) -> Iterator[None]:
        load_library(self.library_path)
        _call("nvmlInitWithFlags", pynvml.nvmlInitWithFlags, pynvml.NVML_INIT_FLAG_NO_GPUS)
        try:
            yield
        finally:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as e:
                log.warning("error shutting down NVML: %s", e)

    def driver_version(self) -> str:
        with self._session():
            return _text(_call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion))

    def gpus(self) -> list[Gpu]:
        with self._session():
            count = _call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)
            out = []
            for index in range(count):
                handle = _call(
                    "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index
                )
                name = _text(_call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))
                if is_display_device(name):
                    out.append(Gpu(index, name, "", None))
                    continue
                uuid = _text(_call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
                out.append(Gpu(index, name, uuid, _fabric(handle)))
            return out
