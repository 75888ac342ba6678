"""Send the same request to the emulator and to kube-apiserver, and compare the answers.

A `Pair` holds both servers, reached over plain HTTP requests (urllib3) with the same
kind of credentials (the admin, or a plain user RBAC decides about). `Pair.both` sends one
request to each; `compare` reduces both answers to what a client can rely on (status
code, reason, message and details of a Status; an object without the values each server
makes up: UIDs, resourceVersions, timestamps, generated names, managed fields) and
records a `Difference` when they disagree. The tests then hold every difference to the
list of accepted ones, each with its reason.
"""

from __future__ import annotations

import copy
import json
import re
import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import urllib3

from sim.controlplane.base import Credentials

Obj = dict[str, Any]
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Values that differ between any two servers, wherever they appear in a message.
_VOLATILE = [
    (UID, "<uid>"),
    (re.compile(r"too old resource version: \d+ \(\d+\)"), "too old resource version: <rv>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<time>"),
]
_METADATA_VOLATILE = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink")


@dataclass
class Answer:
    """One HTTP answer: status code, JSON body (or text), warnings."""

    code: int
    body: Any
    warnings: list[str] = field(default_factory=list)

    @property
    def is_status(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("kind") == "Status"


class Server:
    """One API server and the credentials of its users."""

    def __init__(self, name: str, admin: Credentials, users: Callable[[str], Credentials]):
        self.name = name
        self.admin = admin
        self._make_user = users
        self._users: dict[str, Credentials] = {"admin": admin}
        self._pools: dict[str, urllib3.PoolManager] = {}

    def user(self, name: str) -> Credentials:
        if name not in self._users:
            self._users[name] = self._make_user(name)
        return self._users[name]

    def _pool(self, user: str) -> tuple[urllib3.PoolManager, dict[str, str]]:
        credentials = self.user(user)
        headers = {"Accept": "application/json"}
        if credentials.token:
            headers["Authorization"] = f"Bearer {credentials.token}"
        if user not in self._pools:
            kwargs: dict[str, Any] = {"maxsize": 4, "retries": False}
            if credentials.ca_file is not None:
                context = ssl.create_default_context(cafile=str(credentials.ca_file))
                if credentials.client_cert is not None and credentials.client_key is not None:
                    context.load_cert_chain(str(credentials.client_cert),
                                            str(credentials.client_key))
                kwargs["ssl_context"] = context
            self._pools[user] = urllib3.PoolManager(**kwargs)
        return self._pools[user], headers

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        user: str = "admin",
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout: float = 30,
    ) -> Answer:
        pool, headers = self._pool(user)
        url = self.admin.server + path
        if query:
            url += "?" + urlencode(dict(query))
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        response = pool.request(method, url, body=data, headers=headers, timeout=timeout,
                                preload_content=True)
        text = response.data.decode(errors="replace")
        try:
            parsed: Any = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return Answer(response.status, parsed, response.headers.getlist("Warning"))

    def watch(
        self, path: str, *, query: Mapping[str, str], user: str = "admin", timeout: float = 5
    ) -> Iterator[Obj]:
        """The events of a watch until the server ends it (`timeoutSeconds` in `query`)."""
        pool, headers = self._pool(user)
        url = self.admin.server + path + "?" + urlencode({**query, "watch": "1"})
        response = pool.request("GET", url, headers=headers, preload_content=False,
                                timeout=urllib3.Timeout(connect=5, read=timeout + 10))
        buffer = b""
        try:
            for chunk in response.stream(4096):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()


def scrub_text(text: str) -> str:
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text


def scrub_object(obj: Any) -> Any:
    """An object without what servers make up differently (see the module docstring)."""
    if isinstance(obj, list):
        return [scrub_object(o) for o in obj]
    if not isinstance(obj, dict):
        return scrub_text(obj) if isinstance(obj, str) else obj
    out = copy.deepcopy(obj)
    md = out.get("metadata")
    if isinstance(md, dict):
        for key in _METADATA_VOLATILE:
            md.pop(key, None)
        name, prefix = md.get("name"), md.get("generateName")
        if prefix and isinstance(name, str) and name.startswith(prefix):
            md["name"] = prefix + "<generated>"
        if "deletionTimestamp" in md:
            md["deletionTimestamp"] = "<time>"
        for ref in md.get("ownerReferences") or ():
            ref["uid"] = "<uid>"
        if not md:
            out.pop("metadata")
    if out.get("kind", "").endswith("List") and isinstance(out.get("items"), list):
        out["items"] = [scrub_object(i) for i in out["items"]]
        out["metadata"] = sorted((obj.get("metadata") or {}).keys())
    return {k: (scrub_object(v) if k not in ("metadata",) else v) for k, v in out.items()}


def view(answer: Answer) -> Any:
    """What a client relies on in an answer."""
    if answer.is_status:
        body = answer.body
        details = copy.deepcopy(body.get("details") or {})
        details.pop("uid", None)
        for cause in details.get("causes") or ():
            if "message" in cause:
                cause["message"] = scrub_text(cause["message"])
        return {
            "code": answer.code,
            "status": body.get("status"),
            "reason": body.get("reason"),
            "message": scrub_text(str(body.get("message") or "")),
            "details": details,
        }
    return {"code": answer.code, "body": scrub_object(answer.body)}


@dataclass(frozen=True)
class Difference:
    case: str
    emulator: Any
    kubernetes: Any

    def __str__(self) -> str:
        return (f"{self.case}:\n  emulator:   {json.dumps(self.emulator, sort_keys=True)}\n"
                f"  kubernetes: {json.dumps(self.kubernetes, sort_keys=True)}")


class Pair:
    """The emulator and kube-apiserver side by side; differences are recorded by case."""

    def __init__(self, emulator: Server, kubernetes: Server) -> None:
        self.emulator = emulator
        self.kubernetes = kubernetes
        self.differences: list[Difference] = []

    def servers(self) -> tuple[Server, Server]:
        return self.emulator, self.kubernetes

    def both(self, method: str, path: str, body: Any = None, **kwargs: Any
             ) -> tuple[Answer, Answer]:
        return (self.emulator.send(method, path, copy.deepcopy(body), **kwargs),
                self.kubernetes.send(method, path, copy.deepcopy(body), **kwargs))

    def compare(self, case: str, answers: tuple[Answer, Answer],
                pick: Callable[[Any], Any] = lambda v: v) -> tuple[Answer, Answer]:
        """Record a difference of the two answers' views (narrowed by `pick`)."""
        ours, theirs = (pick(view(a)) for a in answers)
        if ours != theirs:
            self.differences.append(Difference(case, ours, theirs))
        return answers

    def same(self, case: str, method: str, path: str, body: Any = None,
             pick: Callable[[Any], Any] = lambda v: v, **kwargs: Any) -> tuple[Answer, Answer]:
        return self.compare(case, self.both(method, path, body, **kwargs), pick)
