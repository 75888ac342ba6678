"""Container Device Interface (CDI) specs: the model, names, versions and spec files.

The driver writes CDI spec files that tell the container runtime which device nodes,
environment and mounts a claim's containers get; the simulated kubelet reads them
back the way a runtime would. This package depends only on the standard library
and PyYAML, so both sides can use it without pulling in the rest of the driver.
"""

from cdi.cdi_error import CDIError
from cdi.codec import spec_from_text, spec_to_json, spec_to_yaml
from cdi.container_edits import device_edits, merge_edits
from cdi.files import (
    SPEC_SUFFIXES,
    load_spec,
    remove_spec,
    spec_file_name,
    spec_path,
    write_spec,
)
from cdi.names import (
    QualifiedName,
    format_qualified_name,
    is_qualified_name,
    parse_kind,
    parse_qualified_name,
    validate_class_name,
    validate_device_name,
    validate_kind,
    validate_qualified_name,
    validate_vendor_name,
)
from cdi.resolve import (
    LoadedSpec,
    ResolvedDevice,
    container_edits_for,
    load_specs,
    resolve_device,
    resolve_devices,
    spec_files,
)
from cdi.spec import ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec
from cdi.validate import (
    DEVICE_NODE_TYPES,
    HOOK_NAMES,
    validate_container_edits,
    validate_device,
    validate_spec,
)
from cdi.version import (
    CURRENT_VERSION,
    EARLIEST_VERSION,
    KNOWN_VERSIONS,
    check_version,
    minimum_version,
    normalize_version,
)

__all__ = [
    "CURRENT_VERSION",
    "DEVICE_NODE_TYPES",
    "EARLIEST_VERSION",
    "HOOK_NAMES",
    "KNOWN_VERSIONS",
    "SPEC_SUFFIXES",
    "CDIError",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "Hook",
    "IntelRdt",
    "LoadedSpec",
    "Mount",
    "NetDevice",
    "QualifiedName",
    "ResolvedDevice",
    "Spec",
    "check_version",
    "container_edits_for",
    "device_edits",
    "format_qualified_name",
    "is_qualified_name",
    "load_spec",
    "load_specs",
    "merge_edits",
    "minimum_version",
    "normalize_version",
    "parse_kind",
    "parse_qualified_name",
    "remove_spec",
    "resolve_device",
    "resolve_devices",
    "spec_file_name",
    "spec_files",
    "spec_from_text",
    "spec_path",
    "spec_to_json",
    "spec_to_yaml",
    "validate_class_name",
    "validate_container_edits",
    "validate_device",
    "validate_device_name",
    "validate_kind",
    "validate_qualified_name",
    "validate_spec",
    "validate_vendor_name",
    "write_spec",
]
