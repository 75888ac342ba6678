"""The DRA half of a simulated kubelet: plugin registration, prepare/unprepare.

It speaks the same gRPC contract over the same unix sockets as the real kubelet (plugin
registration and the DRA v1/v1beta1 node services of api/kubelet/pluginregistration/ and
api/kubelet/dra/; kubelet's side is
https://github.com/kubernetes/kubernetes/tree/master/pkg/kubelet/cm/dra), so the real agent
can be driven unchanged: `PluginWatcher` plays kubelet's plugin watcher on the registration
directory, `DraClient` plays the DRA manager's NodePrepareResources/NodeUnprepareResources
calls with kubelet's error handling. What a container then gets from the CDI IDs is
`containerview.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import grpc.aio

from api.kubelet.dra.v1 import api_pb2 as dra_v1
from api.kubelet.dra.v1 import api_pb2_grpc as dra_v1_grpc
from api.kubelet.dra.v1beta1 import api_pb2 as dra_v1beta1
from api.kubelet.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from api.kubelet.pluginregistration import api_pb2 as reg
from api.kubelet.pluginregistration import api_pb2_grpc as reg_grpc

DRA_PLUGIN_TYPE = "DRAPlugin"
V1 = "v1.DRAPlugin"
V1BETA1 = "v1beta1.DRAPlugin"
# Newest first: kubelet picks the first of these that the plugin offers.
SUPPORTED_VERSIONS = (V1, V1BETA1)
# kubelet's defaultClientCallTimeout for DRA calls.
CALL_TIMEOUT = 45.0
# Registration calls are quick local handshakes; kubelet bounds them too.
REGISTRATION_TIMEOUT = 10.0
# A registration directory changed this recently is looked at whatever its mtime says.
SETTLED_NS = 1_000_000_000


def _stubs(version: str) -> tuple[ModuleType, ModuleType]:
    """The message and stub modules of a negotiated DRA service version."""
    if version == V1:
        return dra_v1, dra_v1_grpc
    if version == V1BETA1:
        return dra_v1beta1, dra_v1beta1_grpc
    raise KeyError(version)


def _unix_target(path: str | Path) -> str:
    return f"unix://{path}"


# --------------------------------------------------------------------------------------
# Registration


@dataclass(frozen=True)
class RegisteredPlugin:
    """A DRA driver kubelet accepted: where to call it and which service version to use."""

    name: str
    endpoint: Path
    version: str
    socket: Path = field(default=Path(), compare=False)


class RegistrationError(Exception):
    """A plugin's GetInfo answer that kubelet would refuse; the text goes back to it."""


def choose_version(offered: Iterable[str]) -> str:
    """The newest DRA service version both sides support, as kubelet negotiates it."""
    offered = list(offered)
    for version in SUPPORTED_VERSIONS:
        if version in offered:
            return version
    raise RegistrationError(
        f"none of the versions {offered} are supported, supported versions: "
        f"{list(SUPPORTED_VERSIONS)}"
    )


def validate_info(info: reg.PluginInfo, host_root: Path | None = None) -> RegisteredPlugin:
    """Check a GetInfo answer the way kubelet's DRA handler does before accepting it.
    The endpoint is a path of the node; under `host_root` when the node has its own "/"
    (a plugin running in a container names the path it sees, which is the node's)."""
    if info.type != DRA_PLUGIN_TYPE:
        raise RegistrationError(f"no handler registered for plugin type: {info.type!r}")
    if not info.name:
        raise RegistrationError("plugin name is empty")
    if not info.endpoint:
        raise RegistrationError(f"plugin {info.name}: endpoint is empty")
    endpoint = Path(info.endpoint)
    if host_root is not None and endpoint.is_absolute() and not endpoint.is_relative_to(host_root):
        endpoint = host_root / info.endpoint.lstrip("/")
    if not endpoint.is_absolute() or not endpoint.exists():
        raise RegistrationError(f"plugin {info.name}: endpoint {info.endpoint} does not exist")
    version = choose_version(info.supported_versions)
    return RegisteredPlugin(info.name, endpoint, version)


