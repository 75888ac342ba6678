"""The OpenAPI endpoints kubectl consults before it writes.

kubectl asks `/openapi/v3` whether each kind's PATCH accepts `fieldValidation`; when it
does, kubectl leaves validation to the server (which is where ours happens) instead of
validating client-side. `/openapi/v2` is fetched as protobuf; an empty document (zero
bytes is a valid empty protobuf message) tells kubectl it knows no schemas, so it falls
back to its compiled-in patch strategies for built-in kinds and merge patches for custom
resources, exactly what the real server's clients do for kinds missing from the spec.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from sim.apiserver.resources import ResourceInfo, ResourceRegistry

# kubectl asks for `...spec.v2@v1.0+protobuf`; kube-apiserver answers the `.v1.0` spelling,
# the only one Go's mime parser accepts ("@" makes kubectl fail every client-side
# validation with "mime: unexpected content after media subtype").
V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "schema": {"type": "string", "uniqueItems": True},
    "description": "How the server treats unknown or duplicate fields: Ignore, Warn or Strict.",
}


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _resource_paths(info: ResourceInfo) -> dict[str, Any]:
    base = "/" + _gv_path(info.group, info.version)
    scope = "/namespaces/{namespace}" if info.namespaced else ""
    gvk = {"group": info.group, "version": info.version, "kind": info.kind}
    op = {
        "x-kubernetes-group-version-kind": gvk,
        "parameters": [_FIELD_VALIDATION],
        "responses": {"200": {"description": "OK"}},
    }
    return {
        f"{base}{scope}/{info.plural}": {"post": op},
        f"{base}{scope}/{info.plural}/{{name}}": {"put": op, "patch": op},
    }


def gv_document(registry: ResourceRegistry, group: str, version: str) -> dict[str, Any] | None:
    infos = registry.in_group_version(group, version)
    if not infos:
        return None
    paths: dict[str, Any] = {}
    for info in sorted(infos, key=lambda i: i.plural):
        paths.update(_resource_paths(info))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.34.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def v3_root(registry: ResourceRegistry) -> dict[str, Any]:
    gvs = {("", "v1")} | {(g, v) for g, vs in registry.groups().items() for v in vs}
    paths = {}
    for group, version in sorted(gvs):
        doc = gv_document(registry, group, version)
        digest = hashlib.sha512(orjson.dumps(doc)).hexdigest()[:32].upper()
        path = _gv_path(group, version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


def document(registry: ResourceRegistry, path: str) -> dict[str, Any] | None:
    """The v3 root or a group-version document; None when there is no such document."""
    if path == "/openapi/v3":
        return v3_root(registry)
    rest = path.removeprefix("/openapi/v3/").strip("/").split("/")
    if len(rest) == 2 and rest[0] == "api":
        return gv_document(registry, "", rest[1])
    if len(rest) == 3 and rest[0] == "apis":
        return gv_document(registry, rest[1], rest[2])
    return None
