"""The NVML abstraction used for the clique ID: one Protocol, a real and a fixture source.

Records and the Protocol are in `nvmltypes`, the implementations in `pynvmlsource` and
`fixturesource`; this module is the one place callers import them from.
"""

from __future__ import annotations

from agent.discovery.fixturesource import FixtureSource, fixture_document, write_fixture
from agent.discovery.nvmltypes import (
    DISPLAY_DEVICE_NAMES,
    FabricInfo,
    FabricState,
    Gpu,
    NvmlError,
    NvmlFailure,
    NvmlSource,
    is_display_device,
    return_code_name,
    state_name,
)
from agent.discovery.pynvmlsource import PynvmlSource, load_library

__all__ = [
    "DISPLAY_DEVICE_NAMES",
    "FabricInfo",
    "FabricState",
    "FixtureSource",
    "Gpu",
    "NvmlError",
    "NvmlFailure",
    "NvmlSource",
    "PynvmlSource",
    "fixture_document",
    "is_display_device",
    "load_library",
    "return_code_name",
    "state_name",
    "write_fixture",
]
