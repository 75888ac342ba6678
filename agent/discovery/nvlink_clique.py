"""The node's NVLink clique ID, `<cluster UUID>.<clique ID>`, worked out from NVML fabric info.

All daemons of a ComputeDomain in one clique share one IMEX domain, so the ID must be the same
on every GPU of the node; an inconsistent fabric stops the agent instead of guessing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agent.discovery.discovery_error import DiscoveryError
from agent.discovery.nvmltypes import (
    NVML_SUCCESS,
    FabricInfo,
    FabricState,
    Gpu,
    NvmlFailure,
    NvmlSource,
    is_display_device,
    return_code_name,
    state_name,
)
from api import featuregates

log = logging.getLogger(__name__)

_GATE_HINT = (
    f"(or set feature gate {featuregates.CRASH_ON_NVLINK_FABRIC_ERRORS}=false to start "
    f"without a clique)"
)


def _fabric_call_error(gpu: Gpu, failure: NvmlFailure) -> DiscoveryError:
    return DiscoveryError(
        f"failed to get GPU fabric info ({gpu.describe()}): {return_code_name(failure.code)}; "
        f"check the GPU with nvidia-smi -q"
    )


def _strict_entry(gpu: Gpu, *, skip_unregistered: bool) -> FabricInfo | None:
    """The strict rules (CrashOnNVLinkFabricErrors on): a fabric that is present but not
    healthy is an error, because starting would publish a node that cannot join its domain."""
    fabric = gpu.fabric
    if fabric is None:
        log.info("no-clique fallback: NVLink fabric not supported by driver (%s)", gpu.describe())
        return None
    if isinstance(fabric, NvmlFailure):
        raise _fabric_call_error(gpu, fabric)
    if fabric.state == FabricState.NOT_SUPPORTED:
        log.info("no-clique fallback: NVLink fabric not supported by device (%s)", gpu.describe())
        return None
    if fabric.state != FabricState.COMPLETED:
        if skip_unregistered:
            # A Fabric Manager partition registers its GPUs only when it is activated.
            log.info(
                "no-clique fallback: ignoring incomplete NVLink registration on a single-node "
                "NVLink system (%s, state=%s)",
                gpu.describe(),
                state_name(fabric.state),
            )
            return None
        # The reference's words (its nvlib.go), then the GPU's name and the state's.
        raise DiscoveryError(
            f"NVLink fabric not attached ({gpu.ref()}): state={int(fabric.state)}, refusing "
            f"to start ({gpu.name}, {state_name(fabric.state)}); check that the NVLink fabric "
            f"manager / NMX has registered this GPU (nvidia-smi -q, section Fabric) "
            f"{_GATE_HINT}"
        )
    if fabric.status != NVML_SUCCESS:
        raise DiscoveryError(
            f"NVLink fabric registration error ({gpu.ref()}): status={int(fabric.status)}, "
            f"refusing to start ({gpu.name}, {return_code_name(fabric.status)}); check the "
            f"NVLink fabric manager / NMX logs for this GPU {_GATE_HINT}"
        )
    if fabric.zero_cluster:
        log.info("no-clique fallback: cluster UUID is zero (%s)", gpu.describe())
        return None
    return fabric


def _legacy_entry(gpu: Gpu) -> FabricInfo | None:
    """The legacy rules (gate off): only a fully attached GPU counts; anything else is skipped."""
    fabric = gpu.fabric
    if fabric is None:
        return None
    if isinstance(fabric, NvmlFailure):
        raise _fabric_call_error(gpu, fabric)
    attached = (
        fabric.state == FabricState.COMPLETED
        and not fabric.zero_cluster
        and fabric.status == NVML_SUCCESS
    )
    return fabric if attached else None


def clique_id_of(
    gpus: list[Gpu],
    *,
    strict: bool,
    fm_partitioning: bool = False,
    single_node_nvlink: bool = False,
) -> str:
    """The clique ID of these GPUs, or "" for a node without multi-node NVLink."""
    skip_unregistered = fm_partitioning and single_node_nvlink
    clusters: set[str] = set()
    cliques: set[int] = set()
    for gpu in gpus:
        if is_display_device(gpu.name):
            continue
        entry = (
            _strict_entry(gpu, skip_unregistered=skip_unregistered)
            if strict
            else _legacy_entry(gpu)
        )
        if entry is not None:
            log.info("identified fabric clique UUID/ID (%s): %s/%d (%s)", gpu.ref(),
                     entry.cluster_uuid_text, entry.clique_id, gpu.name)
            clusters.add(entry.cluster_uuid_text)
            cliques.add(entry.clique_id)
    if not clusters:
        return ""
    if len(clusters) != 1:
        raise DiscoveryError(
            f"unexpected number of unique ClusterUUIDs found on devices: "
            f"{', '.join(sorted(clusters))}; all GPUs of a node must be in one NVLink domain "
            f"(check the fabric manager / NMX configuration)"
        )
    if len(cliques) != 1:
        raise DiscoveryError(
            f"unexpected number of unique CliqueIDs found on devices: "
            f"{', '.join(map(str, sorted(cliques)))}; all GPUs of a node must be in one NVLink "
            f"clique (check the fabric manager / NMX partition configuration)"
        )
    return f"{clusters.pop()}.{cliques.pop()}"


def clique_id(
    source: NvmlSource,
    *,
    strict: bool,
    fm_partitioning: bool = False,
    single_node_nvlink: bool = False,
) -> str:
    """Read the GPUs from `source` and work out the clique ID with the reference's rules
    (`getCliqueIDStrict` / `getCliqueIDLegacy` in
    https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/nvlib.go).

    `strict` is gate CrashOnNVLinkFabricErrors; `fm_partitioning` is gate
    FabricManagerPartitioning and `single_node_nvlink` the node's detection result.
    Raises DiscoveryError (NvmlError for failed NVML calls).
    """
    return clique_id_of(
        source.gpus(),
        strict=strict,
        fm_partitioning=fm_partitioning,
        single_node_nvlink=single_node_nvlink,
    )


class CliqueTracker:
    """The clique ID the agent currently believes in, refreshed periodically.

    A refresh only ever replaces the value with a different non-empty one: a transient
    empty answer (e.g. fabric re-registering) must not drop a node out of its clique.
    """

    def __init__(self, read: Callable[[], str], value: str) -> None:
        self._read = read
        self._value = value

    @classmethod
    def start(cls, read: Callable[[], str]) -> CliqueTracker:
        """Read once; an error here is raised, since the agent must not start without it.

        `read` is e.g. `functools.partial(clique_id, source, strict=True)`.
        """
        return cls(read, read())

    @property
    def value(self) -> str:
        return self._value

    def refresh(self) -> DiscoveryError | None:
        """Re-read; returns (and logs) the error instead of raising it."""
        try:
            new = self._read()
        except DiscoveryError as e:
            log.warning("refreshing the NVLink clique ID failed (keeping %r): %s", self._value, e)
            return e
        if new and new != self._value:
            log.info("NVLink clique ID changed from %r to %r", self._value, new)
            self._value = new
        return None
