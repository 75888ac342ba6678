"""Read-only access to the API for `diagnose`: plain JSON GETs by path.

Raw paths instead of the typed client: diagnose must read whatever the server holds
(objects written by other versions, fields the client's models do not know) without a
deserialisation failure hiding the evidence. Every request is a GET; nothing here can
write. A refused or failed read is kept (`errors`) and shown as evidence, because "I could
not look" must never read as "there is nothing there".
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from runtime.kubecall import error_text

Obj = dict[str, Any]
_TIMEOUT_S = 20.0


class ReadError(Exception):
    """The API could not be reached at all (wrong kubeconfig, server down)."""


class Reader:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self.errors: dict[str, str] = {}  # path -> why it could not be read

    def _get(self, path: str, query: dict[str, str] | None = None) -> Obj | None:
        """The object at `path`; None if it does not exist or could not be read."""
        try:
            status, data = self._send(path, list((query or {}).items()))
        except ApiException as err:  # older clients raise for every non-2xx answer
            status, data = err.status or 0, None
            if status != 404:
                self.errors[path] = error_text(err)
                return None
        except Exception as err:  # connection refused, DNS, TLS: nothing else will work
            raise ReadError(f"cannot reach the API server: {error_text(err)}") from None
        if status == 404:
            return None
        found: Obj | None = json.loads(data or b"null")  # an object, or `null`
        return found

    def _send(self, path: str, query: list[tuple[str, str]]) -> tuple[int, bytes]:
        headers = {"Accept": "application/json"}
        api = self._api
        if not hasattr(api, "param_serialize"):  # the older (python-legacy) client
            # Typed against the installed client, whose call_api takes other arguments.
            legacy: Any = api
            old = legacy.call_api(path, "GET", query_params=query, header_params=headers,
                                  auth_settings=["BearerToken"], _preload_content=False,
                                  _return_http_data_only=True, _request_timeout=_TIMEOUT_S)
            return old.status, old.data
        request = api.param_serialize(method="GET", resource_path=path, query_params=query,
                                      header_params=headers, auth_settings=["BearerToken"])
        response = api.call_api(*request, _request_timeout=_TIMEOUT_S)
        data: bytes = response.read()  # the body, also kept as `response.data`
        if not 200 <= response.status <= 299 and response.status != 404:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.status, data

    def get(self, path: str) -> Obj | None:
        return self._get(path)

    def items(self, path: str, *, labels: str = "", fields: str = "") -> list[Obj]:
        query = {}
        if labels:
            query["labelSelector"] = labels
        if fields:
            query["fieldSelector"] = fields
        listed = self._get(path, query)
        return list((listed or {}).get("items") or [])


def named(path: str, name: str) -> str:
    return f"{path}/{quote(name, safe='')}"
