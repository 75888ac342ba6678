"""Node discovery: device majors, IMEX channel and capability nodes, driver files, NVML facts
and the NVLink clique ID. Everything here is synchronous and side-effect free apart from
reading files and calling NVML; failures are DiscoveryError with an admin-facing message."""

from __future__ import annotations

from agent.discovery.capability import (
    CapabilityInfo,
    CapDevice,
    fabric_imex_mgmt_path,
    parse_capability,
    read_fabric_imex_mgmt,
)
from agent.discovery.channels import ChannelNode, ImexChannels
from agent.discovery.devnode import CharDevice, char_device_numbers
from agent.discovery.discovery_error import DiscoveryError
from agent.discovery.driverversion import (
    parse_version,
    require_dns_names_driver,
    version_at_least,
)
from agent.discovery.findfile import (
    BINARY_SEARCH_DIRS,
    LIBRARY_SEARCH_DIRS,
    FoundFile,
    dev_root,
    find_file,
    find_imex,
    find_imex_ctl,
    find_nvidia_smi,
    find_nvml_library,
    require_file,
    resolve_in_root,
)
from agent.discovery.nvlink_clique import CliqueTracker, clique_id, clique_id_of
from agent.discovery.nvml import (
    FabricInfo,
    FabricState,
    FixtureSource,
    Gpu,
    NvmlError,
    NvmlFailure,
    NvmlSource,
    PynvmlSource,
)
from agent.discovery.procdevices import char_major, read_char_major
from agent.discovery.single_node import is_single_node_nvlink

__all__ = [
    "BINARY_SEARCH_DIRS",
    "LIBRARY_SEARCH_DIRS",
    "CapDevice",
    "CapabilityInfo",
    "ChannelNode",
    "CharDevice",
    "CliqueTracker",
    "DiscoveryError",
    "FabricInfo",
    "FabricState",
    "FixtureSource",
    "FoundFile",
    "Gpu",
    "ImexChannels",
    "NvmlError",
    "NvmlFailure",
    "NvmlSource",
    "PynvmlSource",
    "char_device_numbers",
    "char_major",
    "clique_id",
    "clique_id_of",
    "dev_root",
    "fabric_imex_mgmt_path",
    "find_file",
    "find_imex",
    "find_imex_ctl",
    "find_nvidia_smi",
    "find_nvml_library",
    "is_single_node_nvlink",
    "parse_capability",
    "parse_version",
    "read_char_major",
    "read_fabric_imex_mgmt",
    "require_dns_names_driver",
    "require_file",
    "resolve_in_root",
    "version_at_least",
]
