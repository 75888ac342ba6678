"""The facts routing, discovery and `kubectl get` need from a CustomResourceDefinition.

Names, scope, versions, subresources and printer columns, with the defaults the server
fills in (singular, listKind, the implicit Age column), read from an already valid CRD.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry (what `kubectl get` prints)."""

    name: str
    type: str
    json_path: str
    description: str = ""
    format: str = ""
    priority: int = 0


@dataclass(frozen=True)
class ScaleSubresource:
    """The `scale` subresource: where replicas live in spec and status."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None


@dataclass(frozen=True)
class CRDVersionInfo:
    """One entry of `spec.versions`: whether it is served/stored and its subresources."""

    name: str
    served: bool
    storage: bool
    status_subresource: bool
    scale: ScaleSubresource | None
    printer_columns: tuple[PrinterColumn, ...]
    deprecated: bool = False
    deprecation_warning: str | None = None


@dataclass(frozen=True)
class CRDResourceInfo:
    """What routing and discovery need from a CRD (names defaulted like the server does)."""

    name: str
    group: str
    kind: str
    list_kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    scope: str
    versions: tuple[CRDVersionInfo, ...]

    @property
    def namespaced(self) -> bool:
        return self.scope == "Namespaced"

    @property
    def storage_version(self) -> str:
        return next(v.name for v in self.versions if v.storage)

    @property
    def served_versions(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.versions if v.served)

    def version(self, name: str) -> CRDVersionInfo | None:
        return next((v for v in self.versions if v.name == name), None)


_AGE_COLUMN: Final = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


def crd_resource_info(crd: Mapping[str, Any]) -> CRDResourceInfo:
    """Routing/discovery facts of a (validated) CRD; singular and listKind get the server's
    defaults, and a version without printer columns gets the implicit Age column."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    kind = names.get("kind", "")
    versions = []
    for v in spec.get("versions") or ():
        sub = v.get("subresources") or {}
        scale = sub.get("scale")
        columns = v.get("additionalPrinterColumns")
        versions.append(
            CRDVersionInfo(
                name=v.get("name", ""),
                served=bool(v.get("served")),
                storage=bool(v.get("storage")),
                status_subresource="status" in sub,
                scale=ScaleSubresource(
                    scale.get("specReplicasPath", ""),
                    scale.get("statusReplicasPath", ""),
                    scale.get("labelSelectorPath"),
                )
                if isinstance(scale, Mapping)
                else None,
                printer_columns=tuple(
                    PrinterColumn(
                        c.get("name", ""),
                        c.get("type", ""),
                        c.get("jsonPath", ""),
                        c.get("description", ""),
                        c.get("format", ""),
                        int(c.get("priority", 0) or 0),
                    )
                    for c in columns
                )
                if columns is not None
                else (_AGE_COLUMN,),
                deprecated=bool(v.get("deprecated")),
                deprecation_warning=v.get("deprecationWarning"),
            )
        )
    return CRDResourceInfo(
        name=(crd.get("metadata") or {}).get("name", ""),
        group=spec.get("group", ""),
        kind=kind,
        list_kind=names.get("listKind") or f"{kind}List",
        plural=names.get("plural", ""),
        singular=names.get("singular") or kind.lower(),
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        scope=spec.get("scope", ""),
        versions=tuple(versions),
    )
