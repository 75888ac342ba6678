"""The shipped deploy manifests (`packaging/deploy`), rendered and installed without kubectl.

The simulated cluster installs exactly what an admin applies with `kubectl apply -k`, so a
manifest bug (a missing RBAC verb, a wrong selector) shows up in the sim as it would on a
real cluster. The sim must not depend on a kubectl binary, so `render` reads the small
kustomization subset this tree uses, in pure Python, and refuses everything else with an
error naming the file and field: a new kustomize feature in the manifests has to be taught
here (and tests compare the result with `kubectl kustomize`) instead of being silently
ignored.

Supported: `resources` (files and directories), `components`, `images`, `patches` (strategic
merge, by `path` or inline `patch`, target taken from the patch itself) and `replacements`
(source and targets selected by kind, name and namespace). Within one kustomization they run
in kustomize's order: resources, components, patches, images, replacements.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "packaging" / "deploy"
_OVERLAYS = {"driverManaged": "driver-managed", "hostManaged": "host-managed"}
_KUSTOMIZATION_KINDS = {"Kustomization": "kustomize.config.k8s.io/v1beta1",
                        "Component": "kustomize.config.k8s.io/v1alpha1"}
_FIELDS = {"apiVersion", "kind", "resources", "components", "patches", "images", "replacements"}
# Strategic-merge keys of the lists our patches touch (Kubernetes' patchMergeKey); any
# other list in a patch replaces the original, as it does in kustomize for atomic lists.
_MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name",
               "volumes": "name", "volumeMounts": "mountPath", "ports": "containerPort",
               "imagePullSecrets": "name"}
# Creation order for `apply`: CRDs and namespaces before anything that needs them.
_APPLY_ORDER = ("CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole",
                "ClusterRoleBinding", "Role", "RoleBinding", "DeviceClass")


def overlay_path(mode: str) -> Path:
    """The overlay directory of an IMEX mode ("driverManaged" or "hostManaged")."""
    try:
        return DEPLOY_DIR / "overlays" / _OVERLAYS[mode]
    except KeyError:
        raise ValueError(f"unknown IMEX mode {mode!r}: use one of {sorted(_OVERLAYS)}") from None


def render(overlay: str | Path) -> list[Obj]:
    """The objects `kubectl kustomize <overlay>` prints, in accumulation order."""
    return _build(Path(overlay).resolve(), component=False)


# --- kustomization ------------------------------------------------------------------------


def _load_kustomization(directory: Path, *, component: bool) -> tuple[Path, Obj]:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise ValueError(f"{directory}: no kustomization.yaml (only that name is supported)")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a mapping")
    for field in data:
        if field not in _FIELDS:
            raise ValueError(f"{path}: field {field!r} is not supported by sim.cluster."
                             f"manifests (supported: {', '.join(sorted(_FIELDS))})")
    kind = data.get("kind", "Kustomization")
    want = "Component" if component else "Kustomization"
    if kind != want or data.get("apiVersion", _KUSTOMIZATION_KINDS[want]) != \
            _KUSTOMIZATION_KINDS[want]:
        raise ValueError(f"{path}: field 'kind' must be {want} "
                         f"({_KUSTOMIZATION_KINDS[want]}), got {kind!r}")
    return path, data


def _build(directory: Path, *, component: bool, objects: list[Obj] | None = None) -> list[Obj]:
    """A kustomization's objects; a component instead adds to and transforms `objects`."""
    path, data = _load_kustomization(directory, component=component)
    out = objects if objects is not None else []
    for entry in _strings(path, data, "resources"):
        target = (directory / entry).resolve()
        if target.is_dir():
            out.extend(_build(target, component=False))
        elif target.is_file():
            _check_inside(path, directory, target)
            out.extend(_documents(target))
        else:
            raise ValueError(f"{path}: resources entry {entry!r} does not exist")
    for entry in _strings(path, data, "components"):
        _build((directory / entry).resolve(), component=True, objects=out)
    for index, patch in enumerate(data.get("patches") or []):
        _apply_patch(out, _patch_body(path, directory, index, patch), f"{path} patches[{index}]")
    for index, image in enumerate(data.get("images") or []):
        _set_image(out, path, index, image)
    for index, replacement in enumerate(data.get("replacements") or []):
        _replace(out, path, index, replacement)
    _check_unique(path, out)
    return out


def _strings(path: Path, data: Obj, field: str) -> list[str]:
    value = data.get(field) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{path}: field {field!r} must be a list of paths")
    return value


def _check_inside(path: Path, root: Path, target: Path) -> None:
    """kustomize's default load restrictor: a file must be in or below the kustomization."""
    if not target.is_relative_to(root.resolve()):
        raise ValueError(f"{path}: resources file {target} is outside {root} (kustomize "
                         "refuses it; reference a directory with its own kustomization)")


def _documents(path: Path) -> list[Obj]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            raise ValueError(f"{path}: every document needs apiVersion and kind")
    return docs


def _check_unique(path: Path, objects: list[Obj]) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = _identity(obj)
        if key in seen:
            raise ValueError(f"{path}: {key[1]} {key[3]} is defined twice")
        seen.add(key)


