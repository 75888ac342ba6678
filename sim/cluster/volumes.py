"""A pod's volumes as kubelet sets them up, each a directory or file on the node.

Supported: hostPath (under the node's root when the node has one, with kubelet's type
checks), emptyDir, configMap, secret, downwardAPI and projected (serviceAccountToken,
configMap, secret, downwardAPI: what the kube-api-access volume is made of). Any other
type is a `VolumeError`, which the kubelet reports as a FailedMount Event and retries, as
for a volume that cannot be set up; the pod's containers do not start.

The ConfigMaps and Secrets a pod uses are read through `PodObjects`, by name (what Node
authorization lets a kubelet read); a missing one is an error unless `optional`.
"""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

Obj = dict[str, Any]
# (kind "configmaps" | "secrets", namespace, name) -> the object, or None if it does not exist.
Reader = Callable[[str, str, str], Awaitable[Obj | None]]
# (audience, expiration seconds) -> a token of the pod's ServiceAccount bound to the pod.
TokenSource = Callable[[str, int], Awaitable[str]]
DEFAULT_MODE = 0o644


class VolumeError(Exception):
    """A volume could not be set up; the message is the FailedMount Event's."""


@dataclass
class PodObjects:
    """The ConfigMaps and Secrets of one pod, read once each."""

    reader: Reader
    namespace: str
    cache: dict[tuple[str, str], Obj | None] = field(default_factory=dict)

    async def get(self, kind: str, name: str) -> Obj | None:
        key = (kind, name)
        if key not in self.cache:
            self.cache[key] = await self.reader(kind, self.namespace, name)
        return self.cache[key]

    async def data(self, kind: str, name: str, optional: bool) -> dict[str, bytes] | None:
        """The object's keys and values (Secret data base64-decoded); None when it is
        missing and optional; VolumeError when missing and required."""
        obj = await self.get(kind, name)
        if obj is None:
            if optional:
                return None
            singular = "configmap" if kind == "configmaps" else "secret"
            raise VolumeError(f'{singular} "{name}" not found')
        if kind == "secrets":
            out = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            out.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
            return out
        out = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
        out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return out


def _safe_relative(path: str, volume: str) -> PurePosixPath:
    rel = PurePosixPath(path)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise VolumeError(f'volume "{volume}": item path {path!r} must be relative, without ".."')
    return rel


def _write_files(directory: Path, files: Mapping[PurePosixPath, tuple[bytes, int]]) -> None:
    for rel, (content, mode) in files.items():
        target = directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(content)
        tmp.chmod(mode)
        tmp.replace(target)


def _items(
    data: Mapping[str, bytes], items: list[Obj] | None, mode: int, volume: str, what: str
) -> dict[PurePosixPath, tuple[bytes, int]]:
    if not items:
        return {_safe_relative(k, volume): (v, mode) for k, v in data.items()}
    out: dict[PurePosixPath, tuple[bytes, int]] = {}
    for item in items:
        key = item.get("key", "")
        if key not in data:
            raise VolumeError(f'volume "{volume}": {what} has no key "{key}"')
        rel = _safe_relative(item.get("path") or key, volume)
        out[rel] = (data[key], int(item.get("mode") or mode))
    return out


def field_value(path: str, pod: Mapping[str, Any], node: str, pod_ip: str) -> str:
    """A downward-API fieldRef's value, as kubelet resolves it."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    for prefix, values in (("metadata.labels", md.get("labels")),
                           ("metadata.annotations", md.get("annotations"))):  # fmt: skip
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted((values or {}).items()))
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((values or {}).get(path[len(prefix) + 2 : -2], ""))
    simple = {
        "metadata.name": md.get("name") or "",
        "metadata.namespace": md.get("namespace") or "",
        "metadata.uid": md.get("uid") or "",
        "spec.nodeName": node,
        "spec.serviceAccountName": spec.get("serviceAccountName") or "",
        "status.hostIP": pod_ip,
        "status.hostIPs": pod_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path not in simple:
        raise VolumeError(f"unsupported fieldPath {path!r}")
    return str(simple[path])


@dataclass
class VolumeContext:
    """What setting up a pod's volumes needs besides the pod."""

    pod_dir: Path
    objects: PodObjects
    token: TokenSource
    node: str
    pod_ip: str
    host_root: Path | None = None  # the node's "/" for hostPath volumes (None: this host's)


async def set_up(pod: Obj, ctx: VolumeContext) -> dict[str, str]:
    """Volume name -> host path, every volume of the pod ready."""
    out: dict[str, str] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        name = str(volume.get("name"))
        out[name] = str(await _set_up_one(pod, volume, name, ctx))
    return out


