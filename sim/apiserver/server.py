"""The HTTP front of the emulator: routing, write verbs, patches, discovery, auth.

List/watch streaming lives in `listwatch`, the `/_sim` control endpoints in `control`.

One aiohttp application on one event loop. Everything a request does to the store happens
synchronously on that loop, so requests are serialised exactly where the real server
serialises them (per object, through resourceVersions) and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from sim.apiserver import (
    discovery,
    errors,
    openapi,
    protobuf_bodies,
    serviceaccounts,
    table,
    versions,
)
from sim.apiserver.admission import FIELD_VALIDATION, Admission, AdmitOptions
from sim.apiserver.admission_policies import AdmissionPolicies
from sim.apiserver.authn import TokenAuthenticator, UserInfo
from sim.apiserver.control import Faults, Stats, control
from sim.apiserver.errors import ApiError
from sim.apiserver.gc import GarbageCollector
from sim.apiserver.kubeletproxy import KubeletProxy
from sim.apiserver.label_selectors import SelectorError
from sim.apiserver.lifecycle import DeleteOptions, Lifecycle
from sim.apiserver.listwatch import JSON, json_response, list_response, selected_by, watch_stream
from sim.apiserver.numbers import LONG_NUMBER, beyond_int64_as_float
from sim.apiserver.patch import (
    PatchError,
    PatchTestFailedError,
    apply_json_patch,
    apply_merge_patch,
)
from sim.apiserver.rbac import (
    RequestAttributes,
    authorize,
    default_cluster_roles_and_bindings,
    forbidden,
    verb_for,
)
from sim.apiserver.resources import ResourceInfo, ResourceRegistry, crd_resources, deleted_status
from sim.apiserver.store import (
    DELETED,
    Event,
    Obj,
    Store,
    clone,
)
from sim.apiserver.strategic_patch import STRATEGIC_MERGE_KINDS, apply_strategic_merge_patch
from sim.apiserver.tokenrequest import issue_token

log = logging.getLogger(__name__)
CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class Target:
    info: ResourceInfo
    namespace: str
    name: str
    subresource: str
    watch: bool


class ApiServer:
    """The emulator. `await start()` serves on host:port; state survives `stop()`/`start()`."""

    def __init__(
        self,
        *,
        history_window: int = 10_000,
        bookmark_interval_s: float = 5.0,
        watch_timeout_s: float = 1800.0,
        state_file: Path | None = None,
        authenticator: TokenAuthenticator | None = None,
        root_ca_pem: str = "",
        kubelet_client: tuple[str, str, str] | None = None,
        resource_versions: tuple[str, ...] = ("v1",),
    ) -> None:
        self.store = Store(history_window)
        # Published as the kube-root-ca.crt ConfigMap of every namespace (pods' in-cluster CA).
        self.root_ca_pem = root_ca_pem
        # pods/log and pods/exec, relayed to kubelets with (CA, client certificate, key).
        self.kubelets = KubeletProxy(self.store, kubelet_client)
        # resource.k8s.io as 1.32 (v1beta1), 1.33 (v1beta1, v1beta2) or 1.34+ (v1) serves it.
        self.registry = ResourceRegistry(versions.builtin_resources(resource_versions))
        self.faults = Faults()
        self.stats = Stats()
        self.authenticator = authenticator
        self._bookmark_interval = bookmark_interval_s
        self._watch_timeout = watch_timeout_s
        self._state_file = state_file
        self.admission = Admission(self.registry)
        self.policies = AdmissionPolicies(self.store)
        self.lifecycle = Lifecycle(
            self.store, self.admission.admit, self._namespace_exists, self.policies.validate
        )
        self.gc: GarbageCollector | None = None
        self._runner: web.AppRunner | None = None
        self._streams: set[web.StreamResponse] = set()
        self._save_handle: asyncio.TimerHandle | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self.tls_port = 0  # the HTTPS listener for in-cluster clients, when started with TLS
        if state_file is not None and state_file.exists():
            self.store.restore(orjson.loads(state_file.read_bytes()))
        self._load_crds()
        self.store.add_listener(self._on_event)
        if not self.store.count(("", "namespaces")):
            for ns in DEFAULT_NAMESPACES:
                self.lifecycle.create(
                    self.registry.lookup("", "v1", "namespaces"), "", {"metadata": {"name": ns}}
                )
        for ns in self.store.list(("", "namespaces")):
            self._ensure_default_account(ns["metadata"]["name"])
        if authenticator is not None:
            self._install_default_rbac()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- lifecycle -------------------------------------------------------------------

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
        tls_port: int = 0,
    ) -> None:
        """Serve plain HTTP on host:port (the admin's insecure localhost port) and, given
        `tls`, HTTPS on `tls_port` too: what pods reach as the `kubernetes` Service."""
        self.gc = GarbageCollector(self.store, self.lifecycle, self.registry.by_key)
        self.gc.start()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port or self.port, reuse_address=True)
        await site.start()
        sockets = site._server.sockets  # type: ignore[union-attr]
        self.host, self.port = sockets[0].getsockname()[:2]
        if tls is not None:
            secure = web.TCPSite(
                self._runner, host, tls_port or self.tls_port, ssl_context=tls, reuse_address=True
            )
            await secure.start()
            self.tls_port = secure._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        self.store.close_watches()
        for stream in list(self._streams):
            with contextlib.suppress(Exception):
                await stream.write_eof()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.gc is not None:
            await self.gc.stop()
        self.save_state()

    def save_state(self) -> None:
        if self._state_file is None:
            return
        tmp = self._state_file.with_name(f".{self._state_file.name}.tmp")
        tmp.write_bytes(orjson.dumps(self.store.snapshot()))
        tmp.replace(self._state_file)

    def _on_event(self, event: Event) -> None:
        if event.key == CRD_KEY:
            self._sync_crd(event)
        if self._state_file is not None and self._save_handle is None:
            loop = asyncio.get_event_loop()
            self._save_handle = loop.call_later(0.2, self._deferred_save)

    def _deferred_save(self) -> None:
        self._save_handle = None
        self.save_state()

    def _load_crds(self) -> None:
        for crd in self.store.list(CRD_KEY):
            self.registry.set_crd(crd["metadata"]["name"], crd_resources(crd))
            self.admission.set_crd(crd)

    def _sync_crd(self, event: Event) -> None:
        name = event.obj["metadata"]["name"]
        if event.type == DELETED:
            for info in self.registry.remove_crd(name):
                self.store.drop_resource(info.key)
            self.admission.remove_crd(name)
            return
        self.registry.set_crd(name, crd_resources(event.obj))
        self.admission.set_crd(event.obj)
        conditions = (event.obj.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Established" for c in conditions):
            asyncio.get_event_loop().call_soon(self._establish, name)

    def _establish(self, name: str) -> None:
        current = self.store.get(CRD_KEY, "", name)
        if current is None:
            return
        new = clone(current)
        spec = new.get("spec") or {}
        accepted = {
            "plural": spec.get("names", {}).get("plural"),
            "singular": spec.get("names", {}).get("singular"),
            "kind": spec.get("names", {}).get("kind"),
            "listKind": spec.get("names", {}).get("listKind"),
        }
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        new["status"] = {
            "acceptedNames": {k: v for k, v in accepted.items() if v},
            "storedVersions": [v["name"] for v in spec.get("versions", []) if v.get("storage")],
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": stamp,
                },
            ],
        }
        self.store.put(CRD_KEY, new)

    def _ensure_default_account(self, namespace: str) -> None:
        """kube-controller-manager's ServiceAccount controller and root CA publisher: every
        namespace has its `default` ServiceAccount (pods that name none use it) and the
        kube-root-ca.crt ConfigMap (the CA of a pod's projected kube-api-access volume)."""
        key = ("", "serviceaccounts")
        if self.store.get(key, namespace, serviceaccounts.DEFAULT) is None:
            info = self.registry.lookup("", "v1", "serviceaccounts")
            assert info is not None
            self.lifecycle.create(info, namespace, serviceaccounts.default_account(namespace))
        ca_map = self.store.get(("", "configmaps"), namespace, serviceaccounts.ROOT_CA_CONFIGMAP)
        if self.root_ca_pem and ca_map is None:
            info = self.registry.lookup("", "v1", "configmaps")
            assert info is not None
            self.lifecycle.create(
                info, namespace, serviceaccounts.root_ca_configmap(namespace, self.root_ca_pem)
            )

    def _namespace_exists(self, name: str) -> bool:
        ns = self.store.get(("", "namespaces"), "", name)
        return ns is not None

    def _install_default_rbac(self) -> None:
        for obj in default_cluster_roles_and_bindings():
            info = self.registry.by_kind("rbac.authorization.k8s.io", obj["kind"])
            if info and self.store.get(info.key, "", obj["metadata"]["name"]) is None:
                self.lifecycle.create(info, "", obj)

    # --- request entry -----------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._dispatch(request)
        except ApiError as err:
            return self._error(err)
        except (SelectorError, PatchError) as err:
            return self._error(errors.bad_request(str(err)))
        except Exception as err:
            log.exception("request %s %s failed", request.method, request.path)
            return self._error(errors.internal(str(err)))

    @staticmethod
    def _error(err: ApiError) -> web.Response:
        headers = {}
        if err.retry_after_seconds is not None:
            headers["Retry-After"] = str(err.retry_after_seconds)
        return web.Response(
            status=err.code,
            body=orjson.dumps(err.status_object()),
            content_type=JSON,
            headers=headers,
        )

    @staticmethod
    def _json(obj: Any, status: int = 200) -> web.Response:
        return json_response(obj, status)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        if parts and parts[0] == "_sim":
            return await self._control(request, parts[1:])
        user = self._authenticate(request)
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/version":
            self._authorize_path(user, path)
            return self._json(discovery.SERVER_VERSION)
        if path == "/openapi/v2":
            self._authorize_path(user, path)
            return web.Response(body=b"", content_type=openapi.V2_PROTOBUF)
        if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
            self._authorize_path(user, path)
            doc = openapi.document(self.registry, path)
            if doc is None:
                raise errors.ApiError(
                    404, "NotFound", "the server could not find the requested resource"
                )
            return self._json(doc)
        target = self._discovery_or_target(request, parts, user)
        if isinstance(target, web.StreamResponse):
            return target
        await self._inject_faults()
        self._authorize_resource(request, user, target)
        return await self._serve(request, target, user)

    def _discovery_or_target(
        self, request: web.Request, parts: list[str], user: UserInfo | None
    ) -> Target | web.StreamResponse:
        not_found = errors.ApiError(
            404, "NotFound", "the server could not find the requested resource"
        )
        if parts == ["api"]:
            self._authorize_path(user, "/api")
            return self._json(discovery.api_versions(f"{self.host}:{self.port}"))
        if parts == ["apis"]:
            self._authorize_path(user, "/apis")
            return self._json(discovery.api_group_list(self.registry))
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 2 and parts[0] == "apis":
            if len(parts) == 2:
                self._authorize_path(user, request.path)
                doc = discovery.api_group(self.registry, parts[1])
                if doc is None:
                    raise not_found
                return self._json(doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise not_found
        if not rest:
            self._authorize_path(user, request.path)
            doc = discovery.resource_list(self.registry, group, version)
            if doc is None:
                raise not_found
            return self._json(doc)
        watch = False
        if rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        info = self.registry.lookup(group, version, plural)
        if info is None or len(rest) > 3:
            raise not_found
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if (
            sub
            and not (sub == "status" and info.status_subresource)
            and not (sub == "finalize" and info.kind == "Namespace")
            and not (sub in ("binding", "log", "exec") and info.kind == "Pod" and info.builtin)
            and not (sub == "token" and info.kind == "ServiceAccount" and info.builtin)
        ):
            raise not_found
        if info.namespaced and not namespace and name:
            raise not_found
        if not info.namespaced and namespace:
            raise not_found
        return Target(info, namespace, name, sub, watch)

    # --- auth & faults -----------------------------------------------------------------

    def _authenticate(self, request: web.Request) -> UserInfo | None:
        if self.authenticator is None:
            return None
        return self.authenticator.authenticate(request.headers.get("Authorization"))

    def _rbac_objects(self) -> dict[str, list[Obj]]:
        group = "rbac.authorization.k8s.io"
        return {
            "roles": self.store.list((group, "roles")),
            "cluster_roles": self.store.list((group, "clusterroles")),
            "role_bindings": self.store.list((group, "rolebindings")),
            "cluster_role_bindings": self.store.list((group, "clusterrolebindings")),
        }

    def _authorize_path(self, user: UserInfo | None, path: str) -> None:
        if user is None:
            return
        attrs = RequestAttributes(
            user=user,
            verb="get",
            api_group="",
            resource="",
            subresource="",
            namespace="",
            name="",
            resource_request=False,
            path=path,
        )
        decision = authorize(attrs, **self._rbac_objects())
        if not decision.allowed:
            raise forbidden(attrs, decision.reason)

    def _authorize_resource(self, request: web.Request, user: UserInfo | None, t: Target) -> None:
        if user is None:
            return
        watch = t.watch or request.query.get("watch") in ("true", "1")
        verb = verb_for(request.method, has_name=bool(t.name), watch=watch)
        if t.subresource == "exec":  # a WebSocket exec is a GET, authorized as create
            verb = "create"
        attrs = RequestAttributes(
            user=user,
            verb=verb,
            api_group=t.info.group,
            resource=t.info.plural,
            subresource=t.subresource,
            namespace=t.namespace,
            name=t.name,
            resource_request=True,
            path=request.path,
        )
        decision = authorize(attrs, **self._rbac_objects())
        if not decision.allowed:
            raise forbidden(attrs, decision.reason)

    async def _inject_faults(self) -> None:
        faults = self.faults
        if faults.latency_s > 0:
            await asyncio.sleep(faults.latency_s)
        if faults.error_rate > 0 and faults.rng.random() < faults.error_rate:
            if faults.error_code == 429:
                raise errors.too_many_requests(1)
            raise errors.internal("injected fault")

    # --- resource verbs ----------------------------------------------------------------

    async def _serve(
        self, request: web.Request, t: Target, user: UserInfo | None = None
    ) -> web.StreamResponse:
        method, q = request.method, request.query
        who = user.name if user is not None else ""
        dry_run = "All" in q.getall("dryRun", [])
        if t.subresource == "log" and method == "GET":
            self.stats.count("get", who)
            return await self.kubelets.logs(request, t.namespace, t.name)
        if t.subresource == "exec" and method in ("GET", "POST"):
            self.stats.count("create", who)
            return await self.kubelets.exec(request, t.namespace, t.name)
        if method == "GET":
            if t.name and not t.watch:
                self.stats.count("get", who)
                return self._respond_object(request, t.info, self._get(t))
            if t.watch or q.get("watch") in ("true", "1"):
                self.stats.count("watch", who)
                return await watch_stream(
                    request,
                    t,
                    store=self.store,
                    streams=self._streams,
                    watch_timeout=self._watch_timeout,
                    bookmark_interval=lambda: self._bookmark_interval,
                    sent=lambda events, nbytes: self.stats.watched(who, events, nbytes),
                )
            self.stats.count("list", who)
            return list_response(request, t, self.store)
        body = await self._body(request) if method in ("POST", "PUT", "PATCH", "DELETE") else None
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            resource = f"{t.info.plural}/{t.subresource}" if t.subresource else t.info.plural
            self.stats.write(who, method, resource)
        if t.info.kind == "Event" and not t.subresource:
            self.stats.event_write(who)
        directive = q.get("fieldValidation", "Warn") or "Warn"
        if directive not in FIELD_VALIDATION:
            raise errors.bad_request(
                f"fieldValidation must be one of {', '.join(FIELD_VALIDATION)}, got {directive!r}"
            )
        opts = AdmitOptions(field_validation=directive, user=user)
        # A resource served in a version it is not stored in: the body is decoded in the
        # served version, then converted; answers are converted back in _respond_object.
        if versions.converted(t.info) and method in ("POST", "PUT"):
            body = self.admission.decode_served(t.info, body, opts)
        info = versions.storage_info(t.info)
        if method == "POST" and not t.name:
            self.stats.count("create", who)
            created = self.lifecycle.create(info, t.namespace, body, dry_run=dry_run, opts=opts)
            if t.info.builtin and t.info.kind == "Namespace" and not dry_run:
                self._ensure_default_account(created["metadata"]["name"])
            return self._respond_object(request, t.info, created, 201, opts.warnings)
        if method == "POST" and t.subresource == "token":
            self.stats.count("create", who)
            issued = issue_token(self.store, self.authenticator, t.namespace, t.name, body)
            return self._json(issued, 201)
        if method == "POST" and t.subresource == "binding":
            self.stats.count("create", who)
            bound = self._counting_conflicts(lambda: self._bind(t, body), who)
            return self._json(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "code": 201,
                    "details": {"name": bound["metadata"]["name"], "kind": "pods"},
                },
                201,
            )
        if method == "PUT" and t.name:
            self.stats.count("update", who)
            updated = self._counting_conflicts(
                lambda: self.lifecycle.update(
                    info,
                    t.namespace,
                    t.name,
                    body,
                    subresource=t.subresource,
                    dry_run=dry_run,
                    opts=opts,
                ),
                who,
            )
            return self._respond_object(request, t.info, updated, 200, opts.warnings)
        if method == "PATCH" and t.name:
            self.stats.count("patch", who)
            patched = self._counting_conflicts(
                lambda: self._patch(request, t, body, dry_run, opts), who
            )
            return self._respond_object(request, t.info, patched, 200, opts.warnings)
        if method == "DELETE" and t.name:
            self.stats.count("delete", who)
            delete_opts = dataclasses.replace(
                self._delete_options(request, body if isinstance(body, dict) else None),
                user=user,
            )
            obj, gone = self.lifecycle.delete(info, t.namespace, t.name, delete_opts)
            if gone and not t.info.returns_deleted:
                return self._json(deleted_status(t.info, obj))
            return self._respond_object(request, t.info, obj)
        if method == "DELETE":
            self.stats.count("deletecollection", who)
            return self._delete_collection(request, t)
        raise errors.ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    def _counting_conflicts(self, fn: Callable[[], Obj], who: str = "") -> Obj:
        try:
            return fn()
        except ApiError as err:
            if err.code == 409 or err.lost_race:
                self.stats.conflict(who)
            raise

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        ctype = request.content_type
        if ctype == protobuf_bodies.PROTOBUF:
            # kubectl's create generators; answers stay JSON, which client-go accepts.
            return protobuf_bodies.decode_body(raw)
        if "protobuf" in ctype or "cbor" in ctype:
            raise errors.ApiError(
                415,
                "UnsupportedMediaType",
                f"the emulator accepts JSON and Kubernetes protobuf bodies, not {ctype} "
                "(kubectl: use `create -f` with a manifest)",
            )
        if ctype.endswith("yaml"):
            import yaml  # only apply-patch bodies are YAML

            try:
                return beyond_int64_as_float(yaml.safe_load(raw))
            except yaml.YAMLError as err:
                raise errors.bad_request(f"invalid YAML body: {err}") from None
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            raise errors.bad_request(f"invalid JSON body: {err}") from None
        return beyond_int64_as_float(body) if LONG_NUMBER.search(raw) else body

    def _get(self, t: Target) -> Obj:
        obj = self.store.get(t.info.key, t.namespace, t.name)
        if obj is None:
            raise errors.not_found(t.info.group, t.info.plural, t.name)
        return obj

    def _respond_object(
        self,
        request: web.Request,
        info: ResourceInfo,
        obj: Obj,
        status: int = 200,
        warnings: list[str] | None = None,
    ) -> web.Response:
        if table.wants_table(request.headers.get("Accept", "")):
            rv = obj.get("metadata", {}).get("resourceVersion", "")
            include = table.include_object(request.query)
            response = self._json(
                table.table(info, [obj], {"resourceVersion": rv}, include=include), status
            )
        else:
            response = self._json(versions.from_storage(info, obj), status)
        for warning in warnings or ():
            escaped = warning.replace("\\", "\\\\").replace('"', '\\"')
            response.headers.add("Warning", f'299 - "{escaped}"')
        return response

    def _patch(
        self, request: web.Request, t: Target, body: Any, dry_run: bool, opts: AdmitOptions
    ) -> Obj:
        ctype = request.content_type
        current = versions.from_storage(t.info, self._get(t))
        if ctype == "application/merge-patch+json":
            patched = apply_merge_patch(current, body)
        elif ctype == "application/json-patch+json":
            try:
                patched = apply_json_patch(current, body)
            except PatchError as err:
                lost = isinstance(err, PatchTestFailedError)
                raise errors.ApiError(422, "Invalid", str(err), lost_race=lost) from None
        elif ctype == "application/strategic-merge-patch+json":
            if (t.info.group, t.info.kind) not in STRATEGIC_MERGE_KINDS or not t.info.builtin:
                raise errors.unsupported_media_type(builtin=t.info.builtin)
            patched = apply_strategic_merge_patch(current, body, t.info.kind, t.info.group)
        else:
            raise errors.unsupported_media_type(builtin=t.info.builtin)
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch must produce a JSON object")
        if versions.converted(t.info):
            patched = self.admission.decode_served(t.info, patched, opts)
        # The patched object carries the current resourceVersion, unless the patch itself
        # sets one: then update() checks it as a precondition, as the real server does.
        return self.lifecycle.update(
            versions.storage_info(t.info),
            t.namespace,
            t.name,
            patched,
            subresource=t.subresource,
            dry_run=dry_run,
            opts=opts,
        )

    def _bind(self, t: Target, body: Any) -> Obj:
        """`pods/binding`: how a scheduler sets `spec.nodeName`, once (the real rule)."""
        target = (body or {}).get("target") if isinstance(body, dict) else None
        node = (target or {}).get("name") if isinstance(target, dict) else None
        if not node or (target or {}).get("kind", "Node") != "Node":
            raise errors.invalid(
                "",
                "Binding",
                t.name,
                [errors.Cause("target.name", "FieldValueRequired", "Required value")],
            )
        current = self._get(t)
        assigned = (current.get("spec") or {}).get("nodeName")
        if assigned:
            raise errors.conflict(
                "", "pods", t.name, f'pod {t.name} is already assigned to node "{assigned}"'
            )
        if current["metadata"].get("deletionTimestamp"):
            raise errors.conflict("", "pods", t.name, "pod is being deleted")
        bound = clone(current)
        bound.setdefault("spec", {})["nodeName"] = node
        return self.lifecycle.replace_stored(t.info, current, bound)

    @staticmethod
    def _delete_options(request: web.Request, body: dict[str, Any] | None) -> DeleteOptions:
        body = body or {}
        q = request.query
        pre = body.get("preconditions") or {}
        grace = body.get("gracePeriodSeconds", q.get("gracePeriodSeconds"))
        policy = body.get("propagationPolicy", q.get("propagationPolicy"))
        if body.get("orphanDependents") is True or q.get("orphanDependents") == "true":
            policy = policy or "Orphan"
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise errors.bad_request(
                f"unsupported propagationPolicy {policy!r}: use Orphan, Background or Foreground"
            )
        try:
            grace_int = None if grace is None else int(grace)
        except (TypeError, ValueError):
            raise errors.bad_request(f"invalid gracePeriodSeconds {grace!r}") from None
        return DeleteOptions(
            propagation=policy,
            grace_period=grace_int,
            uid=pre.get("uid"),
            resource_version=pre.get("resourceVersion"),
            dry_run="All" in (body.get("dryRun") or q.getall("dryRun", [])),
        )

    def _delete_collection(self, request: web.Request, t: Target) -> web.Response:
        selected = selected_by(request, t)
        opts = self._delete_options(request, None)
        deleted = []
        for obj in list(self.store.list(t.info.key, t.namespace or None)):
            if selected(obj):
                md = obj["metadata"]
                gone, _ = self.lifecycle.delete(
                    versions.storage_info(t.info), md.get("namespace", ""), md["name"], opts
                )
                deleted.append(versions.from_storage(t.info, gone))
        return self._json(
            {
                "kind": t.info.list_kind,
                "apiVersion": t.info.api_version,
                "metadata": {"resourceVersion": str(self.store.resource_version)},
                "items": deleted,
            }
        )

    # --- control endpoints (stand-alone fault injection) -------------------------------

    async def _control(self, request: web.Request, parts: list[str]) -> web.Response:
        body = await self._body(request) if request.method == "POST" else None
        return control(request, parts, body, faults=self.faults, stats=self.stats, store=self.store)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