def _socket_identity(path: Path) -> tuple[int, int, int] | None:
    """Identifies one incarnation of a socket file, so a re-created one is handled anew."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


class PluginWatcher:
    """kubelet's plugin watcher for DRA drivers, polling the registration directory.

    Each new `*.sock` is dialled, asked for GetInfo, validated and told the outcome with
    NotifyRegistrationStatus. A socket that cannot be reached yet is retried on the next
    poll (the plugin may still be starting); one that was refused is not asked again
    until its file is replaced. A plugin is deregistered when its socket disappears.

    `on_registered` / `on_deregistered` get the driver name whenever a driver gains or
    loses its registration, so the kubelet can act on it as kubelet's DRA handler does
    (wipe the driver's ResourceSlices a while after it went away, unless it came back).
    """

    def __init__(
        self,
        registry_dir: Path,
        poll: float = 0.2,
        *,
        on_registered: Callable[[str], None] | None = None,
        on_deregistered: Callable[[str], None] | None = None,
        host_root: Path | None = None,
    ) -> None:
        self.registry_dir = Path(registry_dir)
        self.host_root = host_root
        self.poll = poll
        self.on_registered = on_registered
        self.on_deregistered = on_deregistered
        self.plugins: dict[str, RegisteredPlugin] = {}
        # Registration socket -> why it was refused (for tests and status reporting).
        self.refused: dict[Path, str] = {}
        self._seen: dict[Path, tuple[int, int, int]] = {}
        self._dir_mtime: int | None = None  # the directory's, at the last look (`_quiet`)
        self._pending = False  # a socket was there that did not answer yet
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Scan once right away, then keep polling in the background."""
        await self.scan()
        self._task = asyncio.create_task(self._run(), name="plugin-watcher")

    async def stop(self) -> None:
        """Stop polling; registered plugins stay as they are (kubelet would be gone)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def __aenter__(self) -> PluginWatcher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.poll)
            if not self._quiet():
                await self.scan()

    def _quiet(self) -> bool:
        """Nothing to look at: the directory is as at the last look (its mtime, which
        every socket's creation, replacement and removal changes), that is a while ago
        (an mtime is only as fine as the kernel's clock tick: two changes in one tick,
        around a look, would share it), and every socket seen then was registered.
        A rack's kubelets poll five times a second each: a glob and a stat of each
        socket every time was most of what an idle simulated node cost
        (tests/bench/bench_bringup.py)."""
        try:
            mtime: int | None = self.registry_dir.stat().st_mtime_ns
        except OSError:
            mtime = None
        settled = mtime is None or time.time_ns() - mtime > SETTLED_NS
        if mtime == self._dir_mtime and settled and not self._pending:
            return True
        self._dir_mtime = mtime
        return False

    async def scan(self) -> None:
        """One pass over the directory: register new sockets, deregister vanished ones."""
        present: dict[Path, tuple[int, int, int]] = {}
        if self.registry_dir.is_dir():
            for path in sorted(self.registry_dir.glob("*.sock")):
                identity = _socket_identity(path)
                if identity is not None:
                    present[path] = identity
        for path in list(self._seen):
            if present.get(path) != self._seen[path]:
                self._forget(path)
        for path, identity in present.items():
            if path not in self._seen and await self._register(path):
                self._seen[path] = identity
        self._pending = any(path not in self._seen for path in present)
        async with self._changed:
            self._changed.notify_all()

    def _forget(self, path: Path) -> None:
        del self._seen[path]
        self.refused.pop(path, None)
        for name, plugin in list(self.plugins.items()):
            if plugin.socket == path:
                del self.plugins[name]
                if self.on_deregistered is not None:
                    self.on_deregistered(name)

    async def _register(self, path: Path) -> bool:
        """Run the handshake on one socket; False means "try again on the next poll"."""
        async with grpc.aio.insecure_channel(_unix_target(path)) as channel:
            stub = reg_grpc.RegistrationStub(channel)
            try:
                info = await stub.GetInfo(reg.InfoRequest(), timeout=REGISTRATION_TIMEOUT)
            except grpc.aio.AioRpcError:
                return False
            try:
                plugin = validate_info(info, self.host_root)
            except RegistrationError as err:
                self.refused[path] = str(err)
                await self._notify(stub, False, str(err))
                return True
            plugin = RegisteredPlugin(plugin.name, plugin.endpoint, plugin.version, path)
            # A later registration of the same driver replaces the earlier one.
            self.plugins[plugin.name] = plugin
            self.refused.pop(path, None)
            if self.on_registered is not None:
                self.on_registered(plugin.name)
            await self._notify(stub, True, "")
            return True

    @staticmethod
    async def _notify(stub: reg_grpc.RegistrationStub, registered: bool, error: str) -> None:
        # The helper library answers a refusal with an error by design; kubelet only logs
        # notification failures, so they do not change the outcome here either.
        with contextlib.suppress(grpc.aio.AioRpcError):
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=registered, error=error),
                timeout=REGISTRATION_TIMEOUT,
            )

    async def _wait_for(self, check: Any, timeout: float, what: str) -> Any:
        async def waiter() -> Any:
            async with self._changed:
                await self._changed.wait_for(check)
                return check()

        try:
            async with asyncio.timeout(timeout):
                return await waiter()
        except TimeoutError:
            raise TimeoutError(f"{what} within {timeout}s") from None

    async def wait_registered(self, name: str, timeout: float = 10.0) -> RegisteredPlugin:
        """The registration of driver `name`, once the watcher has accepted it."""
        plugin: RegisteredPlugin = await self._wait_for(
            lambda: self.plugins.get(name),
            timeout,
            f"plugin {name} not registered (refused: {self.refused})",
        )
        return plugin

    async def wait_deregistered(self, name: str, timeout: float = 10.0) -> None:
        """Return once driver `name` is no longer registered."""
        await self._wait_for(
            lambda: name not in self.plugins, timeout, f"plugin {name} still registered"
        )

    async def wait_refused(self, socket: Path, timeout: float = 10.0) -> str:
        """Why the registration on `socket` was refused, once it has been."""
        reason: str = await self._wait_for(
            lambda: self.refused.get(Path(socket)), timeout, f"{socket} not refused"
        )
        return reason


# --------------------------------------------------------------------------------------
# NodePrepareResources / NodeUnprepareResources


@dataclass(frozen=True)
class ClaimRef:
    """The claim identity kubelet sends: the plugin fetches the claim itself."""

    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, claim: dict[str, Any]) -> ClaimRef:
        """From a ResourceClaim object (as a JSON-like dict)."""
        md = claim["metadata"]
        return cls(md["namespace"], md["name"], md["uid"])


@dataclass(frozen=True)
class PreparedDevice:
    """One device of a prepared claim; empty `request_names` means every request."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None

    def applies_to(self, request: str) -> bool:
        return not self.request_names or request in self.request_names


@dataclass(frozen=True)
class PreparedClaim:
    """A claim the plugin prepared, with what kubelet hands the runtime per request."""

    claim: ClaimRef
    devices: tuple[PreparedDevice, ...]

    def cdi_ids(self, request: str | None = None) -> list[str]:
        """CDI IDs for a container using `request` (None: the whole claim), in order."""
        out: list[str] = []
        for device in self.devices:
            if request is None or device.applies_to(request):
                out.extend(i for i in device.cdi_ids if i not in out)
        return out


class DraError(Exception):
    """A failed DRA call, with kubelet's message; pod setup fails and is retried later."""

    def __init__(
        self, message: str, *, code: grpc.StatusCode | None = None, claim: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.claim = claim


class DraClient:
    """kubelet's DRA manager calls, over the plugin's unix socket, one channel per call.

    A fresh channel per call keeps no state across plugin restarts, like kubelet's
    reconnecting client; the negotiated version decides which service is called.
    """

    def __init__(self, timeout: float = CALL_TIMEOUT) -> None:
        self.timeout = timeout

    async def prepare(
        self, plugin: RegisteredPlugin, claims: Sequence[ClaimRef]
    ) -> dict[str, PreparedClaim]:
        """NodePrepareResources for `claims`: every one prepared, or DraError."""
        if not claims:
            return {}
        response = await self._call(plugin, "NodePrepareResources", claims)
        by_uid = self._check(response, claims, "NodePrepareResources")
        return {
            uid: PreparedClaim(
                by_uid[uid],
                tuple(
                    PreparedDevice(
                        request_names=tuple(d.request_names),
                        pool=d.pool_name,
                        device=d.device_name,
                        cdi_ids=tuple(d.cdi_device_ids),
                        share_id=(
                            d.share_id
                            if "share_id" in d.DESCRIPTOR.fields_by_name and d.HasField("share_id")
                            else None
                        ),
                    )
                    for d in result.devices
                ),
            )
            for uid, result in response.claims.items()
        }

    async def unprepare(self, plugin: RegisteredPlugin, claims: Sequence[ClaimRef]) -> None:
        """NodeUnprepareResources for `claims`: every one released, or DraError."""
        if not claims:
            return
        response = await self._call(plugin, "NodeUnprepareResources", claims)
        self._check(response, claims, "NodeUnprepareResources")

    async def _call(self, plugin: RegisteredPlugin, rpc: str, claims: Sequence[ClaimRef]) -> Any:
        try:
            pb, pb_grpc = _stubs(plugin.version)
        except KeyError:
            raise DraError(f"{rpc}: unsupported plugin version {plugin.version!r}") from None
        request = getattr(pb, f"{rpc}Request")(
            claims=[pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
        )
        async with grpc.aio.insecure_channel(_unix_target(plugin.endpoint)) as channel:
            method = getattr(pb_grpc.DRAPluginStub(channel), rpc)
            try:
                return await method(request, timeout=self.timeout)
            except grpc.aio.AioRpcError as err:
                code = err.code()
                raise DraError(
                    f"{rpc}: rpc error: code = {code.name} desc = {err.details()}", code=code
                ) from err

    @staticmethod
    def _check(response: Any, claims: Sequence[ClaimRef], rpc: str) -> dict[str, ClaimRef]:
        """kubelet's checks, in its order: unknown UIDs, per-claim errors, missing claims."""
        by_uid = {c.uid: c for c in claims}
        for uid in response.claims:
            if uid not in by_uid:
                raise DraError(f"{rpc} returned result for unknown claim UID {uid}")
        for uid, result in response.claims.items():
            if result.error:
                name = by_uid[uid].name
                raise DraError(f"{rpc} failed for ResourceClaim {name}: {result.error}", claim=name)
        skipped = len(by_uid) - len(response.claims)
        if skipped:
            raise DraError(f"{rpc} skipped {skipped} ResourceClaims")
        return by_uid
