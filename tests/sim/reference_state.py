"""What a node and the API hold while the reference driver (NVIDIA k8s-dra-driver-gpu) runs
ComputeDomains, rendered the way the reference renders it.

The reference's binaries cannot run in the simulated cluster, so a test that swaps the
reference for our driver first lets our driver (installed under the reference's release
name) bring workloads up and then rewrites what it left into the reference's form. Where the
reference fixes bytes, this module produces those bytes, independently of our own writers
(`agent/checkpoint/codec.py`, `agent/cdispecs`), so the test cannot pass by checking our
code against itself:

- the checkpoint, `PLUGIN_DIR/checkpoint.json`: Go's `encoding/json` of the reference's
  structs (fields in struct order, `omitempty`, map keys sorted, the claim status as the
  typed `resource.k8s.io/v1` `ResourceClaimStatus`), with the kubelet checkpoint
  manager's checksums (FNV-1a 32 over go-spew's rendering of the bytes, the layout that
  `agent/checkpoint/wire.py` and `agent/checkpoint/checksum.py` describe);
- the claim CDI specs, `<cdi-root>/k8s.compute-domain.nvidia.com-claim_<uid>.yaml`: the CDI
  library's `gopkg.in/yaml.v3` encoding (4-space indentation, sequences indented under their
  key) behind a `---` line, fields in the CDI structs' order;
- the objects its controller creates (claim templates, per-domain DaemonSet): its
  templates' fields, with no annotations and no owner references.

Every name is spelled out here rather than taken from `api/names.py`: a renamed constant
there must fail the swap instead of moving both sides at once.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

DRIVER = "compute-domain.nvidia.com"
PLUGIN_DIR = "/var/lib/kubelet/plugins/compute-domain.nvidia.com"
CHECKPOINT = f"{PLUGIN_DIR}/checkpoint.json"
DOMAINS_DIR = f"{PLUGIN_DIR}/domains"
CDI_ROOT = "/var/run/cdi"
CDI_VENDOR = "k8s.compute-domain.nvidia.com"
CDI_CLAIM_KIND = f"{CDI_VENDOR}/claim"
CDI_BASE_DEVICE = f"{CDI_VENDOR}/device=all"
# The minimum version the claim specs need: their device nodes carry host paths (the
# reference's root transform adds them).
CDI_VERSION = "0.5.0"
CHANNELS_DIR = "/dev/nvidia-caps-imex-channels"
CHANNEL_COUNT = 2048
LABEL_CD = "resource.nvidia.com/computeDomain"
LABEL_CLIQUE = "resource.nvidia.com/computeDomain.cliqueID"
LABEL_TARGET = "resource.nvidia.com/computeDomainTarget"
FINALIZER = "resource.nvidia.com/computeDomain"
API_VERSION = "resource.nvidia.com/v1beta1"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
DAEMON_ACCOUNT = "compute-domain-daemon-service-account"
DAEMON_CLAIM = "compute-domain-daemon"
CONFIG_KINDS = {"ComputeDomainChannelConfig": "channel", "ComputeDomainDaemonConfig": "daemon"}
DEVICE_KINDS = ("channel", "daemon")
PREPARE_COMPLETED = "PrepareCompleted"
# The daemon container's env the controller renders with default flags and gates.
DAEMON_FEATURE_GATES = (
    "AllAlpha=false,AllBeta=false,ComputeDomainCliques=true,ConsumableShares=false,"
    "ContextualLogging=true,CrashOnNVLinkFabricErrors=true,DRAListTypeAttributes=false,"
    "DeviceMetadata=false,DynamicMIG=false,FabricManagerPartitioning=false,"
    "HostManagedIMEXDaemon=false,IMEXDaemonsWithDNSNames=true,LoggingAlphaOptions=false,"
    "LoggingBetaOptions=true,MPSSupport=false,NVMLDeviceHealthCheck=false,"
    "PassthroughSupport=false,TimeSlicingSettings=false,"
)


def daemon_name(cd_uid: str) -> str:
    """The DaemonSet's and the daemon claim template's name (both the same)."""
    return f"computedomain-daemon-{cd_uid}"


def claim_spec_name(claim_uid: str) -> str:
    return f"{CDI_VENDOR}-claim_{claim_uid}.yaml"


# --- Go's encoding/json and the checkpoint manager's checksum -----------------------------


def go_json(value: Any) -> bytes:
    """Compact JSON as Go's `json.Marshal` writes it (HTML characters escaped, non-ASCII
    raw). Only the characters this state can hold are handled: control characters, which
    Go and Python escape differently, are refused."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if re.search(r"\\u00[01][0-9a-f]|\\[bfnrt]", text):
        raise ValueError("control characters: not rendered the way Go renders them")
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):  # fmt: skip
        text = text.replace(char, escaped)
    return text.encode()


