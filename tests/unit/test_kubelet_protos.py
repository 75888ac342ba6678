"""The kubelet gRPC protos match the wire contract, and the committed stubs match the protos."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor

from api.kubelet import generate
from api.kubelet.dra.v1 import api_pb2 as v1
from api.kubelet.dra.v1 import api_pb2_grpc as v1_grpc
from api.kubelet.dra.v1beta1 import api_pb2 as v1beta1
from api.kubelet.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from api.kubelet.pluginregistration import api_pb2 as reg
from api.kubelet.pluginregistration import api_pb2_grpc as reg_grpc

REPEATED = "repeated"
# (message, field number, field name, type, label) from the wire contract.
STRING, BOOL, MSG = (
    FieldDescriptor.TYPE_STRING,
    FieldDescriptor.TYPE_BOOL,
    FieldDescriptor.TYPE_MESSAGE,
)
REGISTRATION_FIELDS = [
    ("PluginInfo", 1, "type", STRING, None),
    ("PluginInfo", 2, "name", STRING, None),
    ("PluginInfo", 3, "endpoint", STRING, None),
    ("PluginInfo", 4, "supported_versions", STRING, REPEATED),
    ("RegistrationStatus", 1, "plugin_registered", BOOL, None),
    ("RegistrationStatus", 2, "error", STRING, None),
]
DRA_FIELDS = [
    ("NodePrepareResourcesRequest", 1, "claims", MSG, REPEATED),
    ("NodePrepareResourcesResponse", 1, "claims", MSG, "map"),
    ("NodePrepareResourceResponse", 1, "devices", MSG, REPEATED),
    ("NodePrepareResourceResponse", 2, "error", STRING, None),
    ("Device", 1, "request_names", STRING, REPEATED),
    ("Device", 2, "pool_name", STRING, None),
    ("Device", 3, "device_name", STRING, None),
    ("Device", 4, "cdi_device_ids", STRING, REPEATED),
    ("NodeUnprepareResourcesRequest", 1, "claims", MSG, REPEATED),
    ("NodeUnprepareResourcesResponse", 1, "claims", MSG, "map"),
    ("NodeUnprepareResourceResponse", 1, "error", STRING, None),
    ("Claim", 1, "namespace", STRING, None),
    ("Claim", 2, "uid", STRING, None),
    ("Claim", 3, "name", STRING, None),
]
EMPTY_MESSAGES = {reg: ["InfoRequest", "RegistrationStatusResponse"], v1: [], v1beta1: []}


def _check_fields(module, table):
    described = set()
    for message, number, name, ftype, label in table:
        desc = module.DESCRIPTOR.message_types_by_name[message]
        field = desc.fields_by_number[number]
        assert field.name == name, f"{message} field {number}"
        assert field.type == ftype, f"{message}.{name} type"
        if label == "map":
            assert field.message_type.GetOptions().map_entry, f"{message}.{name} is a map"
            assert field.message_type.fields_by_name["key"].type == STRING
        is_repeated = field.is_repeated
        assert is_repeated == (label in (REPEATED, "map")), f"{message}.{name} repeated"
        described.add((message, name))
    for message in module.DESCRIPTOR.message_types_by_name.values():
        for field in message.fields:
            if (message.name, field.name) not in described:
                yield message.name, field.name


def test_registration_messages_match_the_contract():
    assert reg.DESCRIPTOR.package == "pluginregistration"
    assert list(_check_fields(reg, REGISTRATION_FIELDS)) == []
    for empty in EMPTY_MESSAGES[reg]:
        assert reg.DESCRIPTOR.message_types_by_name[empty].fields == []


def test_dra_v1_messages_match_the_contract():
    assert v1.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert list(_check_fields(v1, DRA_FIELDS)) == [("Device", "share_id")]
    share_id = v1.Device.DESCRIPTOR.fields_by_number[5]
    assert share_id.name == "share_id" and share_id.type == STRING
    assert share_id.has_presence, "share_id is proto3 optional"
    assert share_id.containing_oneof is not None and share_id.containing_oneof.name == "_share_id"


def test_dra_v1beta1_is_v1_without_share_id():
    assert v1beta1.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1beta1"
    assert list(_check_fields(v1beta1, DRA_FIELDS)) == []
    assert 5 not in v1beta1.Device.DESCRIPTOR.fields_by_number


@pytest.mark.parametrize(
    "module, service, methods",
    [
        (
            reg,
            "Registration",
            {
                "GetInfo": (
                    "/pluginregistration.Registration/GetInfo",
                    "InfoRequest",
                    "PluginInfo",
                ),
                "NotifyRegistrationStatus": (
                    "/pluginregistration.Registration/NotifyRegistrationStatus",
                    "RegistrationStatus",
                    "RegistrationStatusResponse",
                ),
            },
        ),
        *[
            (
                mod,
                "DRAPlugin",
                {
                    "NodePrepareResources": (
                        f"/k8s.io.kubelet.pkg.apis.dra.{ver}.DRAPlugin/NodePrepareResources",
                        "NodePrepareResourcesRequest",
                        "NodePrepareResourcesResponse",
                    ),
                    "NodeUnprepareResources": (
                        f"/k8s.io.kubelet.pkg.apis.dra.{ver}.DRAPlugin/NodeUnprepareResources",
                        "NodeUnprepareResourcesRequest",
                        "NodeUnprepareResourcesResponse",
                    ),
                },
            )
            for mod, ver in ((v1, "v1"), (v1beta1, "v1beta1"))
        ],
    ],
)
def test_full_method_paths(module, service, methods):
    desc = module.DESCRIPTOR.services_by_name[service]
    assert {m.name for m in desc.methods} == set(methods)
    for method in desc.methods:
        path, request, response = methods[method.name]
        assert f"/{desc.full_name}/{method.name}" == path
        assert method.input_type.name == request
        assert method.output_type.name == response
        assert not method.client_streaming and not method.server_streaming


def test_committed_stubs_match_the_generator(tmp_path: Path):
    outputs = generate.generate(tmp_path)
    assert len(outputs) == 9
    stale = []
    for fresh in outputs:
        committed = generate.REPO_ROOT / fresh.relative_to(tmp_path)
        if not committed.exists() or committed.read_bytes() != fresh.read_bytes():
            stale.append(str(committed.relative_to(generate.REPO_ROOT)))
    assert stale == [], f"stubs out of date, run `make proto`: {stale}"


class _Registration(reg_grpc.RegistrationServicer):
    def GetInfo(self, request, context):
        return reg.PluginInfo(
            type="DRAPlugin",
            name="compute-domain.nvidia.com",
            endpoint="/x/dra.sock",
            supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        )


class _V1(v1_grpc.DRAPluginServicer):
    def NodePrepareResources(self, request, context):
        resp = v1.NodePrepareResourcesResponse()
        for claim in request.claims:
            resp.claims[claim.uid].devices.add(
                request_names=["channel"],
                pool_name="node-a",
                device_name="channel-0",
                cdi_device_ids=[f"k8s.compute-domain.nvidia.com/claim={claim.uid}-channel-0"],
                share_id="s1",
            )
        return resp


class _V1beta1(v1beta1_grpc.DRAPluginServicer):
    def NodeUnprepareResources(self, request, context):
        resp = v1beta1.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            resp.claims[claim.uid].error = f"{claim.namespace}/{claim.name} not prepared"
        return resp


def test_stubs_talk_over_a_real_unix_socket(tmp_path: Path):
    sock = tmp_path / "dra.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    reg_grpc.add_RegistrationServicer_to_server(_Registration(), server)
    v1_grpc.add_DRAPluginServicer_to_server(_V1(), server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(_V1beta1(), server)
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{sock}") as channel:
            info = reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest(), timeout=5)
            assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
            resp = v1_grpc.DRAPluginStub(channel).NodePrepareResources(
                v1.NodePrepareResourcesRequest(
                    claims=[v1.Claim(namespace="ns", uid="u1", name="c")]
                ),
                timeout=5,
            )
            device = resp.claims["u1"].devices[0]
            assert device.cdi_device_ids == ["k8s.compute-domain.nvidia.com/claim=u1-channel-0"]
            assert device.HasField("share_id") and device.share_id == "s1"
            un = v1beta1_grpc.DRAPluginStub(channel).NodeUnprepareResources(
                v1beta1.NodeUnprepareResourcesRequest(
                    claims=[v1beta1.Claim(namespace="ns", uid="u2", name="c")]
                ),
                timeout=5,
            )
            assert un.claims["u2"].error == "ns/c not prepared"
            # An RPC this servicer does not implement is a clean UNIMPLEMENTED, not a hang.
            with pytest.raises(grpc.RpcError) as err:
                v1beta1_grpc.DRAPluginStub(channel).NodePrepareResources(
                    v1beta1.NodePrepareResourcesRequest(), timeout=5
                )
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        server.stop(grace=None)
