"""Feature gates, with the reference driver's names, defaults and rules.

The controller hands its full gate map to every daemon through `FEATURE_GATES`, so the
rendering (sorted `Name=bool,` pairs with a trailing comma) and the parsing must agree
with the reference byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from api.validation_error import ValidationError


class Stage(StrEnum):
    ALPHA = "Alpha"
    BETA = "Beta"
    GA = "GA"


@dataclass(frozen=True)
class Gate:
    name: str
    default: bool
    stage: Stage
    description: str


IMEX_DAEMONS_WITH_DNS_NAMES: Final = "IMEXDaemonsWithDNSNames"
COMPUTE_DOMAIN_CLIQUES: Final = "ComputeDomainCliques"
HOST_MANAGED_IMEX_DAEMON: Final = "HostManagedIMEXDaemon"
CRASH_ON_NVLINK_FABRIC_ERRORS: Final = "CrashOnNVLinkFabricErrors"
FABRIC_MANAGER_PARTITIONING: Final = "FabricManagerPartitioning"
TIME_SLICING_SETTINGS: Final = "TimeSlicingSettings"
MPS_SUPPORT: Final = "MPSSupport"
PASSTHROUGH_SUPPORT: Final = "PassthroughSupport"
DYNAMIC_MIG: Final = "DynamicMIG"
NVML_DEVICE_HEALTH_CHECK: Final = "NVMLDeviceHealthCheck"
DEVICE_METADATA: Final = "DeviceMetadata"
DRA_LIST_TYPE_ATTRIBUTES: Final = "DRAListTypeAttributes"
CONSUMABLE_SHARES: Final = "ConsumableShares"
# Gates of the Kubernetes logging library that the reference's registry also carries.
ALL_ALPHA: Final = "AllAlpha"
ALL_BETA: Final = "AllBeta"
CONTEXTUAL_LOGGING: Final = "ContextualLogging"
LOGGING_ALPHA_OPTIONS: Final = "LoggingAlphaOptions"
LOGGING_BETA_OPTIONS: Final = "LoggingBetaOptions"

KNOWN_GATES: Final[tuple[Gate, ...]] = (
    Gate(IMEX_DAEMONS_WITH_DNS_NAMES, True, Stage.BETA, "IMEX peers are named, not addressed"),
    Gate(COMPUTE_DOMAIN_CLIQUES, True, Stage.BETA, "daemon info lives in ComputeDomainCliques"),
    Gate(HOST_MANAGED_IMEX_DAEMON, False, Stage.ALPHA, "allows imex.mode=hostManaged"),
    Gate(CRASH_ON_NVLINK_FABRIC_ERRORS, True, Stage.BETA, "fail on fabric errors at start"),
    Gate(FABRIC_MANAGER_PARTITIONING, False, Stage.ALPHA, "single-node NVLink partitions"),
    Gate(TIME_SLICING_SETTINGS, False, Stage.ALPHA, "GPU driver only"),
    Gate(MPS_SUPPORT, False, Stage.ALPHA, "GPU driver only"),
    Gate(PASSTHROUGH_SUPPORT, False, Stage.ALPHA, "GPU driver only"),
    Gate(DYNAMIC_MIG, False, Stage.ALPHA, "GPU driver only"),
    Gate(NVML_DEVICE_HEALTH_CHECK, False, Stage.ALPHA, "GPU driver only"),
    Gate(DEVICE_METADATA, False, Stage.ALPHA, "GPU/VFIO driver only"),
    Gate(DRA_LIST_TYPE_ATTRIBUTES, False, Stage.ALPHA, "GPU driver only"),
    Gate(CONSUMABLE_SHARES, False, Stage.ALPHA, "GPU driver only"),
    Gate(ALL_ALPHA, False, Stage.ALPHA, "turns on every alpha gate not set explicitly"),
    Gate(ALL_BETA, False, Stage.BETA, "turns on every beta gate not set explicitly"),
    Gate(CONTEXTUAL_LOGGING, True, Stage.BETA, "logging library"),
    Gate(LOGGING_ALPHA_OPTIONS, False, Stage.ALPHA, "logging library"),
    Gate(LOGGING_BETA_OPTIONS, True, Stage.BETA, "logging library"),
)
_GATES: Final[Mapping[str, Gate]] = {g.name: g for g in KNOWN_GATES}

# (gate, gate it needs)
_REQUIRES: Final = (
    (COMPUTE_DOMAIN_CLIQUES, IMEX_DAEMONS_WITH_DNS_NAMES),
    (DEVICE_METADATA, PASSTHROUGH_SUPPORT),
)
_MUTUALLY_EXCLUSIVE: Final = (
    (DYNAMIC_MIG, PASSTHROUGH_SUPPORT),
    (DYNAMIC_MIG, NVML_DEVICE_HEALTH_CHECK),
    (DYNAMIC_MIG, MPS_SUPPORT),
    (PASSTHROUGH_SUPPORT, NVML_DEVICE_HEALTH_CHECK),
)

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(text: str) -> bool:
    """The boolean spellings the reference (Go's ParseBool) accepts, no others."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(text)


class FeatureGates(Mapping[str, bool]):
    """An immutable, complete gate map: explicit settings over the defaults."""

    def __init__(self, explicit: Mapping[str, bool] | None = None) -> None:
        explicit = dict(explicit or {})
        for name in explicit:
            if name not in _GATES:
                raise ValidationError(_unknown_gate(name))
        all_alpha = explicit.get(ALL_ALPHA, False)
        all_beta = explicit.get(ALL_BETA, False)
        values: dict[str, bool] = {}
        for gate in KNOWN_GATES:
            if gate.name in explicit:
                values[gate.name] = explicit[gate.name]
            elif (gate.stage is Stage.ALPHA and all_alpha and gate.name != ALL_ALPHA) or (
                gate.stage is Stage.BETA and all_beta and gate.name != ALL_BETA
            ):
                values[gate.name] = True
            else:
                values[gate.name] = gate.default
        self._explicit = explicit
        self._values = values

    @classmethod
    def parse(cls, text: str | None) -> FeatureGates:
        """Parse `Name=bool,Name=bool,` (empty items, e.g. a trailing comma, are ignored)."""
        explicit: dict[str, bool] = {}
        for raw in (text or "").split(","):
            item = raw.strip()
            if not item:
                continue
            name, sep, value = item.partition("=")
            name, value = name.strip(), value.strip()
            if name not in _GATES:
                raise ValidationError(_unknown_gate(name))
            if not sep or not value:
                raise ValidationError(
                    f"missing value for feature gate {name}: write {name}=true or {name}=false"
                )
            try:
                explicit[name] = parse_bool(value)
            except ValueError:
                raise ValidationError(
                    f"invalid value for feature gate {name}: {value!r} is not a boolean "
                    f"(use true or false)"
                ) from None
        return cls(explicit)

    def with_values(self, **overrides: bool) -> FeatureGates:
        """A copy with some gates forced, as hostManaged mode forces the DNS and clique gates."""
        return FeatureGates(self._explicit | overrides)

    def enabled(self, name: str) -> bool:
        try:
            return self._values[name]
        except KeyError:
            raise ValidationError(_unknown_gate(name)) from None

    def render(self) -> str:
        """Every gate as `Name=bool,`, sorted by name, trailing comma (the reference's form)."""
        return "".join(f"{n}={str(v).lower()}," for n, v in sorted(self._values.items()))

    def validate(self) -> None:
        """The reference's dependency and exclusion rules."""
        problems = [
            f"feature gate {gate} requires {needed} to also be enabled"
            for gate, needed in _REQUIRES
            if self._values[gate] and not self._values[needed]
        ]
        problems += [
            f"feature gate {a} is currently mutually exclusive with {b}"
            for a, b in _MUTUALLY_EXCLUSIVE
            if self._values[a] and self._values[b]
        ]
        if problems:
            raise ValidationError("feature gate validation failed: " + "; ".join(problems))

    def __getitem__(self, name: str) -> bool:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"FeatureGates({self.render()!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FeatureGates):
            return self._values == other._values
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.render())


def _unknown_gate(name: str) -> str:
    known = ", ".join(sorted(_GATES))
    return f"unrecognized feature gate {name!r} (known gates: {known})"
