"""NVML facts from a JSON file per node, for tests and the simulated cluster.

A fixture is input written by people, so every field is checked and a bad one is reported
by its path in the document (`gpus[1].fabric.state`). The file is re-read on every call so
a test or the simulator can change a node's fabric at run time.

    {"driverVersion": "580.82.07",
     "gpus": [{"name": "NVIDIA GB200", "uuid": "GPU-...",
               "fabric": {"clusterUuid": "0f2a6e3c-...", "cliqueId": 3,
                          "state": "COMPLETED", "status": "SUCCESS"}},
              {"name": "...", "uuid": "...", "fabric": "NOT_SUPPORTED"},
              {"name": "...", "uuid": "...", "fabric": {"error": "NVML_ERROR_UNKNOWN"}}]}

`fabric` may be left out (NOT_SUPPORTED). An optional top-level `"error"` makes every call
fail as if NVML could not initialise. States and statuses are given by name or number.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from agent.discovery.discovery_error import DiscoveryError
from agent.discovery.nvmltypes import (
    NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS,
    RETURN_CODES,
    UINT32_MAX,
    FabricInfo,
    FabricState,
    Gpu,
    NvmlError,
    NvmlFailure,
    return_code_name,
)

NOT_SUPPORTED: Final = "NOT_SUPPORTED"
INIT_CALL: Final = "nvmlInitWithFlags"
FABRIC_CALL: Final = "nvmlDeviceGetGpuFabricInfo"

_TOP_KEYS: Final = frozenset({"driverVersion", "gpus", "error"})
_GPU_KEYS: Final = frozenset({"name", "uuid", "fabric"})
_FABRIC_KEYS: Final = frozenset({"clusterUuid", "cliqueId", "state", "status"})


class _Doc:
    """Checks one parsed document, naming the offending field in every error."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, field: str, problem: str) -> DiscoveryError:
        return DiscoveryError(f"NVML fixture {self.path}: {field}: {problem}; fix the fixture file")

    def obj(self, value: Any, field: str, allowed: frozenset[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(field, f"expected an object, got {_kind(value)}")
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.fail(
                field, f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
            )
        return value

    def required(self, obj: dict[str, Any], key: str, field: str) -> Any:
        if key not in obj:
            raise self.fail(field, f"missing key {key!r}")
        return obj[key]

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str):
            raise self.fail(field, f"expected a string, got {_kind(value)}")
        return value

    def uint32(self, value: Any, field: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= UINT32_MAX:
            raise self.fail(field, f"expected an integer in 0..{UINT32_MAX}, got {_show(value)}")
        return value

    def return_code(self, value: Any, field: str) -> int:
        if isinstance(value, str):
            for key in (value, f"NVML_{value}", f"NVML_ERROR_{value}"):
                if key in RETURN_CODES:
                    return RETURN_CODES[key]
            raise self.fail(
                field, f"unknown NVML return code {_show(value)} (e.g. SUCCESS, NVML_ERROR_UNKNOWN)"
            )
        return self.uint32(value, field)

    def state(self, value: Any, field: str) -> int:
        if isinstance(value, str) and value in FabricState.__members__:
            return int(FabricState[value])
        if isinstance(value, int) and not isinstance(value, bool) and value in set(FabricState):
            return value
        choices = ", ".join(FabricState.__members__)
        raise self.fail(field, f"expected one of {choices} or 0-3, got {_show(value)}")

    def error_code(self, value: Any, field: str) -> int:
        code = self.return_code(value, field)
        if code == NVML_SUCCESS:
            raise self.fail(field, "an error cannot be NVML_SUCCESS")
        return code

    def fabric(self, value: Any, field: str) -> FabricInfo | NvmlFailure | None:
        if value == NOT_SUPPORTED:
            return None
        if isinstance(value, dict) and "error" in value:
            self.obj(value, field, frozenset({"error"}))
            code = self.error_code(value["error"], f"{field}.error")
            return None if code == NVML_ERROR_NOT_SUPPORTED else NvmlFailure(FABRIC_CALL, code)
        if isinstance(value, str):
            raise self.fail(field, f'expected "{NOT_SUPPORTED}" or an object, got {_show(value)}')
        fabric = self.obj(value, field, _FABRIC_KEYS)
        text = self.string(self.required(fabric, "clusterUuid", field), f"{field}.clusterUuid")
        try:
            cluster = uuid.UUID(text).bytes
        except ValueError:
            raise self.fail(
                f"{field}.clusterUuid", f"expected a UUID like 0f2a6e3c-1111-..., got {_show(text)}"
            ) from None
        return FabricInfo(
            cluster_uuid=cluster,
            clique_id=self.uint32(self.required(fabric, "cliqueId", field), f"{field}.cliqueId"),
            state=self.state(self.required(fabric, "state", field), f"{field}.state"),
            status=self.return_code(self.required(fabric, "status", field), f"{field}.status"),
        )

    def gpu(self, index: int, value: Any) -> Gpu:
        field = f"gpus[{index}]"
        gpu = self.obj(value, field, _GPU_KEYS)
        return Gpu(
            index=index,
            name=self.string(self.required(gpu, "name", field), f"{field}.name"),
            uuid=self.string(self.required(gpu, "uuid", field), f"{field}.uuid"),
            fabric=self.fabric(gpu.get("fabric", NOT_SUPPORTED), f"{field}.fabric"),
        )


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


class FixtureSource:
    """An NvmlSource read from a JSON fixture file (re-read on every call)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def _load(self) -> tuple[str, list[Gpu]]:
        try:
            raw = self.path.read_bytes()
        except OSError as e:
            raise DiscoveryError(
                f"cannot read NVML fixture {self.path}: {e.strerror or e}; check the fixture "
                f"path the agent was given"
            ) from e
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError
            raise DiscoveryError(
                f"NVML fixture {self.path} is not valid JSON ({e}); fix the fixture file"
            ) from None
        doc = _Doc(self.path)
        top = doc.obj(data, "(top level)", _TOP_KEYS)
        if "error" in top:
            raise NvmlError(INIT_CALL, doc.error_code(top["error"], "error"), "from fixture")
        version = doc.string(doc.required(top, "driverVersion", "(top level)"), "driverVersion")
        gpus = doc.required(top, "gpus", "(top level)")
        if not isinstance(gpus, list):
            raise doc.fail("gpus", f"expected a list, got {_kind(gpus)}")
        return version, [doc.gpu(i, g) for i, g in enumerate(gpus)]

    def driver_version(self) -> str:
        return self._load()[0]

    def gpus(self) -> list[Gpu]:
        return self._load()[1]


def _fabric_json(fabric: FabricInfo | NvmlFailure | None) -> Any:
    if fabric is None:
        return NOT_SUPPORTED
    if isinstance(fabric, NvmlFailure):
        return {"error": return_code_name(fabric.code)}
    state: int | str = fabric.state
    if fabric.state in set(FabricState):
        state = FabricState(fabric.state).name
    status: int | str = fabric.status
    if fabric.status in RETURN_CODES.values():
        status = return_code_name(fabric.status)
    return {
        "clusterUuid": fabric.cluster_uuid_text,
        "cliqueId": fabric.clique_id,
        "state": state,
        "status": status,
    }


def fixture_document(driver_version: str, gpus: Sequence[Gpu]) -> dict[str, Any]:
    """The JSON document that FixtureSource reads back as these GPUs (indexes are positions)."""
    return {
        "driverVersion": driver_version,
        "gpus": [{"name": g.name, "uuid": g.uuid, "fabric": _fabric_json(g.fabric)} for g in gpus],
    }


def write_fixture(path: Path | str, driver_version: str, gpus: Sequence[Gpu]) -> None:
    """Write a fixture atomically, so a reader never sees half a file."""
    path = Path(path)
    text = json.dumps(fixture_document(driver_version, gpus), indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