def checksum(data: bytes) -> int:
    """`checksum.New(data)`: FNV-1a 32 of go-spew's `([]uint8)[b0 b1 ...]` text of data."""
    value = 0x811C9DC5
    for byte in b"([]uint8)[" + " ".join(map(str, data)).encode() + b"]":
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


# --- the claim status as Go's typed structs re-marshal it -----------------------------------

# One Go struct field: (JSON name, how its value renders, omitempty), in struct order.
Field = tuple[str, Callable[[Any], Any], bool]


def _struct(fields: Sequence[Field]) -> Callable[[Any], Obj]:
    def render(raw: Any) -> Obj:
        out: Obj = {}
        for name, convert, omitempty in fields:
            value = raw.get(name)
            if omitempty and value in (None, "", [], {}, False):
                continue
            if value is None:
                raise ValueError(f"{name} is missing (Go's zero value is not rendered here)")
            out[name] = convert(value)
        return out

    return render


def _same(value: Any) -> Any:
    return value


def _list(item: Callable[[Any], Any]) -> Callable[[Any], list[Any]]:
    return lambda raw: [item(x) for x in raw]


def _raw(value: Any) -> Any:
    """`runtime.RawExtension`: the bytes the API server sent, kept as they are."""
    return value


_REQUIREMENT = _struct([("key", _same, False), ("operator", _same, False),
                        ("values", _list(_same), True)])  # fmt: skip
_TERM = _struct([("matchExpressions", _list(_REQUIREMENT), True),
                 ("matchFields", _list(_REQUIREMENT), True)])  # fmt: skip
_NODE_SELECTOR = _struct([("nodeSelectorTerms", _list(_TERM), False)])
_RESULT = _struct([
    ("request", _same, False), ("driver", _same, False), ("pool", _same, False),
    ("device", _same, False), ("adminAccess", _same, True), ("tolerations", _raw, True),
    ("bindingConditions", _list(_same), True), ("bindingFailureConditions", _list(_same), True),
    ("shareID", _same, True), ("consumedCapacity", _raw, True),
])  # fmt: skip
_OPAQUE = _struct([("driver", _same, False), ("parameters", _raw, False)])
_CONFIG = _struct([("source", _same, False), ("requests", _list(_same), True),
                   ("opaque", _OPAQUE, True)])  # fmt: skip
_DEVICES = _struct([("results", _list(_RESULT), True), ("config", _list(_CONFIG), True)])
_ALLOCATION = _struct([("devices", _DEVICES, False), ("nodeSelector", _NODE_SELECTOR, True),
                       ("allocationTimestamp", _same, True)])  # fmt: skip
_CONSUMER = _struct([("apiGroup", _same, True), ("resource", _same, False),
                     ("name", _same, False), ("uid", _same, False)])  # fmt: skip
_STATUS = _struct([("allocation", _ALLOCATION, True), ("reservedFor", _list(_CONSUMER), True),
                   ("devices", _raw, True)])  # fmt: skip


