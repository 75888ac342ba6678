"""Protobuf request bodies: what kubectl's `create` generators send
(sim/apiserver/protobuf_bodies.py).

The kubectl tests hold the decoded body to the JSON the same generator prints with
`--dry-run=client -o json` (client-go's own JSON of the object), so each table is checked
against upstream's encoder and JSON tags; the unit tests cover the wire reader.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import urllib3
from test_kubectl import kubectl  # noqa: F401 (the fixture)

from sim.apiserver import protobuf_bodies as pb
from sim.apiserver.errors import ApiError
from sim.controlplane.pki import ClusterPKI

BINARY = bytes(range(256))

# --- a tiny encoder for hand-built bodies ------------------------------------------------


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def num(field: int, n: int) -> bytes:
    return varint(field << 3 | pb.VARINT) + varint(n)


def ld(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | pb.LEN) + varint(len(payload)) + payload


def text(field: int, value: str) -> bytes:
    return ld(field, value.encode())


def entry(field: int, key: str, value: bytes) -> bytes:
    return ld(field, text(1, key) + ld(2, value))


def envelope(api_version: str, kind: str, obj: bytes) -> bytes:
    type_meta = text(1, api_version) + text(2, kind)
    return pb.MAGIC + ld(1, type_meta) + ld(2, obj) + text(3, "") + text(4, "")


def post(apiserver: Any, path: str, body: bytes) -> tuple[int, dict]:
    resp = urllib3.PoolManager().request(
        "POST",
        apiserver.url + path,
        body=body,
        headers={"Content-Type": pb.PROTOBUF, "Accept": f"{pb.PROTOBUF},application/json"},
    )
    return resp.status, json.loads(resp.data)


# --- the wire reader ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 2**31, 2**63, 2**64 - 1])
def test_varints_round_trip(n):
    encoded = varint(n)
    assert pb.read_varint(encoded + b"\x00", 0) == (n, len(encoded))


def test_negative_ints_are_sign_extended_varints():
    assert len(varint(-1)) == 10
    assert pb.signed(pb.read_varint(varint(-1), 0)[0]) == -1
    got = pb.decode_message("PriorityClass", num(2, -5))
    assert got == {"value": -5}


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x80", "truncated varint"),
        (b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
        (b"\xff" * 9 + b"\x7f", "overflows 64 bits"),
    ],
)
def test_bad_varints(data, why):
    with pytest.raises(pb.ProtobufError, match=why):
        pb.read_varint(data, 0)


def test_all_wire_types_are_read_and_unknown_fields_skipped():
    meta = (
        text(1, "x")
        + num(99, 7)
        + varint(98 << 3 | pb.I64) + (5).to_bytes(8, "little")
        + varint(97 << 3 | pb.I32) + (6).to_bytes(4, "little")
        + text(96, "later field")
    )  # fmt: skip
    fields = list(pb.read_fields(meta))
    assert [(n, w) for n, w, _ in fields] == [(1, 2), (99, 0), (98, 1), (97, 5), (96, 2)]
    assert [v for _, _, v in fields][1:4] == [7, 5, 6]
    assert pb.decode_message("ObjectMeta", meta) == {"name": "x"}


def test_nested_messages_maps_times_and_go_json_zero_rules():
    owner = text(5, "apps/v1") + text(1, "ReplicaSet") + text(3, "rs") + text(4, "u-1")
    meta = (
        text(1, "n") + text(2, "") + text(3, "ns") + num(7, 0)  # zero omitempty: dropped
        + ld(8, num(1, 1_700_000_000) + num(2, 999))  # Time: whole seconds, in UTC
        + num(10, 0)  # a pointer: zero is kept
        + entry(11, "app", b"web") + entry(11, "tier", b"")
        + entry(12, "note", b"a") + entry(12, "note", b"b")  # a key's last entry wins
        + ld(13, owner + num(6, 0))  # pointer bool false: kept
        + ld(13, owner.replace(b"rs", b"r2"))
        + text(14, "f1") + text(14, "f2")
    )  # fmt: skip
    got = pb.decode_message("ObjectMeta", meta)
    assert got == {
        "name": "n",
        "namespace": "ns",
        "creationTimestamp": "2023-11-14T22:13:20Z",
        "deletionGracePeriodSeconds": 0,
        "labels": {"app": "web", "tier": ""},
        "annotations": {"note": "b"},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-1",
             "controller": False},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r2", "uid": "u-1"},
        ],
        "finalizers": ["f1", "f2"],
    }  # fmt: skip
    assert pb.decode_message("ObjectMeta", ld(8, b"")) == {}  # the zero time: left out


def test_packed_and_unpacked_repeated_fields(monkeypatch):
    monkeypatch.setitem(
        pb.MESSAGES,
        "Numbers",
        {1: pb.Field("values", "int", repeated=True), 2: pb.Field("flags", "bool", repeated=True)},
    )
    packed = ld(1, varint(1) + varint(300) + varint(-2))
    unpacked = num(1, 4) + num(2, 1) + num(2, 0)
    assert pb.decode_message("Numbers", packed + unpacked) == {
        "values": [1, 300, -2, 4],
        "flags": [True, False],
    }
    assert pb.decode_message("Numbers", ld(1, b"")) == {}


def test_bytes_quantities_and_int_or_string():
    secret = entry(2, "key", b"\x00\xff") + text(3, "") + entry(4, "plain", b"text")
    assert pb.decode_message("Secret", secret) == {
        "data": {"key": "AP8="},
        "stringData": {"plain": "text"},
    }
    limits = entry(1, "cpu", text(1, "500m")) + ld(1, text(1, "memory"))  # no value: zero
    assert pb.decode_message("ResourceRequirements", limits) == {
        "limits": {"cpu": "500m", "memory": "0"}
    }
    by_number = ld(4, num(1, 0) + num(2, 8080) + text(3, ""))
    by_name = ld(4, num(1, 1) + num(2, 0) + text(3, "https"))
    assert pb.decode_message("ServicePort", num(3, 443) + by_number) == {
        "port": 443,
        "targetPort": 8080,
    }
    assert pb.decode_message("ServicePort", num(3, 0) + by_name) == {
        "port": 0,  # no omitempty: kept
        "targetPort": "https",
    }


def test_a_message_written_twice_merges():
    spec = ld(2, num(1, 3)) + ld(2, num(7, 1))
    assert pb.decode_message("Deployment", spec) == {"spec": {"replicas": 3, "paused": True}}


def test_every_table_type_is_known():
    builtin = {"string", "int", "bool", "bytes", "Time", "Quantity", "IntOrString", "JSON", "-"}
    for name, fields in pb.MESSAGES.items():
        for field in fields.values():
            assert field.type in builtin or field.type in pb.MESSAGES, (name, field)
    for _, kind in pb.KINDS:
        assert pb.MESSAGES[kind][1] == pb.Field("metadata", "ObjectMeta")


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"\x0a\x00", "does not start with k8s"),
        (envelope("v1", "ConfigMap", text(1, "x"))[:-6], "truncated field 2"),
        (envelope("v1", "ConfigMap", ld(1, num(1, 5))), "metadata.name: wire type 0"),
        (envelope("v1", "ConfigMap", ld(1, ld(1, b"\xff"))),
         "metadata.name: string is not valid UTF-8"),
        (envelope("v1", "ConfigMap", varint(1 << 3 | 3)), "unsupported wire type 3"),
        (pb.MAGIC + ld(2, b""), "names no kind"),
        (envelope("v1", "ConfigMap", ld(1, ld(8, num(1, 2**62)))),
         "metadata.creationTimestamp: time out of range"),
    ],
)  # fmt: skip
def test_malformed_bodies_are_400(body, why):
    with pytest.raises(ApiError) as err:
        pb.decode_body(body)
    assert err.value.code == 400 and why in err.value.message


def test_delete_options_of_any_group_version():
    """A typed client's delete (helm uninstall purging its release Secret) sends meta/v1
    DeleteOptions under the deleted resource's group version; a zero grace period and an
    empty precondition resourceVersion are pointers, so they stay."""
    body = (num(1, 0) + ld(2, text(1, "uid-1") + text(2, "")) + text(4, "Background")
            + text(5, "All"))
    for api_version in ("v1", "apps/v1"):
        assert pb.decode_body(envelope(api_version, "DeleteOptions", body)) == {
            "kind": "DeleteOptions", "apiVersion": api_version, "gracePeriodSeconds": 0,
            "preconditions": {"uid": "uid-1", "resourceVersion": ""},
            "propagationPolicy": "Background", "dryRun": ["All"]}


def test_undecoded_fields_and_kinds_are_415():
    with pytest.raises(ApiError) as err:
        pb.decode_body(envelope("v1", "Pod", text(1, "x")))
    assert err.value.code == 415
    assert "protobuf Pod (v1) body" in err.value.message
    assert "kubectl create -f" in err.value.message
    volume = ld(1, text(1, "data"))
    job = ld(2, ld(6, ld(2, volume)))
    with pytest.raises(ApiError) as err:
        pb.decode_body(envelope("batch/v1", "Job", job))
    assert err.value.code == 415
    assert "spec.template.spec.volumes of a protobuf Job" in err.value.message
    # gogo-protobuf writes zero values of fields the emulator does not decode: fine.
    assert pb.decode_body(envelope("batch/v1", "Job", ld(2, ld(11, b"")))) == {
        "kind": "Job",
        "apiVersion": "batch/v1",
        "spec": {},
    }
    gzip = pb.MAGIC + ld(1, text(1, "v1") + text(2, "ConfigMap")) + text(3, "gzip")
    with pytest.raises(ApiError, match="contentEncoding 'gzip'") as err:
        pb.decode_body(gzip)
    assert err.value.code == 415


def test_the_emulator_answers_bad_and_undecodable_bodies_with_status(apiserver):
    code, status = post(apiserver, "/api/v1/namespaces/default/configmaps",
                        envelope("v1", "ConfigMap", ld(1, text(1, "x")))[:-12])
    assert (code, status["reason"]) == (400, "BadRequest")
    assert "invalid protobuf body: truncated" in status["message"]
    lease = envelope("coordination.k8s.io/v1", "Lease", ld(1, text(1, "l")))
    code, status = post(apiserver, "/apis/coordination.k8s.io/v1/namespaces/default/leases",
                        lease)
    assert (code, status["reason"]) == (415, "UnsupportedMediaType")
    assert "Lease" in status["message"] and "kubectl create -f" in status["message"]
    code, created = post(apiserver, "/api/v1/namespaces/default/configmaps",
                         envelope("v1", "ConfigMap", ld(1, text(1, "x")) + entry(2, "a", b"b")))
    assert code == 201 and created["data"] == {"a": "b"}  # answered in JSON
    assert created["metadata"]["namespace"] == "default"  # fmt: skip


# --- through the pinned kubectl ----------------------------------------------------------


@pytest.fixture
def decoded(monkeypatch) -> list[dict]:
    """Every body the emulator decodes from protobuf during the test, in order."""
    seen: list[dict] = []
    real = pb.decode_body

    def spy(raw: bytes) -> dict:
        body = real(raw)
        seen.append(body)
        return body

    monkeypatch.setattr(pb, "decode_body", spy)
    return seen


def _generators(files: Path) -> list[tuple[str, ...]]:
    (files / "notes.txt").write_text("line one\nline two\n")
    (files / "blob.bin").write_bytes(BINARY)
    tls = ClusterPKI(files / "pki").issue("web", "web.example", server=True)
    return [
        ("namespace", "team-a"),
        ("configmap", "literals", "--from-literal=a=b", "--from-literal=empty="),
        ("configmap", "files", f"--from-file={files / 'notes.txt'}",
         f"--from-file=blob={files / 'blob.bin'}", "--save-config"),
        ("secret", "generic", "creds", "--from-literal=user=admin",
         f"--from-file=key.bin={files / 'blob.bin'}", "--type=example.com/creds"),
        ("secret", "docker-registry", "registry", "--docker-server=registry.example",
         "--docker-username=u", "--docker-password=p"),
        ("secret", "tls", "web-tls", f"--cert={tls.cert}", f"--key={tls.key}"),
        ("serviceaccount", "robot"),
        ("role", "reader", "--verb=get,list", "--resource=pods,deployments.apps",
         "--resource-name=x"),
        ("clusterrole", "health", "--verb=get", "--non-resource-url=/healthz"),
        ("clusterrole", "aggregated", "--aggregation-rule=rbac.example.com/aggregate=true"),
        ("rolebinding", "rb", "--clusterrole=view", "--user=alice", "--group=devs",
         "--serviceaccount=default:robot"),
        ("clusterrolebinding", "crb", "--clusterrole=health", "--user=bob"),
        ("priorityclass", "zero", "--value=0", "--preemption-policy=Never",
         "--description=nothing special"),
        ("priorityclass", "high", "--value=1000000", "--global-default"),
        ("job", "once", "--image=busybox:1.36", "--", "sleep", "1"),
        ("deployment", "web", "--image=nginx", "--replicas=0", "--port=8080"),
        ("deployment", "pair", "--image=nginx", "--image=redis"),
        ("service", "clusterip", "svc", "--tcp=80:8080", "--tcp=443:https"),
        ("service", "clusterip", "headless", "--clusterip=None"),
        ("service", "nodeport", "np", "--tcp=81:81", "--node-port=30081"),
        ("service", "loadbalancer", "lb", "--tcp=80"),
        ("service", "externalname", "ext", "--external-name=example.com"),
    ]  # fmt: skip


def test_create_generators_send_what_their_json_says(kubectl, decoded, tmp_path):  # noqa: F811
    """The body the emulator decodes equals the generator's own JSON of the object, and
    kubectl reads the JSON answer to its protobuf request."""
    kubectl("create", "serviceaccount", "robot-base")
    for args in _generators(tmp_path):
        cut = args.index("--") if "--" in args else len(args)  # flags go before a command
        flags, command = args[:cut], args[cut:]
        expected = json.loads(
            kubectl("create", *flags, "--dry-run=client", "-o", "json", *command).stdout
        )
        count = len(decoded)
        answer = json.loads(kubectl("create", *flags, "-o", "json", *command).stdout)
        assert len(decoded) == count + 1, args
        assert decoded[-1] == expected, args
        assert answer["metadata"]["uid"], args


def test_created_objects_read_back_as_json(kubectl, tmp_path):  # noqa: F811
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "blob.bin").write_bytes(BINARY)

    def get(*args: str) -> dict:
        return json.loads(kubectl("get", *args, "-o", "json").stdout)

    assert kubectl("create", "namespace", "team-b").stdout == "namespace/team-b created\n"
    ns = get("namespace", "team-b")
    assert ns["status"]["phase"] == "Active"
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-b"}
    kubectl("create", "configmap", "cfg", "-n", "team-b", "--from-literal=a=b",
            f"--from-file={tmp_path / 'notes.txt'}", f"--from-file=blob={tmp_path / 'blob.bin'}")
    cm = get("configmap", "cfg", "-n", "team-b")
    assert cm["data"] == {"a": "b", "notes.txt": "hello\n"}
    assert base64.b64decode(cm["binaryData"]["blob"]) == BINARY
    kubectl("create", "secret", "generic", "s", "-n", "team-b", "--from-literal=user=admin",
            f"--from-file=key={tmp_path / 'blob.bin'}")
    secret = get("secret", "s", "-n", "team-b")
    assert {k: base64.b64decode(v) for k, v in secret["data"].items()} == {
        "user": b"admin",
        "key": BINARY,
    }
    kubectl("create", "deployment", "web", "-n", "team-b", "--image=nginx", "--replicas=2")
    deployment = get("deployment", "web", "-n", "team-b")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx"
    kubectl("create", "job", "once", "-n", "team-b", "--image=busybox", "--", "true")
    job = get("job", "once", "-n", "team-b")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["true"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    kubectl("create", "serviceaccount", "robot", "-n", "team-b")
    kubectl("create", "rolebinding", "rb", "-n", "team-b", "--clusterrole=view",
            "--serviceaccount=team-b:robot")
    binding = get("rolebinding", "rb", "-n", "team-b")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "view"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "robot",
                                    "namespace": "team-b"}]
    kubectl("create", "priorityclass", "zero", "--value=0")
    assert get("priorityclass", "zero")["value"] == 0  # fmt: skip


def test_create_token(kubectl, decoded):  # noqa: F811
    kubectl("create", "serviceaccount", "robot")
    token = kubectl("create", "token", "robot", "--duration=1h", "--audience=aud").stdout
    assert token.strip()
    assert decoded[-1] == {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {},
        "spec": {"audiences": ["aud"], "expirationSeconds": 3600},
        "status": {"token": ""},  # no omitempty: JSON has it too
    }
    short = kubectl("create", "token", "robot", "--duration=1m", check=False)
    assert short.returncode != 0 and "less than 10 minutes" in short.stderr


RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: recon, labels: {team: ml}}
rules:
- {apiGroups: [""], resources: [pods], verbs: [VERBS]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: recon, namespace: fresh}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: recon}
subjects:
- {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
"""


def test_auth_reconcile_creates_and_updates_through_protobuf(kubectl, decoded):  # noqa: F811
    """`kubectl auth reconcile` creates the namespace and objects, then PUTs the stored object
    back with its uid, resourceVersion and creationTimestamp, all in protobuf."""
    kubectl("auth", "reconcile", "-f", "-", stdin=RBAC.replace("VERBS", "get"))
    assert [b["kind"] for b in decoded] == ["ClusterRole", "Namespace", "RoleBinding"]
    kubectl("auth", "reconcile", "-f", "-", stdin=RBAC.replace("VERBS", "list"))
    put = decoded[-1]
    assert put["kind"] == "ClusterRole"
    assert put["metadata"]["uid"] and put["metadata"]["resourceVersion"]
    role = json.loads(kubectl("get", "clusterrole", "recon", "-o", "json").stdout)
    assert sorted(verb for rule in role["rules"] for verb in rule["verbs"]) == ["get", "list"]
    assert role["metadata"]["labels"] == {"team": "ml"}
    assert role["metadata"]["creationTimestamp"] == put["metadata"]["creationTimestamp"]
    assert json.loads(kubectl("get", "rolebinding", "recon", "-n", "fresh", "-o", "json").stdout)[
        "subjects"
    ] == [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]
