"""From a pod spec to the process a runtime starts: command, environment, user, mounts.

What kubelet and the runtime decide per container, by the pod API's rules:
- the command (`images.Image.argv`), with `$(VAR)` references expanded;
- the environment: the image's, then `envFrom`, then `env` (values, fieldRef,
  resourceFieldRef, configMapKeyRef, secretKeyRef), the `kubernetes` Service variables,
  and the CDI edits' variables;
- the user: container `securityContext`, then the pod's, then the image's `USER`, root
  last; `runAsNonRoot` refuses root, as kubelet does;
- the mounts: the pod's volumeMounts (with subPath), the pod's /etc/hosts, the CDI
  edits' mounts and device nodes.

A problem with the pod's own config (a missing ConfigMap key, root with runAsNonRoot) is a
`ConfigError`: the container waits with reason CreateContainerConfigError.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from sim.cluster.containerview import ContainerView
from sim.cluster.images import Image
from sim.cluster.onemachine import runtime_env
from sim.cluster.privileges import privileges
from sim.cluster.sandbox import Device, Launch, Mount
from sim.cluster.volumes import PodObjects, VolumeError, field_value

Obj = dict[str, Any]
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ConfigError(Exception):
    """The container cannot be configured (kubelet's CreateContainerConfigError)."""


@dataclass(frozen=True)
class NodeContext:
    """The node-side facts a container's config depends on."""

    name: str
    pod_ip: str
    api_host: str = ""
    api_port: int = 0
    allocatable: Mapping[str, str] = field(default_factory=dict)


def expand(value: str, env: Mapping[str, str]) -> str:
    """`$(VAR)` -> its value when defined (kept verbatim otherwise); `$$` -> `$`."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REFERENCE.sub(one, value)


def _resource_value(ref: Obj, container: Obj, node: NodeContext) -> str:
    resource = str(ref.get("resource", ""))
    kind, _, name = resource.partition(".")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (resources.get("limits") or {}).get(name)
    if raw is None:  # no limit: the node's allocatable, as kubelet uses
        raw = node.allocatable.get(name, "0")
    divisor = parse_quantity(str(ref.get("divisor") or "1"))
    return str(math.ceil(parse_quantity(str(raw)) / divisor))


async def _key_ref(objects: PodObjects, kind: str, ref: Obj) -> str | None:
    name, key = str(ref.get("name", "")), str(ref.get("key", ""))
    optional = bool(ref.get("optional"))
    try:
        data = await objects.data(kind, name, optional)
    except VolumeError as err:
        raise ConfigError(str(err)) from None
    if data is None:
        return None
    if key not in data:
        if optional:
            return None
        label = "ConfigMap" if kind == "configmaps" else "Secret"
        raise ConfigError(f"couldn't find key {key} in {label} {objects.namespace}/{name}")
    return data[key].decode(errors="replace")


async def resolve_env(
    container: Obj, pod: Obj, objects: PodObjects, node: NodeContext, base: Mapping[str, str]
) -> dict[str, str]:
    """`base` (image env), then envFrom, then env, each `$(VAR)`-expanded over what came
    before, as kubelet builds a container's environment."""
    env = dict(base)
    for source in container.get("envFrom") or ():
        kind, ref = (("configmaps", source["configMapRef"]) if "configMapRef" in source
                     else ("secrets", source.get("secretRef") or {}))  # fmt: skip
        try:
            data = await objects.data(kind, str(ref.get("name", "")), bool(ref.get("optional")))
        except VolumeError as err:
            raise ConfigError(str(err)) from None
        prefix = str(source.get("prefix") or "")
        env.update({prefix + k: v.decode(errors="replace") for k, v in (data or {}).items()})
    for item in container.get("env") or ():
        name = item.get("name")
        if not name:
            continue
        if item.get("value") is not None or not item.get("valueFrom"):
            env[name] = expand(str(item.get("value") or ""), env)
            continue
        source = item["valueFrom"]
        value: str | None
        if "fieldRef" in source:
            try:
                path = source["fieldRef"].get("fieldPath", "")
                value = field_value(path, pod, node.name, node.pod_ip)
            except VolumeError as err:
                raise ConfigError(str(err)) from None
        elif "resourceFieldRef" in source:
            value = _resource_value(source["resourceFieldRef"], container, node)
        elif "configMapKeyRef" in source:
            value = await _key_ref(objects, "configmaps", source["configMapKeyRef"])
        elif "secretKeyRef" in source:
            value = await _key_ref(objects, "secrets", source["secretKeyRef"])
        else:
            raise ConfigError(f"env {name}: unsupported valueFrom {sorted(source)}")
        if value is not None:
            env[name] = value
    return env


def service_env(node: NodeContext) -> dict[str, str]:
    """The `kubernetes` Service's variables that in-cluster clients read."""
    if not node.api_host:
        return {}
    host, port = node.api_host, str(node.api_port)
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
        "KUBERNETES_PORT_443_TCP": f"tcp://{host}:{port}",
        "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_443_TCP_PORT": port,
        "KUBERNETES_PORT_443_TCP_ADDR": host,
    }