def _identity(obj: Obj) -> tuple[str, str, str, str]:
    md = obj.get("metadata") or {}
    group = obj["apiVersion"].rpartition("/")[0]
    return group, obj["kind"], md.get("namespace") or "", md.get("name") or ""


# --- patches ------------------------------------------------------------------------------


def _patch_body(path: Path, directory: Path, index: int, entry: Any) -> Obj:
    where = f"{path}: patches[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be a mapping with 'path' or 'patch'")
    extra = set(entry) - {"path", "patch"}
    if extra:
        raise ValueError(f"{where}: field {sorted(extra)[0]!r} is not supported (only "
                         "strategic-merge patches that name their target themselves)")
    if ("path" in entry) == ("patch" in entry):
        raise ValueError(f"{where} needs exactly one of 'path' and 'patch'")
    if "path" in entry:
        file = (directory / entry["path"]).resolve()
        _check_inside(path, directory, file)
        text = file.read_text()
    else:
        text = entry["patch"]
    body = yaml.safe_load(text)
    if not isinstance(body, dict) or "kind" not in body or "metadata" not in body:
        raise ValueError(f"{where}: only strategic-merge patches (an object with kind and "
                         "metadata.name) are supported, not JSON 6902 operation lists")
    return body


def _apply_patch(objects: list[Obj], patch: Obj, where: str) -> None:
    group, kind, namespace, name = _identity(patch)
    matches = [i for i, o in enumerate(objects) if _identity(o)[1:] == (kind, namespace, name)
               and _identity(o)[0] == group]
    if len(matches) != 1:
        raise ValueError(f"{where}: the patch targets {kind} {namespace}/{name}, which matches "
                         f"{len(matches)} objects")
    i = matches[0]
    objects[i] = _merge(objects[i], patch, where)


def _merge(original: Any, patch: Any, where: str, key: str = "") -> Any:
    """Strategic merge: maps merge, null deletes, keyed lists merge by their merge key
    (patch items first, then the untouched originals, which is the order kustomize emits)."""
    if isinstance(patch, dict) and isinstance(original, dict):
        if any(k.startswith("$") for k in patch):
            raise ValueError(f"{where}: strategic-merge directives ($patch, ...) are not "
                             "supported")
        merged = dict(original)
        for k, v in patch.items():
            if v is None:
                merged.pop(k, None)
            elif k in merged:
                merged[k] = _merge(merged[k], v, where, k)
            else:
                merged[k] = copy.deepcopy(v)
        return merged
    if isinstance(patch, list) and isinstance(original, list) and key in _MERGE_KEYS:
        mk = _MERGE_KEYS[key]
        by_key = {o.get(mk): o for o in original if isinstance(o, dict)}
        head = [_merge(by_key[p.get(mk)], p, where) if p.get(mk) in by_key else
                copy.deepcopy(p) for p in patch]
        patched = {p.get(mk) for p in patch}
        return head + [o for o in original if o.get(mk) not in patched]
    return copy.deepcopy(patch)


# --- images -------------------------------------------------------------------------------


def _set_image(objects: list[Obj], path: Path, index: int, entry: Any) -> None:
    where = f"{path}: images[{index}]"
    if not isinstance(entry, dict) or "name" not in entry:
        raise ValueError(f"{where} needs a name")
    extra = set(entry) - {"name", "newName", "newTag", "digest"}
    if extra:
        raise ValueError(f"{where}: field {sorted(extra)[0]!r} is not supported")
    for container in _containers(objects):
        image = container.get("image")
        if not isinstance(image, str):
            continue
        name, tag = _split_image(image)
        if name != entry["name"]:
            continue
        name = entry.get("newName", name)
        if "digest" in entry:
            tag = "@" + entry["digest"]
        elif "newTag" in entry:
            tag = ":" + str(entry["newTag"])
        container["image"] = name + tag


def _split_image(image: str) -> tuple[str, str]:
    """("registry:port/repo", ":tag" or "@digest" or "")."""
    if "@" in image:
        name, _, digest = image.partition("@")
        return name, "@" + digest
    name, sep, tag = image.rpartition(":")
    if sep and "/" not in tag:
        return name, ":" + tag
    return image, ""


def _containers(value: Any) -> Iterable[Obj]:
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("containers", "initContainers") and isinstance(v, list):
                yield from (c for c in v if isinstance(c, dict))
            else:
                yield from _containers(v)
    elif isinstance(value, list):
        for item in value:
            yield from _containers(item)


# --- replacements -------------------------------------------------------------------------

_SELECTOR = re.compile(r"^\[([^=\]]+)=([^\]]*)\]$")