def claim_status(status: Mapping[str, Any]) -> Obj:
    """A ResourceClaim's status as the reference's checkpoint holds it: the typed
    `resource.k8s.io/v1` struct re-marshalled (fields in Go order, unknown ones dropped;
    opaque parameters verbatim)."""
    rendered = _STATUS(dict(status))
    if "allocation" not in rendered:
        raise ValueError("claim status has no allocation")
    return rendered


# --- the checkpoint --------------------------------------------------------------------------


def _device(claim_uid: str, result: Mapping[str, Any]) -> Obj:
    kind, _, index = result["device"].partition("-")
    if kind not in DEVICE_KINDS or not index.isdigit():
        raise ValueError(f"not a ComputeDomain device: {result['device']!r}")
    cdi_ids = [CDI_BASE_DEVICE] if kind == "daemon" else []
    cdi_ids.append(f"{CDI_CLAIM_KIND}={claim_uid}-{result['device']}")
    prepared = {
        "info": {"id": int(index)},
        "device": {"Requests": [result["request"]], "PoolName": result["pool"],
                   "DeviceName": result["device"], "CDIDeviceIDs": cdi_ids},
    }  # fmt: skip
    return {k: prepared if k == kind else None for k in DEVICE_KINDS}


def prepared_groups(claim: Mapping[str, Any]) -> list[Obj]:
    """One group per opaque config of our driver, holding the results it applies to."""
    uid = claim["metadata"]["uid"]
    devices = claim["status"]["allocation"]["devices"]
    groups = []
    for config in devices.get("config") or ():
        opaque = config.get("opaque") or {}
        if opaque.get("driver") != DRIVER:
            continue
        params = opaque["parameters"]
        requests = set(config.get("requests") or ())
        results = [r for r in devices["results"]
                   if r["driver"] == DRIVER and (not requests or r["request"] in requests)]
        groups.append({
            "devices": [_device(uid, r) for r in results],
            "configState": {"Type": CONFIG_KINDS[params["kind"]],
                            "ComputeDomain": params["domainID"]},
        })  # fmt: skip
    return groups


def checkpoint(claims: Iterable[Mapping[str, Any]], boot_id: str) -> bytes:
    """The checkpoint file the reference's plugin leaves with `claims` prepared
    (PrepareCompleted) in boot `boot_id`: v2 with every claim, v1 for downgrades."""
    v2_claims: dict[str, Obj] = {}
    v1_claims: dict[str, Obj] = {}
    for claim in claims:
        md = claim["metadata"]
        status = claim_status(claim["status"])
        groups = prepared_groups(claim)
        v1_claims[md["uid"]] = {"status": status, "preparedDevices": groups}
        v2_claims[md["uid"]] = {
            "checkpointState": PREPARE_COMPLETED, "status": status,
            "preparedDevices": groups, "name": md["name"], "namespace": md["namespace"],
        }  # fmt: skip
    v1: Obj = {"preparedClaims": dict(sorted(v1_claims.items()))} if v1_claims else {}
    v2: Obj = {"checksum": 0}
    if v2_claims:
        v2["preparedClaims"] = dict(sorted(v2_claims.items()))
    v2["nodeBootID"] = boot_id
    v2["checksum"] = checksum(go_json(v2))
    top = checksum(go_json({"checksum": 0, "v1": v1}))
    return go_json({"checksum": top, "v1": v1, "v2": v2})


def checkpoint_claims(data: bytes) -> dict[str, Obj]:
    """The v2 claims of a checkpoint file, after checking both checksums the way the
    reference checks them on reading (so the reference could read this file back)."""
    raw = json.loads(data)
    if set(raw) - {"checksum", "v1", "v2"}:
        raise ValueError(f"unknown top-level fields {sorted(raw)}")
    top = checksum(go_json({"checksum": 0, "v1": raw.get("v1") or {}}))
    if raw["checksum"] != top:
        raise ValueError(f"top-level checksum {raw['checksum']}, content hashes to {top}")
    v2 = raw["v2"]
    inner = checksum(go_json({**v2, "checksum": 0}))
    if v2["checksum"] != inner:
        raise ValueError(f"v2 checksum {v2['checksum']}, content hashes to {inner}")
    claims: dict[str, Obj] = v2.get("preparedClaims") or {}
    return claims