def identity(pod: Obj, container: Obj, image: Image) -> tuple[int, int, tuple[int, ...]]:
    """(uid, gid, supplementary groups) the container's process runs with."""
    pod_ctx = (pod.get("spec") or {}).get("securityContext") or {}
    ctx = container.get("securityContext") or {}
    image_uid, image_gid = image.ids()

    def pick(key: str, fallback: int | None) -> int | None:
        for source in (ctx, pod_ctx):
            if source.get(key) is not None:
                return int(source[key])
        return fallback

    uid = pick("runAsUser", image_uid)
    gid = pick("runAsGroup", image_gid)
    non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
    if non_root and (uid is None or uid == 0):
        raise ConfigError(
            "container has runAsNonRoot and image will run as root "
            f'(pod: "{pod["metadata"]["name"]}", container: {container["name"]})'
            if uid is None
            else "container's runAsUser breaks non-root policy "
            f'(pod: "{pod["metadata"]["name"]}", container: {container["name"]})'
        )
    groups = [int(g) for g in pod_ctx.get("supplementalGroups") or ()]
    if pod_ctx.get("fsGroup") is not None:
        groups.append(int(pod_ctx["fsGroup"]))
    resolved_gid = gid if gid is not None else 0
    return (uid or 0), resolved_gid, tuple(dict.fromkeys([resolved_gid, *groups]))


def volume_mounts(container: Obj, volumes: Mapping[str, str]) -> list[Mount]:
    out: list[Mount] = []
    for mount in container.get("volumeMounts") or ():
        name = mount.get("name")
        if name not in volumes:
            raise ConfigError(f'volumeMount "{name}" refers to no volume of the pod')
        source = Path(volumes[name])
        sub = str(mount.get("subPath") or "")
        if sub:
            if sub.startswith("/") or ".." in Path(sub).parts:
                raise ConfigError(f"subPath {sub!r} must be relative, without ..")
            source = source / sub
            if not source.exists():
                source.mkdir(parents=True)
        out.append(Mount(str(source), str(mount["mountPath"]), bool(mount.get("readOnly"))))
    return out


def node_path(path: str, host_root: Path | None) -> str:
    """A path of the node (a CDI spec's hostPath) as a path of this machine."""
    return str(host_root / path.lstrip("/")) if host_root is not None else path


def cdi_edits(view: ContainerView, host_root: Path | None) -> tuple[list[Mount], list[Device]]:
    mounts = [
        Mount(node_path(m.host_path, host_root), m.container_path, readonly="ro" in m.options)
        for m in view.mounts
    ]
    devices = [Device(d.path, d.type or "c", d.major, d.minor) for d in view.device_nodes]
    return mounts, devices


@dataclass(frozen=True)
class ContainerInputs:
    """Everything `launch` combines for one container."""

    pod: Obj
    container: Obj
    image: Image
    view: ContainerView
    volumes: Mapping[str, str]
    node: NodeContext
    pod_dir: Path
    hosts_file: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    extra_path: Sequence[str] = ()
    kubeconfig: str = ""
    host_root: Path | None = None  # the node's "/" (CDI host paths are the node's)


async def launch(inputs: ContainerInputs, objects: PodObjects) -> Launch:
    pod, container, image, node = inputs.pod, inputs.container, inputs.image, inputs.node
    env = await resolve_env(container, pod, objects, node, image.base_env())
    env.update(service_env(node))
    env.update(inputs.view.env)
    pod_dir = str(inputs.pod_dir)
    env.update({k: v.replace("{pod_dir}", pod_dir) for k, v in inputs.extra_env.items()})
    if image.known:
        env = runtime_env(env, node.pod_ip)
    if inputs.extra_path:
        env["PATH"] = ":".join([*inputs.extra_path, env.get("PATH", "")])
    argv = [
        expand(a, env)
        for a in image.argv(container.get("command") or (), container.get("args") or ())
    ]
    uid, gid, groups = identity(pod, container, image)
    spec = pod.get("spec") or {}
    ctx = container.get("securityContext") or {}
    mounts = [Mount(host, path, readonly=True) for path, host in image.files.items()]
    # The pod's own directory and the sim's extra programs, at their host paths: the
    # fake fabric's knobs name files there.
    mounts.append(Mount(pod_dir, pod_dir))
    mounts += [Mount(p, p, readonly=True) for p in inputs.extra_path]
    mounts += volume_mounts(container, inputs.volumes)
    if not any(m.target == "/etc/hosts" for m in mounts) and not spec.get("hostNetwork"):
        mounts.append(Mount(str(inputs.hosts_file), "/etc/hosts"))
    cdi_mounts, devices = cdi_edits(inputs.view, inputs.host_root)
    mounts += cdi_mounts
    # What the image's programs need from this machine (a venv, its interpreter, the
    # sources), again on top: a volume at /tmp must not hide a checkout under /tmp.
    mounts += [Mount(p, p, readonly=True) for p in image.runtime if Path(p).is_dir()]
    # Parents before children, as runtimes mount them; otherwise in the order above.
    mounts.sort(key=lambda m: len(Path(m.target).parts))
    return Launch(
        argv=tuple(argv),
        env=env,
        uid=uid,
        gid=gid,
        groups=groups,
        cwd=str(container.get("workingDir") or image.workdir or "/"),
        hostname=node.name if spec.get("hostNetwork") else str(pod["metadata"]["name"])[:63],
        mounts=tuple(mounts),
        devices=tuple(devices),
        readonly_root=bool(ctx.get("readOnlyRootFilesystem")),
        privileges=privileges(container),
        state_dir=str(inputs.pod_dir / "containers" / str(container["name"])),
        kubeconfig=inputs.kubeconfig,
        image_known=image.known,
        traverse=(*image.runtime, *image.files.values()),
    )
