"""What the agent needs from NVML, as plain data: driver version and per-GPU fabric info.

The clique rules work on these records, so they run the same against the real library
and against the JSON fixtures of tests and the simulated cluster.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Final, Protocol

import pynvml

from agent.discovery.discovery_error import DiscoveryError

NVML_SUCCESS: Final = 0
NVML_ERROR_NOT_SUPPORTED: Final = pynvml.NVML_ERROR_NOT_SUPPORTED
UINT32_MAX: Final = 2**32 - 1

# NVML return codes by name (`NVML_SUCCESS`, `NVML_ERROR_UNKNOWN`, ...), from the bindings.
RETURN_CODES: Final[MappingProxyType[str, int]] = MappingProxyType(
    {
        attr: getattr(pynvml, attr)
        for attr in dir(pynvml)
        if attr == "NVML_SUCCESS" or attr.startswith("NVML_ERROR_")
    }
)
_CODE_NAMES: Final = MappingProxyType({code: name for name, code in RETURN_CODES.items()})

# NVML lists these display adapters of DGX stations as devices; they are not NVLink GPUs.
DISPLAY_DEVICE_NAMES: Final = frozenset({"DGX Display", "NVIDIA DGX Display"})


class FabricState(IntEnum):
    """`nvmlGpuFabricState_t`: how far the GPU's registration with the NVLink fabric got."""

    NOT_SUPPORTED = 0
    NOT_STARTED = 1
    IN_PROGRESS = 2
    COMPLETED = 3


def state_name(state: int) -> str:
    try:
        return FabricState(state).name
    except ValueError:
        return str(state)


def return_code_name(code: int) -> str:
    """`NVML_ERROR_UNKNOWN` for 999; codes this binding does not know are shown by number."""
    return _CODE_NAMES.get(code, f"NVML return code {code}")


def is_display_device(name: str) -> bool:
    return name in DISPLAY_DEVICE_NAMES


_HINTS: Final = MappingProxyType(
    {
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "load the NVIDIA kernel module on this node",
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
            "libnvidia-ml.so.1 and the loaded kernel module are different driver versions; "
            "reboot or reinstall the driver so they match"
        ),
        pynvml.NVML_ERROR_NO_PERMISSION: "run the agent container privileged",
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
            "check that the host's NVIDIA driver root is mounted at --container-driver-root"
        ),
    }
)


class NvmlError(DiscoveryError):
    """An NVML call failed in a way that stops discovery (init, count, handle, name, UUID)."""

    def __init__(self, call: str, code: int, detail: str = "") -> None:
        self.call = call
        self.code = code
        hint = _HINTS.get(code, "check the NVIDIA driver on this node with nvidia-smi")
        what = f"{call} failed: {return_code_name(code)}"
        super().__init__(f"NVML: {what}{f' ({detail})' if detail else ''}; {hint}")


@dataclass(frozen=True)
class NvmlFailure:
    """A per-GPU NVML call that returned an error, kept as data so the clique rules decide."""

    call: str
    code: int

    def __str__(self) -> str:
        return f"{self.call}: {return_code_name(self.code)}"


@dataclass(frozen=True)
class FabricInfo:
    """`nvmlGpuFabricInfo_t`: cluster UUID, clique ID, registration state and status (an NVML
    return code, meaningful once state is COMPLETED).

    `cluster_uuid` may be given as 16 bytes (as NVML returns it) or as UUID text; it is
    always stored as the 16 bytes, so equal fabrics compare equal.
    """

    cluster_uuid: bytes | str
    clique_id: int
    state: int
    status: int = NVML_SUCCESS

    def __post_init__(self) -> None:
        raw: object = self.cluster_uuid
        if isinstance(raw, str):
            raw = uuid.UUID(raw).bytes
        elif isinstance(raw, bytes | bytearray | memoryview):
            raw = bytes(raw)
        if not isinstance(raw, bytes) or len(raw) != 16:
            raise ValueError(
                f"cluster UUID must be 16 bytes or UUID text, got {self.cluster_uuid!r}"
            )
        object.__setattr__(self, "cluster_uuid", raw)
        for field, value in (("clique_id", self.clique_id), ("state", self.state)):
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= UINT32_MAX
            ):
                raise ValueError(f"{field} must be a uint32, got {value!r}")
        if isinstance(self.status, bool) or not isinstance(self.status, int):
            raise ValueError(f"status must be an NVML return code, got {self.status!r}")

    @property
    def cluster_uuid_bytes(self) -> bytes:
        """The 16 raw bytes (what `cluster_uuid` holds once constructed)."""
        raw = self.cluster_uuid
        return raw if isinstance(raw, bytes) else uuid.UUID(raw).bytes

    @property
    def cluster_uuid_text(self) -> str:
        """Canonical lowercase 8-4-4-4-12 form, as it appears in the clique ID."""
        return str(uuid.UUID(bytes=self.cluster_uuid_bytes))

    @property
    def zero_cluster(self) -> bool:
        """All-zero UUID: NVLink-capable but not multi-node NVLink."""
        return self.cluster_uuid_bytes == bytes(16)


@dataclass(frozen=True)
class Gpu:
    """One NVML device. `fabric` is None when the fabric call says NOT_SUPPORTED.

    Display devices are not queried beyond their name: their `uuid` is "" and `fabric` None.
    """

    index: int
    name: str
    uuid: str
    fabric: FabricInfo | NvmlFailure | None = None

    def describe(self) -> str:
        """`device 1/GPU-... (NVIDIA GB200)` for messages."""
        return f"{self.ref()} ({self.name})"

    def ref(self) -> str:
        """`device 1/GPU-...`: how the reference names a GPU in its fabric lines."""
        return f"device {self.index}/{self.uuid or '?'}"


class NvmlSource(Protocol):
    """Where NVML facts come from: the real library or a fixture file.

    Each call is a complete NVML session (init ... shutdown), so a source can be shared
    and called from any thread. Call failures raise NvmlError; a bad source raises
    DiscoveryError.
    """

    def driver_version(self) -> str: ...

    def gpus(self) -> list[Gpu]: ...
