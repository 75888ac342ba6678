"""The CDI spec model, with the exact JSON shape container runtimes read.

`to_dict` emits keys in the order and with the omissions of the Go types in
tags.cncf.io/container-device-interface/specs-go, so the files we write diff cleanly
against those written by NVIDIA's Go driver. `from_dict` accepts any JSON-like value
and either returns a model or raises CDIError naming the offending path; it checks
shape only, `cdi.validate.validate_spec` checks meaning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdi.decode import Fields

JSONDict = dict[str, Any]


@dataclass(kw_only=True)
class DeviceNode:
    """A device node to create in the container; `file_mode`, `uid` and `gid` are None
    when unset because 0 is a meaningful value for each."""

    path: str
    host_path: str = ""
    type: str = ""
    major: int = 0
    minor: int = 0
    file_mode: int | None = None
    permissions: str = ""
    uid: int | None = None
    gid: int | None = None

    def to_dict(self) -> JSONDict:
        """JSON form; zero numbers and empty strings are omitted as Go's omitempty does."""
        out: JSONDict = {"path": self.path}
        if self.host_path:
            out["hostPath"] = self.host_path
        if self.type:
            out["type"] = self.type
        if self.major:
            out["major"] = self.major
        if self.minor:
            out["minor"] = self.minor
        if self.file_mode is not None:
            out["fileMode"] = self.file_mode
        if self.permissions:
            out["permissions"] = self.permissions
        if self.uid is not None:
            out["uid"] = self.uid
        if self.gid is not None:
            out["gid"] = self.gid
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "deviceNode") -> DeviceNode:
        """Decode the JSON form, raising CDIError on a wrong shape."""
        f = Fields(
            data,
            where,
            ("path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"),
        )
        return cls(
            path=f.text("path", required=True),
            host_path=f.text("hostPath"),
            type=f.text("type"),
            major=f.integer("major") or 0,
            minor=f.integer("minor") or 0,
            file_mode=f.integer("fileMode"),
            permissions=f.text("permissions"),
            uid=f.integer("uid"),
            gid=f.integer("gid"),
        )


@dataclass(kw_only=True)
class Mount:
    """A mount to add to the container."""

    host_path: str
    container_path: str
    options: list[str] = field(default_factory=list)
    type: str = ""

    def to_dict(self) -> JSONDict:
        """JSON form, omitting empty `options` and `type`."""
        out: JSONDict = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            out["options"] = list(self.options)
        if self.type:
            out["type"] = self.type
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "mount") -> Mount:
        """Decode the JSON form, raising CDIError on a wrong shape."""
        f = Fields(data, where, ("hostPath", "containerPath", "options", "type"))
        return cls(
            host_path=f.text("hostPath", required=True),
            container_path=f.text("containerPath", required=True),
            options=f.texts("options"),
            type=f.text("type"),
        )


@dataclass(kw_only=True)
class Hook:
    """An OCI hook to add; `timeout` is None when unset because 0 is a valid timeout."""

    hook_name: str
    path: str
    args: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    timeout: int | None = None

    def to_dict(self) -> JSONDict:
        """JSON form, omitting empty `args`, `env` and an unset `timeout`."""
        out: JSONDict = {"hookName": self.hook_name, "path": self.path}
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = list(self.env)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "hook") -> Hook:
        """Decode the JSON form, raising CDIError on a wrong shape."""
        f = Fields(data, where, ("hookName", "path", "args", "env", "timeout"))
        return cls(
            hook_name=f.text("hookName", required=True),
            path=f.text("path", required=True),
            args=f.texts("args"),
            env=f.texts("env"),
            timeout=f.integer("timeout"),
        )


@dataclass(kw_only=True)
class NetDevice:
    """A host network interface to move into the container (CDI 1.1.0)."""

    host_interface_name: str
    name: str

    def to_dict(self) -> JSONDict:
        """JSON form; both keys are required."""
        return {"hostInterfaceName": self.host_interface_name, "name": self.name}

    @classmethod
    def from_dict(cls, data: object, where: str = "netDevice") -> NetDevice:
        """Decode the JSON form, raising CDIError on a wrong shape."""
        f = Fields(data, where, ("hostInterfaceName", "name"))
        return cls(
            host_interface_name=f.text("hostInterfaceName", required=True),
            name=f.text("name", required=True),
        )


@dataclass(kw_only=True)
class IntelRdt:
    """Intel RDT settings for the container (CDI 0.7.0, `schemata` and monitoring 1.1.0)."""

    clos_id: str = ""
    l3_cache_schema: str = ""
    mem_bw_schema: str = ""
    schemata: list[str] = field(default_factory=list)
    enable_monitoring: bool = False

    def to_dict(self) -> JSONDict:
        """JSON form, every key omitted when empty."""
        out: JSONDict = {}
        if self.clos_id:
            out["closID"] = self.clos_id
        if self.l3_cache_schema:
            out["l3CacheSchema"] = self.l3_cache_schema
        if self.mem_bw_schema:
            out["memBwSchema"] = self.mem_bw_schema
        if self.schemata:
            out["schemata"] = list(self.schemata)
        if self.enable_monitoring:
            out["enableMonitoring"] = True
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "intelRdt") -> IntelRdt:
        """Decode the JSON form, raising CDIError on a wrong shape."""
        f = Fields(
            data, where, ("closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring")
        )
        return cls(
            clos_id=f.text("closID"),
            l3_cache_schema=f.text("l3CacheSchema"),
            mem_bw_schema=f.text("memBwSchema"),
            schemata=f.texts("schemata"),
            enable_monitoring=f.flag("enableMonitoring"),
        )


