"""kubelet's two gRPC services on unix sockets: plugin registration and the DRA node service.

The DRA server starts before the registration socket appears, so kubelet never learns
about a plugin it cannot call. Both sockets are removed when the agent stops, which is
how kubelet notices that the plugin is gone. RPCs run concurrently on the event loop:
a workload's Prepare waiting for its IMEX daemon never blocks the daemon's own Prepare.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf import text_format
from google.protobuf.message import Message

from api import names
from api.kubelet.dra.v1 import api_pb2 as v1
from api.kubelet.dra.v1 import api_pb2_grpc as v1_grpc
from api.kubelet.dra.v1beta1 import api_pb2 as v1beta1
from api.kubelet.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from api.kubelet.pluginregistration import api_pb2 as reg
from api.kubelet.pluginregistration import api_pb2_grpc as reg_grpc
from cdi.atomic import make_dirs
from runtime.logsetup import v_level

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}:{self.uid}"


@dataclass(frozen=True)
class PreparedDeviceResult:
    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class PrepareResult:
    devices: tuple[PreparedDeviceResult, ...] = ()
    error: str = ""


class RpcError(Exception):
    """Fails a whole RPC (kubelet ignores the response and retries)."""


class ClaimDriver(Protocol):
    async def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]: ...

    async def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]: ...


def _strip_subrequest(name: str) -> str:
    return name.split("/", 1)[0]


_GRPC_DETAIL = v_level(6)  # the reference's GRPCVerbosity: request/response detail at V6
_request_ids = itertools.count(1)


def _log_rpc(what: str, request_id: int, method: str, message: Message) -> None:
    if log.isEnabledFor(_GRPC_DETAIL):
        log.log(_GRPC_DETAIL, "gRPC %s %d %s: %s", what, request_id, method,
                text_format.MessageToString(message, as_one_line=True))


class DraV1(v1_grpc.DRAPluginServicer):
    def __init__(self, driver: ClaimDriver) -> None:
        self._driver = driver

    async def NodePrepareResources(self, request: v1.NodePrepareResourcesRequest,
                                   context: grpc.aio.ServicerContext[Any, Any]
                                   ) -> v1.NodePrepareResourcesResponse:
        request_id = next(_request_ids)
        _log_rpc("request", request_id, "NodePrepareResources", request)
        refs = [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]
        try:
            results = await self._driver.prepare(refs)
        except RpcError as err:
            log.error("gRPC request %d NodePrepareResources failed: %s", request_id, err)
            await context.abort(grpc.StatusCode.UNKNOWN, f"prepare resource claims: {err}")
        response = v1.NodePrepareResourcesResponse()
        for uid, result in results.items():
            entry = response.claims[uid]
            entry.error = result.error
            if result.error:
                continue
            for dev in result.devices:
                device = entry.devices.add(
                    request_names=[_strip_subrequest(r) for r in dev.requests],
                    pool_name=dev.pool, device_name=dev.device,
                    cdi_device_ids=list(dev.cdi_device_ids))
                if dev.share_id is not None:
                    device.share_id = dev.share_id
        _log_rpc("response", request_id, "NodePrepareResources", response)
        return response

    async def NodeUnprepareResources(self, request: v1.NodeUnprepareResourcesRequest,
                                     context: grpc.aio.ServicerContext[Any, Any]
                                     ) -> v1.NodeUnprepareResourcesResponse:
        request_id = next(_request_ids)
        _log_rpc("request", request_id, "NodeUnprepareResources", request)
        refs = [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]
        try:
            results = await self._driver.unprepare(refs)
        except RpcError as err:
            log.error("gRPC request %d NodeUnprepareResources failed: %s", request_id, err)
            await context.abort(grpc.StatusCode.UNKNOWN, f"unprepare resource claims: {err}")
        response = v1.NodeUnprepareResourcesResponse()
        for uid, error in results.items():
            response.claims[uid].error = error
        _log_rpc("response", request_id, "NodeUnprepareResources", response)
        return response


class DraV1beta1(v1beta1_grpc.DRAPluginServicer):
    """v1beta1 is v1 without share_id: convert, delegate, convert back."""

    def __init__(self, v1_service: DraV1) -> None:
        self._v1 = v1_service

    async def NodePrepareResources(self, request: v1beta1.NodePrepareResourcesRequest,
                                   context: grpc.aio.ServicerContext[Any, Any]
                                   ) -> v1beta1.NodePrepareResourcesResponse:
        converted = v1.NodePrepareResourcesRequest.FromString(request.SerializeToString())
        result = await self._v1.NodePrepareResources(converted, context)
        response = v1beta1.NodePrepareResourcesResponse()
        for uid, claim in result.claims.items():
            entry = response.claims[uid]
            entry.error = claim.error
            for dev in claim.devices:
                entry.devices.add(request_names=list(dev.request_names), pool_name=dev.pool_name,
                                  device_name=dev.device_name,
                                  cdi_device_ids=list(dev.cdi_device_ids))
        return response

    async def NodeUnprepareResources(self, request: v1beta1.NodeUnprepareResourcesRequest,
                                     context: grpc.aio.ServicerContext[Any, Any]
                                     ) -> v1beta1.NodeUnprepareResourcesResponse:
        converted = v1.NodeUnprepareResourcesRequest.FromString(request.SerializeToString())
        result = await self._v1.NodeUnprepareResources(converted, context)
        return v1beta1.NodeUnprepareResourcesResponse.FromString(result.SerializeToString())


@dataclass
class RegistrationState:
    registered: bool = False
    error: str = ""
    calls: int = 0
    history: list[tuple[bool, str]] = field(default_factory=list)


class Registration(reg_grpc.RegistrationServicer):
    def __init__(self, dra_socket: Path, state: RegistrationState) -> None:
        self._endpoint = str(dra_socket)
        self._state = state

    async def GetInfo(self, request: reg.InfoRequest, context: grpc.aio.ServicerContext[Any, Any]
                      ) -> reg.PluginInfo:
        return reg.PluginInfo(type=names.PLUGIN_TYPE_DRA, name=names.DRIVER_NAME,
                              endpoint=self._endpoint,
                              supported_versions=list(names.SUPPORTED_DRA_SERVICES))

    async def NotifyRegistrationStatus(self, request: reg.RegistrationStatus,
                                       context: grpc.aio.ServicerContext[Any, Any]
                                       ) -> reg.RegistrationStatusResponse:
        self._state.calls += 1
        self._state.registered = request.plugin_registered
        self._state.error = request.error
        self._state.history.append((request.plugin_registered, request.error))
        if not request.plugin_registered:
            log.error("kubelet refused the plugin registration: %s", request.error)
            await context.abort(grpc.StatusCode.UNKNOWN,
                                f"failed registration process: {request.error}")
        log.info("registered with kubelet")
        return reg.RegistrationStatusResponse()


def _remove_stale(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


# The umask is process-wide: one lock for every swap, so that two servers bound at once
# (several agents in one test process) cannot restore each other's value.
_UMASK_LOCK = threading.Lock()


def _bind_private(server: grpc.aio.Server, socket: Path) -> None:
    """Bind `socket` for `server` with mode 0600 from its first instant; the caller then
    opens it to the group (0660). gRPC binds inside `add_insecure_port`, which is
    synchronous: the umask is changed for that call only, never across an await, so
    nothing else in the event loop creates files under it."""
    with _UMASK_LOCK:
        old = os.umask(0o177)
        try:
            server.add_insecure_port(f"unix://{socket}")
        finally:
            os.umask(old)


class KubeletServers:
    """Owns both gRPC servers and their socket files."""

    def __init__(self, driver: ClaimDriver, dra_socket: Path, registration_socket: Path
                 ) -> None:
        self.dra_socket = dra_socket
        self.registration_socket = registration_socket
        self.registration = RegistrationState()
        self._driver = driver
        self._dra: grpc.aio.Server | None = None
        self._reg: grpc.aio.Server | None = None

    async def start(self) -> None:
        for sock in (self.dra_socket, self.registration_socket):
            make_dirs(sock.parent, 0o750)
            _remove_stale(sock)
        v1_service = DraV1(self._driver)
        self._dra = grpc.aio.server()
        v1_grpc.add_DRAPluginServicer_to_server(v1_service, self._dra)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraV1beta1(v1_service), self._dra)
        _bind_private(self._dra, self.dra_socket)
        await self._dra.start()
        self.dra_socket.chmod(0o660)
        self._reg = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(
            Registration(self.dra_socket, self.registration), self._reg)
        _bind_private(self._reg, self.registration_socket)
        await self._reg.start()
        self.registration_socket.chmod(0o660)
        log.info("serving DRA on %s and registration on %s", self.dra_socket,
                 self.registration_socket)

    async def stop(self, grace: float = 2.0) -> None:
        # Registration first, so kubelet stops sending new work before the DRA socket goes.
        for server in (self._reg, self._dra):
            if server is not None:
                await server.stop(grace)
        for sock in (self.registration_socket, self.dra_socket):
            _remove_stale(sock)
