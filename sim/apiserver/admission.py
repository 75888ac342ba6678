"""Admission: schema validation and defaulting before anything is stored.

Custom resources go through their CRD's structural schema (pruning, defaults, types,
enums, x-kubernetes-validations); built-in objects through the Kubernetes JSON schemas
and the few hand-written rules that matter to this project. An object our controller
renders wrongly is refused with 422 here exactly as a real server would refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.apiserver import defaults, errors, versions
from sim.apiserver.authn import UserInfo
from sim.apiserver.builtin_schema import BuiltinSchemas
from sim.apiserver.crd_schema import CRDSchema
from sim.apiserver.crd_validation import validate_crd
from sim.apiserver.object_meta import validate_object_meta
from sim.apiserver.resources import ResourceInfo, ResourceRegistry
from sim.apiserver.store import Obj

CRD_KIND = ("apiextensions.k8s.io", "CustomResourceDefinition")
FIELD_VALIDATION = ("Ignore", "Warn", "Strict")


@dataclass
class AdmitOptions:
    """Per request: the `fieldValidation` directive in, `Warning` headers out."""

    field_validation: str = "Warn"
    warnings: list[str] = field(default_factory=list)
    user: UserInfo | None = None  # who asks (admission policies see it)


class Admission:
    def __init__(self, registry: ResourceRegistry) -> None:
        self._registry = registry
        self._schemas: dict[tuple[str, str, str], CRDSchema] = {}
        self._owned: dict[str, list[tuple[str, str, str]]] = {}
        self._builtin = BuiltinSchemas()

    def set_crd(self, crd: Obj) -> None:
        name = crd["metadata"]["name"]
        self.remove_crd(name)
        spec = crd.get("spec") or {}
        keys = []
        for version in spec.get("versions") or []:
            key = (
                spec.get("group", ""),
                spec.get("names", {}).get("plural", ""),
                version.get("name", ""),
            )
            self._schemas[key] = CRDSchema.from_crd(crd, version.get("name"))
            keys.append(key)
        self._owned[name] = keys

    def remove_crd(self, name: str) -> None:
        for key in self._owned.pop(name, []):
            self._schemas.pop(key, None)

    def decode_served(self, info: ResourceInfo, body: Any, opts: AdmitOptions) -> Any:
        """A built-in body in a version that is not stored (sim/apiserver/versions.py),
        decoded against that version's schema, then converted to the stored version: a
        client that sends v1 fields to a v1beta1 endpoint is told, as a real server would."""
        if not isinstance(body, dict) or body.get("apiVersion") not in (None, info.api_version):
            return versions.to_storage(info, body)
        stripped, warnings = self._builtin.decode(
            {**body, "apiVersion": info.api_version, "kind": info.kind},
            field_validation=opts.field_validation)
        if opts.field_validation == "Warn":
            opts.warnings += warnings
        return versions.to_storage(info, stripped)

    def admit(self, info: ResourceInfo, new: Obj, old: Obj | None, opts: AdmitOptions) -> Obj:
        name = new.get("metadata", {}).get("name", "")
        if info.builtin:
            if (info.group, info.kind) == CRD_KIND:
                causes = validate_crd(new)
                if causes:
                    raise errors.invalid(info.group, info.kind, name, causes)
            stored, warnings = self._builtin.admit(new, old, field_validation=opts.field_validation)
            opts.warnings += warnings
            if old is None and (info.group, info.kind) == ("", "Pod"):
                defaults.admit_new_pod(stored)
            return stored
        causes = validate_object_meta(new.get("metadata"), namespaced=info.namespaced)
        if causes:
            raise errors.invalid(info.group, info.kind, name, causes)
        schema = self._schemas.get((info.group, info.plural, info.version))
        if schema is None:
            return new
        fields = opts.field_validation
        return schema.admit(new, old, field_validation=fields, warnings=opts.warnings)