def _replace(objects: list[Obj], path: Path, index: int, entry: Any) -> None:
    where = f"{path}: replacements[{index}]"
    if not isinstance(entry, dict) or set(entry) != {"source", "targets"}:
        raise ValueError(f"{where}: only 'source' and 'targets' are supported")
    source = entry["source"]
    extra = set(source) - {"kind", "name", "namespace", "fieldPath"}
    if extra:
        raise ValueError(f"{where}.source: field {sorted(extra)[0]!r} is not supported")
    [obj] = _select(objects, source, where + ".source", exactly_one=True)
    value = _get(obj, source["fieldPath"], where + ".source.fieldPath")
    for t, target in enumerate(entry["targets"]):
        twhere = f"{where}.targets[{t}]"
        extra = set(target) - {"select", "fieldPaths"}
        if extra:
            raise ValueError(f"{twhere}: field {sorted(extra)[0]!r} is not supported")
        if set(target["select"]) - {"kind", "name", "namespace"}:
            raise ValueError(f"{twhere}.select: only kind, name and namespace are supported")
        for hit in _select(objects, target["select"], twhere + ".select", exactly_one=False):
            for field_path in target["fieldPaths"]:
                _set(hit, field_path, copy.deepcopy(value), twhere + ".fieldPaths")


def _select(objects: list[Obj], sel: Obj, where: str, *, exactly_one: bool) -> list[Obj]:
    hits = [o for o in objects
            if o["kind"] == sel.get("kind", o["kind"])
            and (o.get("metadata") or {}).get("name") == sel.get("name", o["metadata"]["name"])
            and (o["metadata"].get("namespace") or "") == sel.get(
                "namespace", o["metadata"].get("namespace") or "")]
    if not hits or (exactly_one and len(hits) != 1):
        raise ValueError(f"{where}: {sel} matches {len(hits)} objects")
    return hits


def _segments(field_path: str) -> list[str]:
    return re.findall(r"\[[^\]]*\]|[^.\[\]]+", field_path)


def _step(node: Any, segment: str, where: str) -> Any:
    m = _SELECTOR.match(segment)
    if m:
        if not isinstance(node, list):
            raise ValueError(f"{where}: {segment} applied to a non-list")
        hits = [i for i in node if isinstance(i, dict) and str(i.get(m[1])) == m[2]]
        if len(hits) != 1:
            raise ValueError(f"{where}: {segment} matches {len(hits)} items")
        return hits[0]
    if not isinstance(node, dict) or segment not in node:
        raise ValueError(f"{where}: no field {segment!r}")
    return node[segment]


def _get(obj: Obj, field_path: str, where: str) -> Any:
    node: Any = obj
    for segment in _segments(field_path):
        node = _step(node, segment, where)
    return node


def _set(obj: Obj, field_path: str, value: Any, where: str) -> None:
    *parents, last = _segments(field_path)
    node: Any = obj
    for segment in parents:
        node = _step(node, segment, where)
    if not isinstance(node, dict) or _SELECTOR.match(last):
        raise ValueError(f"{where}: cannot set {field_path}")
    node[last] = value


# --- install ------------------------------------------------------------------------------


def apply(api_client: Any, objects: list[Obj], timeout: float = 30.0) -> list[Obj]:
    """Create the rendered objects through the real `kubernetes` client, CRDs and namespaces
    first (and CRDs served before anything else), so a fresh cluster, real or simulated,
    ends up as after `kubectl apply -k`. Objects that already exist are left as they are;
    returns the objects created, as the server returned them."""
    from kubernetes import client, utils
    from kubernetes.client.rest import ApiException

    def rank(obj: Obj) -> int:
        kind = obj["kind"]
        return _APPLY_ORDER.index(kind) if kind in _APPLY_ORDER else len(_APPLY_ORDER)

    created: list[Obj] = []
    crds: list[str] = []
    for obj in sorted(objects, key=rank):
        if obj["kind"] != "CustomResourceDefinition" and crds:
            _wait_established(client.ApiextensionsV1Api(api_client), crds, timeout)
            crds = []
        try:
            [result] = utils.create_from_dict(api_client, copy.deepcopy(obj))
        except utils.FailToCreateError as err:
            exc = err.api_exceptions[0]
            if isinstance(exc, ApiException) and exc.status == 409:
                continue
            raise exc from None
        created.append(api_client.sanitize_for_serialization(result))
        if obj["kind"] == "CustomResourceDefinition":
            crds.append(obj["metadata"]["name"])
    if crds:
        _wait_established(client.ApiextensionsV1Api(api_client), crds, timeout)
    return created


def _wait_established(api: Any, names: list[str], timeout: float) -> None:
    """A CRD's resources 404 until it is Established: wait for that condition on a watch."""
    from kubernetes import watch

    def established(crd: Obj) -> bool:
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in conditions)

    deadline = time.monotonic() + timeout
    for name in names:
        selector = f"metadata.name={name}"
        listing = api.api_client.sanitize_for_serialization(
            api.list_custom_resource_definition(field_selector=selector))
        if any(established(crd) for crd in listing["items"]):
            continue
        remaining = max(1, int(deadline - time.monotonic()))
        stream = watch.Watch(return_type="object")
        for event in stream.stream(api.list_custom_resource_definition,
                                   field_selector=selector, timeout_seconds=remaining,
                                   resource_version=listing["metadata"]["resourceVersion"]):
            if established(api.api_client.sanitize_for_serialization(event["object"])):
                stream.stop()
                break
        else:
            raise TimeoutError(f"CustomResourceDefinition {name} not Established after "
                               f"{timeout}s")
