"""Kubernetes protobuf request bodies, decoded into the dict the same object's JSON gives.

kubectl's `create` generators (namespace, configmap, secret, serviceaccount, role, job, ...)
and `kubectl create token` send `application/vnd.kubernetes.protobuf`: the magic `k8s\\x00`,
then a `runtime.Unknown` whose `raw` holds the object's own message
(https://kubernetes.io/docs/reference/using-api/api-concepts/#protobuf-encoding). The
emulator decodes the built-in kinds those commands send and answers in JSON, which client-go
reads because it asks for `application/vnd.kubernetes.protobuf,application/json`.

The tables below carry the field numbers of upstream `generated.proto` (k8s.io/api and
k8s.io/apimachinery v0.37.2, https://github.com/kubernetes/api) and the Go JSON tags of the
same fields: gogo-protobuf writes every non-pointer field, zero or not, so a zero scalar is
dropped where the tag says `omitempty` and kept where the Go field is a pointer or has no
`omitempty` (`*` in a spec; such a slice or map, absent on the wire, is JSON's `null`).
A field spec is `"N name[:type][*]"`: type `string` (default), `int`, `bool`, `bytes`
(base64 in JSON), `Time`, `Quantity`, `IntOrString`, `JSON` (raw JSON bytes) or a message
name; `[T]` is repeated, `{T}` a map with string keys, and `-` a field the emulator does
not decode: a body that sets one answers 415 rather than lose it. Field numbers a table
lacks are skipped, as any protobuf reader skips fields newer than its schema.
"""

from __future__ import annotations

import base64
import datetime
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson

from sim.apiserver import errors

MAGIC: Final = b"k8s\x00"
PROTOBUF: Final = "application/vnd.kubernetes.protobuf"
VARINT, I64, LEN, I32 = 0, 1, 2, 5
_SCALARS: Final = frozenset({"string", "int", "bool", "bytes"})
_UNSUPPORTED: Final = "-"
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class ProtobufError(ValueError):
    """Malformed wire data (truncated, wrong wire type, bad UTF-8): a 400 Bad Request."""


