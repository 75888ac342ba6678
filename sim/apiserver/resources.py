"""Which resources the emulator serves: the built-in ones and those of CRDs created through it.

Routing, discovery and the write rules (status subresource, scope) all come from one
`ResourceInfo` per resource, so a CRD created at run time is served exactly like a
built-in type.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

Obj = dict[str, Any]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceInfo:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    status_subresource: bool = False
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    builtin: bool = True
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    # CRD versions that are served but are not the storage version still route here.
    verbs: tuple[str, ...] = ALL_VERBS

    @property
    def returns_deleted(self) -> bool:
        """Whether a DELETE that removes the object at once answers with the object (the
        registries with ReturnDeletedObject) rather than a Success Status."""
        return self.builtin and (self.group, self.plural) in _RETURNS_DELETED

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: group and plural (one stored copy across served versions)."""
        return (self.group, self.plural)

    @property
    def qualified(self) -> str:
        """`plural.group` as error messages and RBAC print it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


# kube-apiserver's registries with `ReturnDeletedObject: true` (pkg/registry/*/storage).
_RETURNS_DELETED: Final = frozenset(
    {
        ("", "pods"),
        ("", "namespaces"),
        ("", "serviceaccounts"),
        ("", "services"),
        ("", "persistentvolumes"),
        ("", "persistentvolumeclaims"),
        ("", "resourcequotas"),
        ("", "podtemplates"),
        ("resource.k8s.io", "resourceclaims"),
        ("resource.k8s.io", "resourceclaimtemplates"),
        ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "deviceclasses"),
        ("storage.k8s.io", "storageclasses"),
        ("storage.k8s.io", "csidrivers"),
        ("storage.k8s.io", "csinodes"),
        ("storage.k8s.io", "volumeattachments"),
    }
)


def deleted_status(info: ResourceInfo, obj: Obj) -> Obj:
    """The Success Status a DELETE answers with once the object is gone."""
    md = obj.get("metadata") or {}
    details: Obj = {"name": md.get("name", ""), "kind": info.plural}
    if info.group:
        details["group"] = info.group
    if md.get("uid"):
        details["uid"] = md["uid"]
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}


def _r(
    group: str,
    version: str,
    kind: str,
    plural: str,
    *,
    namespaced: bool = True,
    status: bool = False,
    short: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
) -> ResourceInfo:
    return ResourceInfo(
        group, version, kind, plural, kind.lower(), namespaced, status, short, categories
    )


BUILTIN_RESOURCES: tuple[ResourceInfo, ...] = (
    _r("", "v1", "Namespace", "namespaces", namespaced=False, status=True, short=("ns",)),
    _r("", "v1", "Node", "nodes", namespaced=False, status=True, short=("no",)),
    _r("", "v1", "Pod", "pods", status=True, short=("po",), categories=("all",)),
    _r("", "v1", "Event", "events", short=("ev",)),
    _r("", "v1", "Service", "services", status=True, short=("svc",), categories=("all",)),
    _r("", "v1", "ServiceAccount", "serviceaccounts", short=("sa",)),
    _r("", "v1", "ConfigMap", "configmaps", short=("cm",)),
    _r("", "v1", "Secret", "secrets"),
    _r("apps", "v1", "DaemonSet", "daemonsets", status=True, short=("ds",), categories=("all",)),
    _r(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        status=True,
        short=("deploy",),
        categories=("all",),
    ),
    _r("apps", "v1", "ReplicaSet", "replicasets", status=True, short=("rs",), categories=("all",)),
    _r("batch", "v1", "Job", "jobs", status=True, categories=("all",)),
    _r("coordination.k8s.io", "v1", "Lease", "leases"),
    _r(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        namespaced=False,
        short=("pc",),
    ),
    _r("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    _r("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    _r("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    _r(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        namespaced=False,
    ),
    _r(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        namespaced=False,
        status=True,
    ),
    _r(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        namespaced=False,
    ),
    _r("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", status=True),
    _r("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates"),
    _r("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", namespaced=False),
    _r("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", namespaced=False),
    _r(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        namespaced=False,
        status=True,
        short=("crd", "crds"),
    ),
)


def crd_resources(crd: dict[str, Any]) -> list[ResourceInfo]:
    """One ResourceInfo per served version of a CRD."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for version in spec.get("versions") or []:
        if not version.get("served", False):
            continue
        out.append(
            ResourceInfo(
                group=spec.get("group", ""),
                version=version.get("name", ""),
                kind=names.get("kind", ""),
                plural=names.get("plural", ""),
                singular=names.get("singular") or names.get("kind", "").lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                status_subresource="status" in (version.get("subresources") or {}),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                builtin=False,
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return out


class ResourceRegistry:
    """The served resources, indexed for routing; CRDs are added and removed at run time."""

    def __init__(self, builtins: Iterable[ResourceInfo] = BUILTIN_RESOURCES) -> None:
        self._by_gvr: dict[tuple[str, str, str], ResourceInfo] = {}
        self._crd_owned: dict[str, list[ResourceInfo]] = {}
        for info in builtins:
            self._add(info)

    def _add(self, info: ResourceInfo) -> None:
        self._by_gvr[(info.group, info.version, info.plural)] = info

    def lookup(self, group: str, version: str, plural: str) -> ResourceInfo | None:
        return self._by_gvr.get((group, version, plural))

    def by_kind(self, group: str, kind: str) -> ResourceInfo | None:
        """Any served version of a kind (for ownerReferences, which name a kind)."""
        return next((i for i in self._by_gvr.values() if i.group == group and i.kind == kind), None)

    def by_key(self, key: tuple[str, str]) -> ResourceInfo | None:
        """Any served version of a stored resource (group, plural)."""
        return next((i for i in self._by_gvr.values() if i.key == key), None)

    def set_crd(self, crd_name: str, infos: list[ResourceInfo]) -> None:
        self.remove_crd(crd_name)
        for info in infos:
            self._add(info)
        self._crd_owned[crd_name] = infos

    def remove_crd(self, crd_name: str) -> list[ResourceInfo]:
        infos = self._crd_owned.pop(crd_name, [])
        for info in infos:
            self._by_gvr.pop((info.group, info.version, info.plural), None)
        return infos

    def __iter__(self) -> Iterator[ResourceInfo]:
        return iter(list(self._by_gvr.values()))

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, core group excluded, in a stable order."""
        out: dict[str, list[str]] = {}
        for info in self:
            if info.group and info.version not in out.setdefault(info.group, []):
                out[info.group].append(info.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceInfo]:
        return [i for i in self if i.group == group and i.version == version]
