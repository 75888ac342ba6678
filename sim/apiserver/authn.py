"""Bearer-token authentication with kube-apiserver's semantics: who a request is.

The emulator can enforce authentication and RBAC (`sim.apiserver.rbac`) so tests prove that
the shipped least-privilege RBAC manifests really suffice. The module is pure; the server
passes in the request's Authorization header.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sim.apiserver.errors import ApiError

AUTHENTICATED_GROUP = "system:authenticated"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
MASTERS_GROUP = "system:masters"
ANONYMOUS_USER = "system:anonymous"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"


@dataclass(frozen=True)
class UserInfo:
    """Who made a request: the name and groups RBAC subjects are matched against."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    # Extra attributes, e.g. the pod and node a ServiceAccount token is bound to
    # (`authentication.kubernetes.io/pod-name`, `.../node-name`).
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)


ANONYMOUS = UserInfo(ANONYMOUS_USER, (UNAUTHENTICATED_GROUP,))
"""What a request without credentials is; the server decides whether to admit it."""

ADMIN = UserInfo("kubernetes-admin", (MASTERS_GROUP, AUTHENTICATED_GROUP))
"""The kubeconfig admin: `system:masters` is allowed everything, before RBAC is consulted."""


def service_account_username(namespace: str, name: str) -> str:
    """The user name a ServiceAccount token authenticates as."""
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def unauthorized() -> ApiError:
    """The 401 a real server sends for a bearer token it does not recognise."""
    return ApiError(401, "Unauthorized", "Unauthorized")


class TokenAuthenticator:
    """Maps static bearer tokens to users, as kube-apiserver's token authenticators do."""

    def __init__(self, anonymous: UserInfo = ANONYMOUS) -> None:
        """`anonymous`: who a request without credentials is. `ADMIN` makes the server
        behave like kube-apiserver's old localhost insecure port, for kubectl, which does
        not send a bearer token over plain HTTP; clients that do send one are still
        authenticated and authorized by it."""
        self._users: dict[str, UserInfo] = {}
        self.anonymous = anonymous

    def add_user(
        self,
        token: str,
        name: str,
        groups: Iterable[str] = (),
        uid: str = "",
        extra: Mapping[str, tuple[str, ...]] | None = None,
    ) -> UserInfo:
        """Register (or replace) a token; the user also gets `system:authenticated`."""
        if not token or any(c.isspace() for c in token):
            raise ValueError(f"invalid bearer token {token!r}")
        if not name:
            raise ValueError("a user needs a name")
        all_groups = tuple(dict.fromkeys([*groups, AUTHENTICATED_GROUP]))
        user = UserInfo(name, all_groups, uid, dict(extra or {}))
        self._users[token] = user
        return user

    def add_service_account(
        self,
        token: str,
        namespace: str,
        name: str,
        uid: str = "",
        extra: Mapping[str, tuple[str, ...]] | None = None,
    ) -> UserInfo:
        """Register a ServiceAccount token with the user name and groups the server gives it
        (and the extra attributes of the object it is bound to)."""
        if not namespace or not name:
            raise ValueError("a service account needs a namespace and a name")
        groups = (SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{namespace}")
        return self.add_user(token, service_account_username(namespace, name), groups, uid, extra)

    def add_admin(self, token: str) -> UserInfo:
        """Register a token for `ADMIN` (the `system:masters` kubeconfig user)."""
        return self.add_user(token, ADMIN.name, ADMIN.groups, ADMIN.uid)

    def authenticate(self, authorization_header: str | None) -> UserInfo:
        """The request's user; `ANONYMOUS` without usable bearer credentials.

        As the real bearer-token authenticator: a header that is not `Bearer <token>` (or
        has an empty token) is not an attempt and falls through to anonymous, while a
        token nobody issued is an error (401), never anonymous.
        """
        auth = (authorization_header or "").strip()
        if not auth:
            return self.anonymous
        parts = auth.split(" ", 2)
        if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
            return self.anonymous
        user = self._users.get(parts[1])
        if user is None:
            raise unauthorized()
        return user
