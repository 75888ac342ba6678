"""Serve a node's `NodeRuntime` as CRI v1 on a unix socket (grpc.aio).

Calls the runtime does not implement answer UNIMPLEMENTED, which the kubelet's CRI client
expects of optional ones (the streaming lists, container events, checkpoints, metrics);
a runtime error (`CriError`) becomes its gRPC status.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from sim.cri.runtime import CriError, NodeRuntime

log = logging.getLogger(__name__)


def _delegate(runtime: NodeRuntime, name: str) -> Any:
    method = getattr(runtime, name)

    @functools.wraps(method)
    async def call(_self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await method(request, context)
        except CriError as err:
            await context.abort(err.code, err.message)
        except Exception as err:  # a runtime bug: the kubelet sees it, the log has it all
            log.exception("CRI %s failed", name)
            await context.abort(grpc.StatusCode.INTERNAL, f"{name}: {type(err).__name__}: {err}")

    return call


def servicer(base: type, runtime: NodeRuntime) -> Any:
    """An instance of the generated servicer `base` answering with `runtime`'s methods."""
    overrides = {name: _delegate(runtime, name) for name in dir(base)
                 if not name.startswith("_") and hasattr(runtime, name)}
    return type(f"Node{base.__name__}", (base,), overrides)()


async def serve(runtime: NodeRuntime, grpc_module: ModuleType, socket: Path) -> grpc.aio.Server:
    """Start serving `runtime` at `socket` (removed first if a stale one is there)."""
    socket.parent.mkdir(parents=True, exist_ok=True)
    socket.unlink(missing_ok=True)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 16 << 20),
                                      ("grpc.max_send_message_length", 16 << 20)])
    grpc_module.add_RuntimeServiceServicer_to_server(
        servicer(grpc_module.RuntimeServiceServicer, runtime), server)
    grpc_module.add_ImageServiceServicer_to_server(
        servicer(grpc_module.ImageServiceServicer, runtime), server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    return server
