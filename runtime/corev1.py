"""The six core/v1 calls the driver makes, as plain JSON, without the generated CoreV1Api.

`kubernetes.client.CoreV1Api` is one generated module of about 2 MB of bytecode; loading it
costs a process about 20 MiB of resident memory, a fifth of the node agent's idle footprint
(tests/bench/bench_prepare.py), for five calls. These send the same requests through the same
`ApiClient` (its configuration, auth, TLS and connection pool) and raise the same
`ApiException` for a non-2xx answer, and hand back the JSON the rest of the driver reads.

The method names and argument order are CoreV1Api's, so a test fake of either fits.
Blocking calls, like the generated client's: run them through runtime/kubecall.py `call`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException

Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
# What the generated client sends for an object (not a list) patch of a built-in kind.
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


# The list and watch parameters runtime/informer.py and kubernetes.watch pass, as the
# API server spells them in the query.
_LIST_QUERY = {"field_selector": "fieldSelector", "label_selector": "labelSelector",
               "resource_version": "resourceVersion", "timeout_seconds": "timeoutSeconds",
               "allow_watch_bookmarks": "allowWatchBookmarks", "watch": "watch"}


class CoreV1:
    def __init__(self, api: client.ApiClient | None) -> None:
        self._api = api if api is not None else client.ApiClient()

    def list_node(self, *, _preload_content: bool = True, _request_timeout: float | None = None,
                  **params: Any) -> Any:
        """The node listing as JSON; with `_preload_content=False` (a watch through
        kubernetes.watch) the open HTTP response, whose lines are the watch events."""
        unknown = set(params) - set(_LIST_QUERY)
        if unknown:
            raise TypeError(f"list_node: unexpected parameters {sorted(unknown)}")
        query = [(_LIST_QUERY[k], _query_value(v)) for k, v in params.items() if v is not None]
        response = self._call("GET", "/api/v1/nodes", None, _request_timeout, query=query)
        if not _preload_content:
            return response.response
        return self._answer(response, "GET /api/v1/nodes")

    def read_node(self, name: str, *, _request_timeout: float | None = None) -> Obj:
        return self._send("GET", f"/api/v1/nodes/{_seg(name)}", None, _request_timeout)

    def patch_node(self, name: str, body: Obj, *, _content_type: str = STRATEGIC_MERGE_PATCH,
                   _request_timeout: float | None = None) -> Obj:
        return self._send("PATCH", f"/api/v1/nodes/{_seg(name)}", body, _request_timeout,
                          _content_type)

    def read_namespaced_pod(self, name: str, namespace: str, *,
                            _request_timeout: float | None = None) -> Obj:
        return self._send("GET", _namespaced("pods", namespace, name), None, _request_timeout)

    def patch_namespaced_pod(self, name: str, namespace: str, body: Obj, *,
                             _content_type: str = STRATEGIC_MERGE_PATCH,
                             _request_timeout: float | None = None) -> Obj:
        return self._send("PATCH", _namespaced("pods", namespace, name), body,
                          _request_timeout, _content_type)

    def create_namespaced_event(self, namespace: str, body: Obj, *,
                                _request_timeout: float | None = None) -> Obj:
        return self._send("POST", _namespaced("events", namespace), body, _request_timeout)

    def _send(self, method: str, path: str, body: Obj | None, timeout: float | None,
              content_type: str = "application/json") -> Obj:
        return self._answer(self._call(method, path, body, timeout, content_type=content_type),
                            f"{method} {path}")

    def _call(self, method: str, path: str, body: Obj | None, timeout: float | None, *,
              content_type: str = "application/json",
              query: list[tuple[str, str]] | None = None) -> Any:
        """The response, raising ApiException for a non-2xx answer (its body kept, so
        runtime/kubecall.py error_text can say the API server's reason)."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self._api.param_serialize(method=method, resource_path=path,
                                            query_params=query or None, header_params=headers,
                                            body=body, auth_settings=["BearerToken"])
        response = self._api.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            data = response.read()
            raise ApiException.from_response(http_resp=response, body=data.decode(errors="replace"),
                                             data=None)
        return response

    @staticmethod
    def _answer(response: Any, what: str) -> Obj:
        answer = orjson.loads(response.read() or b"{}")
        if not isinstance(answer, dict):
            raise ApiException(status=response.status, reason=f"{what}: the answer is not a "
                               "JSON object")
        return answer


def _query_value(value: Any) -> str:
    """Booleans as the API server reads them (the generated client sends `true`/`false`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _seg(value: str) -> str:
    """One path segment, percent-encoded as the generated client does."""
    return quote(value, safe="")


def _namespaced(plural: str, namespace: str, name: str = "") -> str:
    path = f"/api/v1/namespaces/{_seg(namespace)}/{plural}"
    return f"{path}/{_seg(name)}" if name else path