# --- claim CDI specs, as gopkg.in/yaml.v3 writes them ---------------------------------------

_PLAIN = re.compile(r"[A-Za-z0-9/][A-Za-z0-9/._=-]*")
_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}")
# Words yaml.v3 quotes because YAML 1.1 read them as booleans or null.
_QUOTED_WORDS = frozenset(["y", "yes", "n", "no", "on", "off", "true", "false", "null"])


def _number(value: str) -> bool:
    try:
        float(value.replace("_", ""))
    except ValueError:
        return False
    return True


def _scalar(value: Any) -> str:
    """A plain scalar; anything yaml.v3 would quote (a string that reads as another type)
    or escape is refused rather than rendered differently."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"no scalar rendering for {value!r}")
    if isinstance(value, int):
        return str(value)
    if (not _PLAIN.fullmatch(value) or value.lower() in _QUOTED_WORDS or _number(value)
            or _DATE.match(value)):  # fmt: skip
        raise ValueError(f"{value!r} would be quoted by yaml.v3 (not rendered here)")
    return value


def _next_indent(indent: int) -> int:
    """yaml.v3's block indentation step (best_indent 4): the next multiple of 4."""
    return 4 * ((indent + 4) // 4)


def _mapping(value: Mapping[str, Any], indent: int, first_inline: bool) -> list[str]:
    lines: list[str] = []
    for position, (key, item) in enumerate(value.items()):
        lead = "" if first_inline and position == 0 else " " * indent
        if isinstance(item, Mapping):
            lines.append(f"{lead}{key}:")
            lines += _mapping(item, _next_indent(indent), False)
        elif isinstance(item, list):
            lines.append(f"{lead}{key}:")
            lines += _sequence(item, _next_indent(indent))
        else:
            lines.append(f"{lead}{key}: {_scalar(item)}")
    return lines


def _sequence(items: Sequence[Any], indent: int) -> list[str]:
    lines: list[str] = []
    for item in items:
        if isinstance(item, Mapping):
            body = _mapping(item, indent + 2, True)  # the first key follows "- "
            lines.append(f"{' ' * indent}- {body[0]}")
            lines += body[1:]
        else:
            lines.append(f"{' ' * indent}- {_scalar(item)}")
    return lines


def yaml_v3(document: Mapping[str, Any]) -> bytes:
    """`"---\\n"` + `yaml.v3.Marshal(document)` for mappings, sequences, strings, ints."""
    return ("---\n" + "\n".join(_mapping(document, 0, False)) + "\n").encode()


def _device_node(path: str, major: int, minor: int, mode: int) -> Obj:
    """A CDI device node after the root transform (hostPath = path); zero fields omitted
    (so channel 0 has no `minor`)."""
    node: Obj = {"path": path, "hostPath": path, "type": "c", "major": major}
    if minor:
        node["minor"] = minor
    node["fileMode"] = mode
    return node


def channel_claim_spec(claim_uid: str, channels: Iterable[int], major: int) -> bytes:
    """The claim spec of a workload's channel claim: one device, `<uid>-channel-0`, whose
    device nodes are its channels sorted by path (channel0, channel1, channel10, ...)."""
    paths = sorted(f"{CHANNELS_DIR}/channel{n}" for n in channels)
    nodes = [_device_node(p, major, int(p.rsplit("channel", 1)[1]), 0o666) for p in paths]
    name = f"{claim_uid}-channel-0"
    return yaml_v3({
        "cdiVersion": CDI_VERSION, "kind": CDI_CLAIM_KIND,
        "devices": [{"name": name, "containerEdits": {"deviceNodes": nodes}}],
    })  # fmt: skip


def daemon_claim_spec(claim_uid: str, cd: Mapping[str, Any], clique_id: str,
                      cap: tuple[int, int, int]) -> bytes:  # fmt: skip
    """The claim spec of an IMEX daemon's claim on a fabric node: the domain's identity,
    the fabric management capability (major, minor, mode) and the domain's `/imexd`."""
    md = cd["metadata"]
    major, minor, mode = cap
    name = f"{claim_uid}-daemon-0"
    edits = {
        "env": [f"CLIQUE_ID={clique_id}", f"COMPUTE_DOMAIN_UUID={md['uid']}",
                f"COMPUTE_DOMAIN_NAME={md['name']}", f"COMPUTE_DOMAIN_NAMESPACE={md['namespace']}"],
        "deviceNodes": [_device_node(f"/dev/nvidia-caps/nvidia-cap{minor}", major, minor, mode)],
        "mounts": [{"hostPath": f"{DOMAINS_DIR}/{md['uid']}", "containerPath": "/imexd",
                    "options": ["rw", "nosuid", "nodev", "bind"]}],
    }  # fmt: skip
    return yaml_v3({
        "cdiVersion": CDI_VERSION, "kind": CDI_CLAIM_KIND,
        "devices": [{"name": name, "containerEdits": edits}],
    })  # fmt: skip


# --- the node's kernel and driver facts the specs are made of -------------------------------


def char_major(proc_devices: str, driver: str) -> int:
    """The major number `/proc/devices` lists for `driver` (a character device)."""
    for line in proc_devices.split("Block devices:")[0].splitlines():
        number, _, name = line.strip().partition(" ")
        if name == driver and number.isdigit():
            return int(number)
    raise ValueError(f"{driver} is not in /proc/devices")


def capability(text: str) -> tuple[int, int]:
    """(minor, mode) of `/proc/driver/nvidia/capabilities/fabric-imex-mgmt`."""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(fields["DeviceFileMinor"]), int(fields["DeviceFileMode"])


def write_file(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` atomically (a temp file in its directory, then a rename)."""
    fd, temp = tempfile.mkstemp(prefix=".", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    Path(temp).replace(path)


# --- the controller's objects ----------------------------------------------------------------


def _template(name: str, namespace: str, labels: Obj, request: str, device_class: str,
              parameters: Obj) -> Obj:  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "finalizers": [FINALIZER],
                     "labels": labels},
        "spec": {"spec": {"devices": {
            "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
            "config": [{"requests": [request],
                        "opaque": {"driver": DRIVER, "parameters": parameters}}],
        }}},
    }  # fmt: skip


def workload_template(cd: Mapping[str, Any]) -> Obj:
    """The channel claim template in the domain's namespace (driverManaged)."""
    md, channel = cd["metadata"], cd["spec"]["channel"]
    return _template(
        channel["resourceClaimTemplate"]["name"], md["namespace"],
        {LABEL_CD: md["uid"], LABEL_TARGET: "Workload"}, "channel", CHANNEL_CLASS,
        {"apiVersion": API_VERSION, "kind": "ComputeDomainChannelConfig",
         "domainID": md["uid"], "allocationMode": channel.get("allocationMode", "Single")},
    )  # fmt: skip


def daemon_template(cd_uid: str, namespace: str) -> Obj:
    """The daemon claim template in the driver namespace."""
    return _template(daemon_name(cd_uid), namespace,
                     {LABEL_CD: cd_uid, LABEL_TARGET: "Daemon"}, "daemon", DAEMON_CLASS,
                     {"apiVersion": API_VERSION, "kind": "ComputeDomainDaemonConfig",
                      "domainID": cd_uid})  # fmt: skip


def _field_env(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def daemon_set(cd_uid: str, namespace: str) -> Obj:
    """The per-domain DaemonSet, without what names the reference's binary (the
    container's image, command and probe commands: see `DAEMON_BINARY_FIELDS`)."""
    labels = {LABEL_CD: cd_uid}
    env = [
        {"name": "LOG_VERBOSITY"},  # its value is the controller's flag
        {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": "18"},
        _field_env("NODE_NAME", "spec.nodeName"), _field_env("POD_IP", "status.podIP"),
        _field_env("POD_UID", "metadata.uid"), _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "FEATURE_GATES", "value": DAEMON_FEATURE_GATES},
    ]  # fmt: skip
    # (The template's `initialDelaySeconds: 0` is the zero value: the API does not keep it.)
    probe = {"startupProbe": {"periodSeconds": 1, "timeoutSeconds": 10,
                              "failureThreshold": 1200, "successThreshold": 1},
             "livenessProbe": {"periodSeconds": 60, "timeoutSeconds": 10,
                               "failureThreshold": 20, "successThreshold": 1},
             "readinessProbe": {"periodSeconds": 10, "timeoutSeconds": 10,
                                "failureThreshold": 1, "successThreshold": 1}}  # fmt: skip
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": daemon_name(cd_uid), "namespace": namespace,
                     "finalizers": [FINALIZER], "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "serviceAccountName": DAEMON_ACCOUNT,
                "nodeSelector": labels,
                "containers": [{"name": "compute-domain-daemon", "env": env,
                                "resources": {"claims": [{"name": DAEMON_CLAIM}]}, **probe}],
                "tolerations": [{"operator": "Exists", "effect": e}
                                for e in ("NoSchedule", "NoExecute", "PreferNoSchedule")],
                "resourceClaims": [{"name": DAEMON_CLAIM,
                                    "resourceClaimTemplateName": daemon_name(cd_uid)}],
            }},
        },
    }  # fmt: skip


# Where the daemon's pod template names the reference's program, which the simulated
# kubelet cannot run: the adopted DaemonSet keeps running the IMEX daemon it already runs
# (our `compute-domain-agent daemon run`), as a real one keeps running the reference's.
DAEMON_BINARY_FIELDS = ("image", "command", "securityContext")


# Annotations the control plane itself puts on these objects (kube-controller-manager's
# DaemonSet controller), there under either driver.
SYSTEM_ANNOTATIONS = frozenset({"deprecated.daemonset.template.generation"})


def metadata_patch(live: Mapping[str, Any], reference: Mapping[str, Any]) -> Obj | None:
    """A JSON merge patch that makes `live`'s labels, finalizers, annotations and owner
    references the reference's (None when they already are)."""
    md, want = live.get("metadata") or {}, reference["metadata"]
    patch: Obj = {}
    labels = md.get("labels") or {}
    if labels != want["labels"]:
        patch["labels"] = {**{k: None for k in labels if k not in want["labels"]},
                           **want["labels"]}  # fmt: skip
    if (md.get("finalizers") or []) != want["finalizers"]:
        patch["finalizers"] = want["finalizers"]
    # The reference sets neither annotations nor owner references; Kubernetes' own
    # annotations (the DaemonSet controller's) stay.
    extra = [k for k in md.get("annotations") or {} if k not in SYSTEM_ANNOTATIONS]
    if extra:
        patch["annotations"] = dict.fromkeys(extra)
    if md.get("ownerReferences"):
        patch["ownerReferences"] = None
    return {"metadata": patch} if patch else None


def differences(live: Any, reference: Any, where: str = "") -> list[str]:
    """Where `live` lacks or differs from a field the reference sets (fields the API
    server defaults on top are not differences); lists compare item by item."""
    if isinstance(reference, Mapping):
        if not isinstance(live, Mapping):
            return [f"{where or '.'}: {live!r} is not an object"]
        out: list[str] = []
        for key, value in reference.items():
            if key not in live:
                out.append(f"{where}.{key}: missing")
            else:
                out += differences(live[key], value, f"{where}.{key}")
        return out
    if isinstance(reference, list):
        if not isinstance(live, list) or len(live) != len(reference):
            return [f"{where}: {live!r} != {reference!r}"]
        return [d for i, (a, b) in enumerate(zip(live, reference, strict=True))
                for d in differences(a, b, f"{where}[{i}]")]  # fmt: skip
    return [] if live == reference else [f"{where}: {live!r} != {reference!r}"]