class UnsupportedFieldError(Exception):
    """A field with a value that the tables mark `-`; `path` is its JSON path."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


# --- the wire format (https://protobuf.dev/programming-guides/encoding/) ---------------


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at `pos` and the position after it."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result >> 64:
                raise ProtobufError("varint overflows 64 bits")
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtobufError("varint longer than 10 bytes")


def read_fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field of one message, in wire order: an int
    for varints and fixed-width fields, the bytes of a length-delimited one."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        value: int | bytes
        if wire == VARINT:
            value, pos = read_varint(buf, pos)
        elif wire in (I64, I32):
            width = 8 if wire == I64 else 4
            if pos + width > len(buf):
                raise ProtobufError(f"truncated fixed-width field {number}")
            value = int.from_bytes(buf[pos : pos + width], "little")
            pos += width
        elif wire == LEN:
            size, pos = read_varint(buf, pos)
            if pos + size > len(buf):
                raise ProtobufError(
                    f"truncated field {number}: {size} bytes announced, {len(buf) - pos} left"
                )
            value = buf[pos : pos + size]
            pos += size
        else:
            raise ProtobufError(f"unsupported wire type {wire} (field {number})")
        yield number, wire, value


def signed(value: int) -> int:
    """A varint as int64 (negative int32 values are sign-extended to ten bytes on the wire)."""
    return value - (1 << 64) if value >> 63 else value


# --- field tables ----------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    repeated: bool = False
    map: bool = False
    keep: bool = False


_SPEC: Final = re.compile(r"(\d+) (\w+)(?::([\[{]?)(\w+|-)[\]}]?)?(\*)?")


def _msg(*specs: str) -> dict[int, Field]:
    fields = {}
    for spec in specs:
        match = _SPEC.fullmatch(spec)
        assert match, spec
        number, name, shape, typ, keep = match.groups()
        fields[int(number)] = Field(
            name, typ or "string", repeated=shape == "[", map=shape == "{", keep=bool(keep)
        )
    return fields


_META = "1 metadata:ObjectMeta"
MESSAGES: Final[dict[str, dict[int, Field]]] = {
    # k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto
    "ObjectMeta": _msg(
        "1 name", "2 generateName", "3 namespace", "4 selfLink", "5 uid", "6 resourceVersion",
        "7 generation:int", "8 creationTimestamp:Time", "9 deletionTimestamp:Time",
        "10 deletionGracePeriodSeconds:int*", "11 labels:{string}", "12 annotations:{string}",
        "13 ownerReferences:[OwnerReference]", "14 finalizers:[string]",
        "17 managedFields:[ManagedFieldsEntry]",
    ),
    "OwnerReference": _msg(
        "5 apiVersion*", "1 kind*", "3 name*", "4 uid*", "6 controller:bool*",
        "7 blockOwnerDeletion:bool*",
    ),
    "ManagedFieldsEntry": _msg(
        "1 manager", "2 operation", "3 apiVersion", "4 time:Time", "6 fieldsType",
        "7 fieldsV1:JSON", "8 subresource",
    ),
    "LabelSelector": _msg(
        "1 matchLabels:{string}", "2 matchExpressions:[LabelSelectorRequirement]"
    ),
    "LabelSelectorRequirement": _msg("1 key*", "2 operator*", "3 values:[string]"),
    "Condition": _msg(
        "1 type*", "2 status*", "3 observedGeneration:int", "4 lastTransitionTime:Time",
        "5 reason*", "6 message*",
    ),
    # k8s.io/api/core/v1/generated.proto
    "Namespace": _msg(_META, "2 spec:NamespaceSpec", "3 status:NamespaceStatus"),
    "NamespaceSpec": _msg("1 finalizers:[string]"),
    "NamespaceStatus": _msg("1 phase", "2 conditions:[NamespaceCondition]"),
    "NamespaceCondition": _msg(
        "1 type*", "2 status*", "4 lastTransitionTime:Time", "5 reason", "6 message"
    ),
    "ConfigMap": _msg(_META, "2 data:{string}", "3 binaryData:{bytes}", "4 immutable:bool*"),
    "Secret": _msg(
        _META, "2 data:{bytes}", "3 type", "4 stringData:{string}", "5 immutable:bool*"
    ),
    "ServiceAccount": _msg(
        _META, "2 secrets:[ObjectReference]", "3 imagePullSecrets:[LocalObjectReference]",
        "4 automountServiceAccountToken:bool*",
    ),
    "ObjectReference": _msg(
        "1 kind", "2 namespace", "3 name", "4 uid", "5 apiVersion", "6 resourceVersion",
        "7 fieldPath",
    ),
    "LocalObjectReference": _msg("1 name"),
    "Service": _msg(_META, "2 spec:ServiceSpec", "3 status:ServiceStatus"),
    "ServiceSpec": _msg(
        "1 ports:[ServicePort]", "2 selector:{string}", "3 clusterIP", "18 clusterIPs:[string]",
        "4 type", "5 externalIPs:[string]", "7 sessionAffinity", "8 loadBalancerIP",
        "9 loadBalancerSourceRanges:[string]", "10 externalName", "11 externalTrafficPolicy",
        "12 healthCheckNodePort:int", "13 publishNotReadyAddresses:bool",
        "14 sessionAffinityConfig:SessionAffinityConfig", "19 ipFamilies:[string]",
        "17 ipFamilyPolicy*", "20 allocateLoadBalancerNodePorts:bool*",
        "21 loadBalancerClass*", "22 internalTrafficPolicy*", "23 trafficDistribution*",
    ),
    "ServicePort": _msg(
        "1 name", "2 protocol", "6 appProtocol*", "3 port:int*", "4 targetPort:IntOrString",
        "5 nodePort:int",
    ),
    "SessionAffinityConfig": _msg("1 clientIP:ClientIPConfig"),
    "ClientIPConfig": _msg("1 timeoutSeconds:int*"),
    "ServiceStatus": _msg("1 loadBalancer:LoadBalancerStatus", "2 conditions:[Condition]"),
    "LoadBalancerStatus": _msg("1 ingress:[LoadBalancerIngress]"),
    "LoadBalancerIngress": _msg("1 ip", "2 hostname", "3 ipMode*", "4 ports:[PortStatus]"),
    "PortStatus": _msg("1 port:int*", "2 protocol*", "3 error*"),
    "PodTemplateSpec": _msg(_META, "2 spec:PodSpec"),
    "PodSpec": _msg(
        "1 volumes:-", "20 initContainers:[Container]", "2 containers:[Container]*",
        "34 ephemeralContainers:-", "3 restartPolicy", "4 terminationGracePeriodSeconds:int*",
        "5 activeDeadlineSeconds:int*", "6 dnsPolicy", "7 nodeSelector:{string}",
        "8 serviceAccountName", "9 serviceAccount", "21 automountServiceAccountToken:bool*",
        "10 nodeName", "11 hostNetwork:bool", "12 hostPID:bool", "13 hostIPC:bool",
        "27 shareProcessNamespace:bool*", "14 securityContext:-",
        "15 imagePullSecrets:[LocalObjectReference]", "16 hostname", "17 subdomain",
        "18 affinity:-", "19 schedulerName", "22 tolerations:[Toleration]", "23 hostAliases:-",
        "24 priorityClassName", "25 priority:int*", "26 dnsConfig:-", "28 readinessGates:-",
        "29 runtimeClassName*", "30 enableServiceLinks:bool*", "31 preemptionPolicy*",
        "32 overhead:{Quantity}", "33 topologySpreadConstraints:-",
        "35 setHostnameAsFQDN:bool*", "36 os:-", "37 hostUsers:bool*",
        "38 schedulingGates:[PodSchedulingGate]", "39 resourceClaims:-",
        "40 resources:ResourceRequirements", "41 hostnameOverride*", "43 schedulingGroup:-",
        "44 evictionResponders:-",
    ),
    "Container": _msg(
        "1 name*", "2 image", "3 command:[string]", "4 args:[string]", "5 workingDir",
        "6 ports:[ContainerPort]", "19 envFrom:-", "7 env:[EnvVar]",
        "8 resources:ResourceRequirements", "23 resizePolicy:-", "24 restartPolicy*",
        "25 restartPolicyRules:-", "9 volumeMounts:[VolumeMount]", "21 volumeDevices:-",
        "10 livenessProbe:-", "11 readinessProbe:-", "22 startupProbe:-", "12 lifecycle:-",
        "13 terminationMessagePath", "20 terminationMessagePolicy", "14 imagePullPolicy",
        "15 securityContext:-", "16 stdin:bool", "17 stdinOnce:bool", "18 tty:bool",
    ),
    "ContainerPort": _msg(
        "1 name", "2 hostPort:int", "3 containerPort:int*", "4 protocol", "5 hostIP"
    ),
    "ResourceRequirements": _msg(
        "1 limits:{Quantity}", "2 requests:{Quantity}", "3 claims:[ResourceClaim]"
    ),
    "ResourceClaim": _msg("1 name*", "2 request"),
    "EnvVar": _msg("1 name*", "2 value", "3 valueFrom:-"),
    "VolumeMount": _msg(
        "1 name*", "2 readOnly:bool", "7 recursiveReadOnly*", "3 mountPath*", "4 subPath",
        "5 mountPropagation*", "6 subPathExpr", "8 bindMountOptions:[string]",
    ),
    "Toleration": _msg(
        "1 key", "2 operator", "3 value", "4 effect", "5 tolerationSeconds:int*"
    ),
    "PodSchedulingGate": _msg("1 name*"),
    # k8s.io/api/apps/v1/generated.proto
    "Deployment": _msg(_META, "2 spec:DeploymentSpec", "3 status:DeploymentStatus"),
    "DeploymentSpec": _msg(
        "1 replicas:int*", "2 selector:LabelSelector", "3 template:PodTemplateSpec",
        "4 strategy:DeploymentStrategy", "5 minReadySeconds:int", "6 revisionHistoryLimit:int*",
        "7 paused:bool", "9 progressDeadlineSeconds:int*",
    ),
    "DeploymentStrategy": _msg("1 type", "2 rollingUpdate:RollingUpdateDeployment"),
    "RollingUpdateDeployment": _msg("1 maxUnavailable:IntOrString", "2 maxSurge:IntOrString"),
    "DeploymentStatus": _msg(
        "1 observedGeneration:int", "2 replicas:int", "3 updatedReplicas:int",
        "7 readyReplicas:int", "4 availableReplicas:int", "5 unavailableReplicas:int",
        "9 terminatingReplicas:int*", "6 conditions:-", "8 collisionCount:int*",
    ),
    # k8s.io/api/batch/v1/generated.proto
    "Job": _msg(_META, "2 spec:JobSpec", "3 status:JobStatus"),
    "JobSpec": _msg(
        "1 parallelism:int*", "2 completions:int*", "3 activeDeadlineSeconds:int*",
        "11 podFailurePolicy:-", "16 successPolicy:-", "7 backoffLimit:int*",
        "12 backoffLimitPerIndex:int*", "13 maxFailedIndexes:int*", "4 selector:LabelSelector",
        "5 manualSelector:bool*", "6 template:PodTemplateSpec",
        "8 ttlSecondsAfterFinished:int*", "9 completionMode*", "10 suspend:bool*",
        "14 podReplacementPolicy*", "15 managedBy*", "17 scheduling:-",
    ),
    "JobStatus": _msg(
        "1 conditions:-", "2 startTime:Time", "3 completionTime:Time", "4 active:int",
        "5 succeeded:int", "6 failed:int", "11 terminating:int*", "7 completedIndexes",
        "10 failedIndexes*", "8 uncountedTerminatedPods:-", "9 ready:int*",
    ),
    # k8s.io/api/rbac/v1/generated.proto
    "Role": _msg(_META, "2 rules:[PolicyRule]*"),
    "ClusterRole": _msg(_META, "2 rules:[PolicyRule]*", "3 aggregationRule:AggregationRule"),
    "AggregationRule": _msg("1 clusterRoleSelectors:[LabelSelector]"),
    "PolicyRule": _msg(
        "1 verbs:[string]*", "2 apiGroups:[string]", "3 resources:[string]",
        "4 resourceNames:[string]", "5 nonResourceURLs:[string]",
    ),
    "RoleBinding": _msg(_META, "2 subjects:[Subject]", "3 roleRef:RoleRef"),
    "ClusterRoleBinding": _msg(_META, "2 subjects:[Subject]", "3 roleRef:RoleRef"),
    "Subject": _msg("1 kind*", "2 apiGroup", "3 name*", "4 namespace"),
    "RoleRef": _msg("1 apiGroup*", "2 kind*", "3 name*"),
    # k8s.io/api/scheduling/v1/generated.proto
    "PriorityClass": _msg(
        _META, "2 value:int*", "3 globalDefault:bool", "4 description", "5 preemptionPolicy*"
    ),
    # k8s.io/api/authentication/v1/generated.proto
    "TokenRequest": _msg(_META, "2 spec:TokenRequestSpec", "3 status:TokenRequestStatus"),
    "TokenRequestSpec": _msg(
        "1 audiences:[string]*", "4 expirationSeconds:int*",
        "3 boundObjectRef:BoundObjectReference", "5 attestations:-",
    ),
    "BoundObjectReference": _msg("1 kind", "2 apiVersion", "3 name", "4 uid"),
    "TokenRequestStatus": _msg("1 token*", "2 expirationTimestamp:Time"),
    # The body of a typed client's delete (helm's release Secret, kubectl's cascade).
    "DeleteOptions": _msg(
        "1 gracePeriodSeconds:int*", "2 preconditions:Preconditions", "3 orphanDependents:bool*",
        "4 propagationPolicy*", "5 dryRun:[string]",
        "6 ignoreStoreReadErrorWithClusterBreakingPotential:bool*",
    ),
    "Preconditions": _msg("1 uid*", "2 resourceVersion*"),
}

# (apiVersion, kind) of the objects a protobuf body may carry: the message of the same name.
KINDS: Final = frozenset(
    {
        ("v1", "Namespace"),
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "ServiceAccount"),
        ("v1", "Service"),
        ("apps/v1", "Deployment"),
        ("batch/v1", "Job"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("scheduling.k8s.io/v1", "PriorityClass"),
        ("authentication.k8s.io/v1", "TokenRequest"),
    }
)


# --- decoding --------------------------------------------------------------------------


def _utf8(value: bytes, path: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtobufError(f"{path}: string is not valid UTF-8") from None


def _time(value: bytes, path: str) -> str | None:
    """metav1.Time as JSON writes it: RFC 3339 in UTC, whole seconds (upstream's Unmarshal
    drops the nanoseconds too: https://github.com/kubernetes/apimachinery/blob/v0.37.2/pkg/
    apis/meta/v1/time_proto.go); no bytes is the zero time, which JSON leaves out."""
    if not value:
        return None
    seconds = 0
    for number, wire, item in read_fields(value):
        if number == 1:
            seconds = signed(_varint(wire, item, f"{path}.seconds"))
    try:
        moment = _EPOCH + datetime.timedelta(seconds=seconds)
    except OverflowError:
        raise ProtobufError(f"{path}: time out of range ({seconds} s)") from None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _int_or_string(value: bytes, path: str) -> int | str:
    kind, number_value, text = 0, 0, ""
    for number, wire, item in read_fields(value):
        if number == 1:
            kind = signed(_varint(wire, item, f"{path}.type"))
        elif number == 2:
            number_value = signed(_varint(wire, item, f"{path}.intVal"))
        elif number == 3:
            text = _utf8(_bytes(wire, item, f"{path}.strVal"), path)
    return text if kind == 1 else number_value


def _single_string(value: bytes, path: str) -> str:
    """Quantity: `message Quantity { optional string string = 1; }`, a string in JSON."""
    text = ""
    for number, wire, item in read_fields(value):
        if number == 1:
            text = _utf8(_bytes(wire, item, path), path)
    return text


def _raw_json(value: bytes, path: str) -> Any:
    """FieldsV1: `optional bytes Raw = 1`, JSON text that JSON embeds as is."""
    raw = b""
    for number, wire, item in read_fields(value):
        if number == 1:
            raw = _bytes(wire, item, path)
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise ProtobufError(f"{path}: invalid JSON: {err}") from None


def _varint(wire: int, value: int | bytes, path: str) -> int:
    if wire != VARINT or not isinstance(value, int):
        raise ProtobufError(f"{path}: wire type {wire}, expected a varint")
    return value


def _bytes(wire: int, value: int | bytes, path: str) -> bytes:
    if wire != LEN or not isinstance(value, bytes):
        raise ProtobufError(f"{path}: wire type {wire}, expected length-delimited")
    return value


def _convert(typ: str, wire: int, value: int | bytes, path: str) -> Any:
    """One value of type `typ` (not repeated, not a map) as JSON has it."""
    if typ == "int":
        return signed(_varint(wire, value, path))
    if typ == "bool":
        return _varint(wire, value, path) != 0
    data = _bytes(wire, value, path)
    if typ == "string":
        return _utf8(data, path)
    if typ == "bytes":
        return base64.b64encode(data).decode("ascii")
    if typ == "Time":
        return _time(data, path)
    if typ == "Quantity":
        return _single_string(data, path)
    if typ == "IntOrString":
        return _int_or_string(data, path)
    if typ == "JSON":
        return _raw_json(data, path)
    return decode_message(typ, data, path)


_MAP_ZERO: Final[dict[str, Any]] = {"string": "", "bytes": "", "Quantity": "0", "int": 0}


def _map(field: Field, entries: list[tuple[int, int | bytes]], path: str) -> dict[str, Any]:
    """A map: repeated entries `{key = 1; value = 2}`, the last one for a key winning."""
    out: dict[str, Any] = {}
    for wire, entry in entries:
        key, raw_value = "", None
        for number, item_wire, item in read_fields(_bytes(wire, entry, path)):
            if number == 1:
                key = _utf8(_bytes(item_wire, item, f"{path} key"), path)
            elif number == 2:
                raw_value = (item_wire, item)
        if raw_value is None:
            out[key] = _MAP_ZERO.get(field.type, {})
        else:
            out[key] = _convert(field.type, *raw_value, f"{path}[{key}]")
    return out


def _repeated(field: Field, items: list[tuple[int, int | bytes]], path: str) -> list[Any]:
    out = []
    for wire, value in items:
        if field.type in ("int", "bool") and wire == LEN and isinstance(value, bytes):
            pos = 0  # packed: one length-delimited run of varints
            while pos < len(value):
                number, pos = read_varint(value, pos)
                out.append(_convert(field.type, VARINT, number, path))
        else:
            out.append(_convert(field.type, wire, value, path))
    return out


def decode_message(name: str, buf: bytes, path: str = "") -> dict[str, Any]:
    """Message `name` of MESSAGES, read from `buf`, as the JSON object of the same value."""
    fields = MESSAGES[name]
    seen: dict[int, list[tuple[int, int | bytes]]] = {}
    for number, wire, raw in read_fields(buf):
        if number in fields:
            seen.setdefault(number, []).append((wire, raw))
    out: dict[str, Any] = {}
    for number, field in fields.items():
        items = seen.get(number)
        if not items:
            if field.keep and (field.map or field.repeated):
                out[field.name] = None  # Go's JSON of a nil slice or map without omitempty
            continue
        where = f"{path}.{field.name}" if path else field.name
        if field.type == _UNSUPPORTED:
            if any(item not in (0, b"") for _, item in items):
                raise UnsupportedFieldError(where)
            continue
        value: Any
        if field.map:
            value = _map(field, items, where)
        elif field.repeated:
            value = _repeated(field, items, where)
        elif field.type in MESSAGES and len(items) > 1:
            # A message field written twice merges, which is decoding the concatenation.
            value = _convert(field.type, LEN, b"".join(_bytes(w, v, where) for w, v in items),
                             where)
        else:
            value = _convert(field.type, *items[-1], where)
        if value is None or ((field.map or field.repeated) and not value and not field.keep):
            continue
        if not field.keep and field.type in _SCALARS and not field.repeated and not value:
            continue
        out[field.name] = value
    return out


def _envelope(buf: bytes) -> tuple[str, str, bytes]:
    """runtime.Unknown (https://github.com/kubernetes/apimachinery/blob/v0.37.2/pkg/runtime/
    generated.proto): typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2, contentEncoding = 3,
    contentType = 4."""
    api_version = kind = encoding = content_type = ""
    raw = b""
    for number, wire, value in read_fields(buf):
        if number == 1:
            for sub, sub_wire, item in read_fields(_bytes(wire, value, "typeMeta")):
                if sub == 1:
                    api_version = _utf8(_bytes(sub_wire, item, "apiVersion"), "apiVersion")
                elif sub == 2:
                    kind = _utf8(_bytes(sub_wire, item, "kind"), "kind")
        elif number == 2:
            raw = _bytes(wire, value, "raw")
        elif number == 3:
            encoding = _utf8(_bytes(wire, value, "contentEncoding"), "contentEncoding")
        elif number == 4:
            content_type = _utf8(_bytes(wire, value, "contentType"), "contentType")
    if encoding or content_type not in ("", PROTOBUF):
        raise errors.ApiError(
            415,
            "UnsupportedMediaType",
            f"the emulator cannot read a protobuf envelope with contentEncoding {encoding!r} "
            f"and contentType {content_type!r}",
        )
    return api_version, kind, raw


def _unsupported(what: str) -> errors.ApiError:
    return errors.ApiError(
        415,
        "UnsupportedMediaType",
        f"the emulator cannot decode {what}; send it as JSON instead (kubectl: "
        "`kubectl create -f` with a manifest)",
    )


def decode_body(raw: bytes) -> dict[str, Any]:
    """A `application/vnd.kubernetes.protobuf` request body as the dict its JSON would give;
    400 for malformed bytes, 415 naming the kind for an object the tables do not cover."""
    if not raw.startswith(MAGIC):
        raise errors.bad_request("invalid protobuf body: it does not start with k8s\\x00")
    try:
        api_version, kind, obj = _envelope(raw[len(MAGIC) :])
        if not kind or not api_version:
            raise errors.bad_request("invalid protobuf body: the envelope names no kind")
        # meta/v1 DeleteOptions travels under the group version of the deleted resource.
        if (api_version, kind) not in KINDS and kind != "DeleteOptions":
            raise _unsupported(f"a protobuf {kind} ({api_version}) body")
        try:
            decoded = decode_message(kind, obj)
        except UnsupportedFieldError as err:
            raise _unsupported(
                f"{err.path} of a protobuf {kind} ({api_version}) body"
            ) from None
    except ProtobufError as err:
        raise errors.bad_request(f"invalid protobuf body: {err}") from None
    return {"kind": kind, "apiVersion": api_version, **decoded}
