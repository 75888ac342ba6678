"""Opaque device configs of `compute-domain.nvidia.com` claims.

They arrive as `opaque.parameters` in a ResourceClaim, written by the controller or
by a user, so they are untrusted input: the domainID becomes a directory name and a
label value. Strict decoding (user input, at Prepare) rejects unknown fields; the
non-strict form (our own checkpoint) ignores them so an upgrade or downgrade can
read older or newer data. Both validate values before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import orjson
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from api import names
from api.objects import describe_pydantic_errors
from api.validation import validate_domain_id
from api.validation_error import ValidationError

ALLOCATION_MODES = ("", names.ALLOCATION_MODE_SINGLE, names.ALLOCATION_MODE_ALL)


class OpaqueConfig(BaseModel):
    """Fields shared by both kinds; `domainID` is the ComputeDomain's UID."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )
    KIND: ClassVar[str]

    api_version: Literal["resource.nvidia.com/v1beta1"] = Field(
        default=names.API_VERSION, alias="apiVersion"
    )
    domain_id: str = Field(default="", alias="domainID")

    def validate_values(self) -> None:
        validate_domain_id(self.domain_id)

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {"apiVersion": data.pop("apiVersion"), "kind": self.KIND} | data


class ComputeDomainChannelConfig(OpaqueConfig):
    """Config of a workload's channel request."""

    KIND: ClassVar[str] = names.KIND_CHANNEL_CONFIG
    kind: Literal["ComputeDomainChannelConfig"] = names.KIND_CHANNEL_CONFIG
    allocation_mode: str | None = Field(default=None, alias="allocationMode")

    @property
    def all_channels(self) -> bool:
        return self.allocation_mode == names.ALLOCATION_MODE_ALL

    def validate_values(self) -> None:
        super().validate_values()
        if (self.allocation_mode or "") not in ALLOCATION_MODES:
            raise ValidationError(
                f"invalid allocationMode {self.allocation_mode!r}: must be "
                f"{names.ALLOCATION_MODE_SINGLE!r} or {names.ALLOCATION_MODE_ALL!r} "
                f"(empty means {names.ALLOCATION_MODE_SINGLE!r})"
            )


class ComputeDomainDaemonConfig(OpaqueConfig):
    """Config of the per-ComputeDomain IMEX daemon's request."""

    KIND: ClassVar[str] = names.KIND_DAEMON_CONFIG
    kind: Literal["ComputeDomainDaemonConfig"] = names.KIND_DAEMON_CONFIG


CONFIG_KINDS: Mapping[str, type[ComputeDomainChannelConfig] | type[ComputeDomainDaemonConfig]] = {
    names.KIND_CHANNEL_CONFIG: ComputeDomainChannelConfig,
    names.KIND_DAEMON_CONFIG: ComputeDomainDaemonConfig,
}


def _load(raw: bytes | str | Mapping[str, Any]) -> Any:
    if isinstance(raw, bytes | bytearray | memoryview | str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            raise ValidationError(f"opaque parameters are not valid JSON: {err}") from None
    return raw


def decode_config(
    raw: bytes | str | Mapping[str, Any], *, strict: bool = True
) -> ComputeDomainChannelConfig | ComputeDomainDaemonConfig:
    """Decode and validate one `opaque.parameters` object of our driver.

    strict=True is for user input (unknown fields are errors); strict=False is for data
    we persisted ourselves (unknown fields are ignored). Raises only `ValidationError`.
    """
    data = _load(raw)
    if not isinstance(data, Mapping):
        raise ValidationError(f"opaque parameters must be a JSON object, got {type(data).__name__}")
    api_version = data.get("apiVersion")
    if api_version != names.API_VERSION:
        if api_version is None:
            raise ValidationError(
                f"opaque parameters have no apiVersion: set apiVersion: {names.API_VERSION}"
            )
        raise ValidationError(
            f"unsupported apiVersion {api_version!r} in opaque parameters: "
            f"expected {names.API_VERSION!r}"
        )
    kind = data.get("kind")
    model = CONFIG_KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        expected = " or ".join(repr(k) for k in CONFIG_KINDS)
        if kind is None:
            raise ValidationError(f"opaque parameters have no kind: expected {expected}")
        raise ValidationError(
            f"unsupported kind {kind!r} for driver {names.DRIVER_NAME}: expected {expected}"
        )
    known = [f.alias or n for n, f in model.model_fields.items()]
    if not strict:
        data = {k: v for k, v in data.items() if k in known}
    elif unknown := [k for k in data if k not in known]:
        # The reference's words (Kubernetes' strict decoder), then what the kind takes.
        fields = ", ".join(f"unknown field {orjson.dumps(str(k)).decode()}" for k in unknown)
        raise ValidationError(
            f"strict decoding error: {fields} ({kind} takes {', '.join(sorted(known))}; "
            "field names are case-sensitive)"
        )
    try:
        config = model.model_validate(dict(data))
    except pydantic.ValidationError as err:
        raise ValidationError(describe_pydantic_errors(err, what=model.KIND)) from None
    config.validate_values()
    return config
