"""Standard gRPC health (`grpc.health.v1.Health/Check`) that exercises both kubelet sockets.

A liveness probe that only checks "the process is up" misses the failure that matters:
kubelet cannot reach the plugin. Each check makes the two calls kubelet makes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from api import names
from api.kubelet.dra.v1beta1 import api_pb2 as v1beta1
from api.kubelet.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from api.kubelet.pluginregistration import api_pb2 as reg
from api.kubelet.pluginregistration import api_pb2_grpc as reg_grpc
from runtime.listen import Setting, probe
from runtime.logsetup import vlog

log = logging.getLogger(__name__)
SERVICES = ("", "liveness")
PORT_SETTING = Setting("--healthcheck-port", names.ENV_HEALTHCHECK_PORT,
                       "kubeletPlugin.containers.computeDomains.healthcheckPort")


class PluginHealth(health_pb2_grpc.HealthServicer):
    def __init__(self, registration_socket: Path, dra_socket: Path, timeout: float = 5.0):
        self._reg = registration_socket
        self._dra = dra_socket
        self._timeout = timeout

    async def Check(self, request: health_pb2.HealthCheckRequest,
                    context: grpc.aio.ServicerContext[Any, Any]) -> health_pb2.HealthCheckResponse:
        if request.service not in SERVICES:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        serving: int = health_pb2.HealthCheckResponse.SERVING
        try:
            async with grpc.aio.insecure_channel(f"unix://{self._reg}") as channel:
                await reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest(),
                                                                 timeout=self._timeout)
            async with grpc.aio.insecure_channel(f"unix://{self._dra}") as channel:
                await v1beta1_grpc.DRAPluginStub(channel).NodePrepareResources(
                    v1beta1.NodePrepareResourcesRequest(), timeout=self._timeout)
        except grpc.aio.AioRpcError as err:
            log.warning("health check failed: %s %s", err.code(), err.details())
            serving = health_pb2.HealthCheckResponse.NOT_SERVING
        vlog(log, 7, "health check (service %r): %s", request.service,
             health_pb2.HealthCheckResponse.ServingStatus.Name(serving))
        return health_pb2.HealthCheckResponse(status=serving)


class HealthServer:
    def __init__(
        self, port: int, registration_socket: Path, dra_socket: Path, *, address: str = ""
    ) -> None:
        self._port = port
        self._address = address
        self._servicer = PluginHealth(registration_socket, dra_socket)
        self._server: grpc.aio.Server | None = None
        self.port = -1

    async def start(self) -> None:
        """Raises ListenError when the port is taken (gRPC's own bind error names no fix)."""
        if self._port > 0:
            probe(self._address, self._port, PORT_SETTING)
        # No SO_REUSEPORT: a second plugin on the same address and port is an error, not
        # a silent share of the probes.
        self._server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, self._server)
        host = self._address or "[::]"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        self.port = self._server.add_insecure_port(f"{host}:{self._port}")
        await self._server.start()
        log.info("gRPC health server on %s port %d", self._address or "every address", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(1.0)