@dataclass(kw_only=True)
class ContainerEdits:
    """Changes a runtime applies to a container's OCI spec for a device or a whole spec."""

    env: list[str] = field(default_factory=list)
    device_nodes: list[DeviceNode] = field(default_factory=list)
    net_devices: list[NetDevice] = field(default_factory=list)
    hooks: list[Hook] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    intel_rdt: IntelRdt | None = None
    additional_gids: list[int] = field(default_factory=list)

    def is_empty(self) -> bool:
        """Whether these edits change nothing; a device with empty edits is invalid."""
        return not (
            self.env
            or self.device_nodes
            or self.net_devices
            or self.hooks
            or self.mounts
            or self.intel_rdt is not None
            or self.additional_gids
        )

    def to_dict(self) -> JSONDict:
        """JSON form, every key omitted when empty."""
        out: JSONDict = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [node.to_dict() for node in self.device_nodes]
        if self.net_devices:
            out["netDevices"] = [dev.to_dict() for dev in self.net_devices]
        if self.hooks:
            out["hooks"] = [hook.to_dict() for hook in self.hooks]
        if self.mounts:
            out["mounts"] = [mount.to_dict() for mount in self.mounts]
        if self.intel_rdt is not None:
            out["intelRdt"] = self.intel_rdt.to_dict()
        if self.additional_gids:
            out["additionalGids"] = list(self.additional_gids)
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "containerEdits") -> ContainerEdits:
        """Decode the JSON form, raising CDIError on a wrong shape."""
        f = Fields(
            data,
            where,
            ("env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt", "additionalGids"),
        )
        return cls(
            env=f.texts("env"),
            device_nodes=f.items("deviceNodes", DeviceNode.from_dict),
            net_devices=f.items("netDevices", NetDevice.from_dict),
            hooks=f.items("hooks", Hook.from_dict),
            mounts=f.items("mounts", Mount.from_dict),
            intel_rdt=f.nested("intelRdt", IntelRdt.from_dict),
            additional_gids=f.integers("additionalGids"),
        )


@dataclass(kw_only=True)
class Device:
    """One named device of a spec; its qualified name is `<spec kind>=<name>`."""

    name: str
    container_edits: ContainerEdits = field(default_factory=ContainerEdits)
    annotations: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> JSONDict:
        """JSON form; `containerEdits` is required so it is kept even when empty."""
        out: JSONDict = {"name": self.name}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        out["containerEdits"] = self.container_edits.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "device") -> Device:
        """Decode the JSON form, raising CDIError on a wrong shape."""
        f = Fields(data, where, ("name", "annotations", "containerEdits"))
        return cls(
            name=f.text("name", required=True),
            annotations=f.text_map("annotations"),
            container_edits=f.required_nested("containerEdits", ContainerEdits.from_dict),
        )


@dataclass(kw_only=True)
class Spec:
    """A CDI spec: the devices of one kind and the edits they share.

    `cdi_version` may stay empty while a spec is built: `cdi.files.write_spec`
    fills in the minimum version the content needs.
    """

    kind: str
    devices: list[Device] = field(default_factory=list)
    cdi_version: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    container_edits: ContainerEdits = field(default_factory=ContainerEdits)

    def device(self, name: str) -> Device | None:
        """The device called `name` (unqualified), if the spec defines it."""
        return next((dev for dev in self.devices if dev.name == name), None)

    def to_dict(self) -> JSONDict:
        """JSON form, keys in the order of the Go type, empty optional keys omitted."""
        out: JSONDict = {"cdiVersion": self.cdi_version, "kind": self.kind}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        out["devices"] = [dev.to_dict() for dev in self.devices]
        edits = self.container_edits.to_dict()
        if edits:
            out["containerEdits"] = edits
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "spec") -> Spec:
        """Decode the JSON form, raising CDIError on a wrong shape."""
        f = Fields(data, where, ("cdiVersion", "kind", "annotations", "devices", "containerEdits"))
        cdi_version = f.text("cdiVersion", required=True)
        kind = f.text("kind", required=True)
        annotations = f.text_map("annotations")
        devices = f.items("devices", Device.from_dict, required=True)
        edits = f.nested("containerEdits", ContainerEdits.from_dict)
        return cls(
            cdi_version=cdi_version,
            kind=kind,
            annotations=annotations,
            devices=devices,
            container_edits=edits if edits is not None else ContainerEdits(),
        )