async def _set_up_one(pod: Obj, volume: Obj, name: str, ctx: VolumeContext) -> Path:
    if "hostPath" in volume:
        return _host_path(volume["hostPath"], name, ctx.host_root)
    directory = ctx.pod_dir / "volumes" / name
    if "emptyDir" in volume:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o777)
        return directory
    files: dict[PurePosixPath, tuple[bytes, int]] = {}
    if "configMap" in volume or "secret" in volume:
        files = await _object_files(volume, name, ctx)
    elif "downwardAPI" in volume:
        files = _downward_files(volume["downwardAPI"], pod, name, ctx)
    elif "projected" in volume:
        files = await _projected_files(volume["projected"], pod, name, ctx)
    else:
        kinds = sorted(k for k in volume if k != "name")
        raise VolumeError(
            f'volume "{name}": type {", ".join(kinds) or "(none)"} is not supported by the '
            "simulated kubelet (hostPath, emptyDir, configMap, secret, downwardAPI, projected are)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    _write_files(directory, files)
    return directory


async def _object_files(
    volume: Obj, name: str, ctx: VolumeContext
) -> dict[PurePosixPath, tuple[bytes, int]]:
    kind, source = ("configmaps", volume["configMap"]) if "configMap" in volume else (
        "secrets", volume["secret"])  # fmt: skip
    object_name = source.get("name") if kind == "configmaps" else source.get("secretName")
    mode = int(source.get("defaultMode") or DEFAULT_MODE)
    data = await ctx.objects.data(kind, str(object_name), bool(source.get("optional")))
    if data is None:
        return {}
    return _items(data, source.get("items"), mode, name, f"{kind[:-1]} {object_name}")


def _downward_files(
    source: Obj, pod: Obj, name: str, ctx: VolumeContext
) -> dict[PurePosixPath, tuple[bytes, int]]:
    mode = int(source.get("defaultMode") or DEFAULT_MODE)
    out: dict[PurePosixPath, tuple[bytes, int]] = {}
    for item in source.get("items") or ():
        ref = item.get("fieldRef")
        if not ref:
            raise VolumeError(f'volume "{name}": only fieldRef items are supported')
        value = field_value(ref.get("fieldPath", ""), pod, ctx.node, ctx.pod_ip)
        out[_safe_relative(item.get("path", ""), name)] = (
            value.encode(), int(item.get("mode") or mode))  # fmt: skip
    return out


async def _projected_files(
    projected: Obj, pod: Obj, name: str, ctx: VolumeContext
) -> dict[PurePosixPath, tuple[bytes, int]]:
    mode = int(projected.get("defaultMode") or DEFAULT_MODE)
    out: dict[PurePosixPath, tuple[bytes, int]] = {}
    for source in projected.get("sources") or ():
        if "serviceAccountToken" in source:
            token_source = source["serviceAccountToken"]
            token = await ctx.token(
                str(token_source.get("audience") or ""),
                int(token_source.get("expirationSeconds") or 3600),
            )
            out[_safe_relative(token_source.get("path", "token"), name)] = (token.encode(), mode)
        elif "configMap" in source or "secret" in source:
            sub = dict(source)
            if "configMap" in sub:
                sub["configMap"] = {**sub["configMap"], "defaultMode": mode}
            else:
                secret = sub["secret"]
                sub["secret"] = {**secret, "secretName": secret.get("name"), "defaultMode": mode}
            out.update(await _object_files(sub, name, ctx))
        elif "downwardAPI" in source:
            downward = {**source["downwardAPI"], "defaultMode": mode}
            out.update(_downward_files(downward, pod, name, ctx))
        else:
            kinds = sorted(source)
            raise VolumeError(f'volume "{name}": projected source {kinds} is not supported')
    return out


_HOST_PATH_TYPES = {
    "Directory": stat.S_ISDIR,
    "File": stat.S_ISREG,
    "Socket": stat.S_ISSOCK,
    "CharDevice": stat.S_ISCHR,
    "BlockDevice": stat.S_ISBLK,
}


def _host_path(source: Obj, name: str, host_root: Path | None) -> Path:
    """kubelet's hostPath checks, on the node's root: `DirectoryOrCreate` makes the
    directory (0755), `FileOrCreate` the file (0644); the others must already be there."""
    raw = str(source.get("path") or "")
    if not raw.startswith("/"):
        raise VolumeError(f'volume "{name}": hostPath {raw!r} must be absolute')
    path = (host_root / raw.lstrip("/")) if host_root is not None else Path(raw)
    kind = str(source.get("type") or "")
    if kind == "DirectoryOrCreate":
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    elif kind == "FileOrCreate" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
        os.close(fd)
    elif kind in _HOST_PATH_TYPES:
        try:
            mode = path.stat().st_mode
        except OSError:
            raise VolumeError(
                f'MountVolume.SetUp failed for volume "{name}" : hostPath type check failed: '
                f"{raw} is not a {kind.lower()}"
            ) from None
        if not _HOST_PATH_TYPES[kind](mode):
            raise VolumeError(
                f'MountVolume.SetUp failed for volume "{name}" : hostPath type check failed: '
                f"{raw} is not a {kind.lower()}"
            )
    elif kind not in ("", "DirectoryOrCreate", "FileOrCreate"):
        raise VolumeError(f'volume "{name}": unknown hostPath type {kind!r}')
    return path
