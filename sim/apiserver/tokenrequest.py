"""`serviceaccounts/token` (TokenRequest): how kubelets and admins get ServiceAccount tokens.

kube-apiserver signs a JWT; the emulator issues a random bearer token and registers it with
its authenticator under the ServiceAccount's user name and groups, which is all a client
can observe of a token. The checks are the real ones: the ServiceAccount must exist, the
duration must be at least ten minutes, and a bound object (a Pod or Secret) must exist
with the UID given. Tokens are not revoked when their bound object goes.
"""

from __future__ import annotations

import datetime
import secrets
from typing import Any

from sim.apiserver import errors
from sim.apiserver.authn import TokenAuthenticator
from sim.apiserver.store import Obj, Store

API_VERSION = "authentication.k8s.io/v1"
DEFAULT_SECONDS = 3600
MIN_SECONDS = 600
_BOUND_KINDS = {"Pod": ("", "pods"), "Secret": ("", "secrets"), "Node": ("", "nodes")}


def _invalid(name: str, field: str, message: str) -> errors.ApiError:
    """`name` is the TokenRequest's own (usually none), not the ServiceAccount's."""
    return errors.invalid(
        "authentication.k8s.io",
        "TokenRequest",
        name,
        [errors.Cause(field, "FieldValueInvalid", message)],
    )


def issue_token(
    store: Store,
    authenticator: TokenAuthenticator | None,
    namespace: str,
    name: str,
    body: Any,
) -> Obj:
    """The TokenRequest answer (status.token filled in) for ServiceAccount namespace/name."""
    account = store.get(("", "serviceaccounts"), namespace, name)
    if account is None:
        raise errors.not_found("", "serviceaccounts", name)
    if not isinstance(body, dict) or body.get("kind", "TokenRequest") != "TokenRequest":
        raise errors.bad_request("the body must be an authentication.k8s.io/v1 TokenRequest")
    spec = body.get("spec") or {}
    seconds = spec.get("expirationSeconds", DEFAULT_SECONDS)
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise errors.bad_request(f"spec.expirationSeconds must be an integer, got {seconds!r}")
    if seconds < MIN_SECONDS:
        raise _invalid(
            str((body.get("metadata") or {}).get("name") or ""),
            "spec.expirationSeconds",
            f"Invalid value: {seconds}: may not specify a duration less than 10 minutes",
        )
    bound = spec.get("boundObjectRef")
    extra: dict[str, tuple[str, ...]] = {}
    if bound:
        obj = _check_bound(store, namespace, bound)
        if obj["kind"] == "Pod" and (obj.get("spec") or {}).get("serviceAccountName") != name:
            raise errors.bad_request(
                f'cannot bind token for serviceaccount "{name}" to pod running with different '
                "serviceaccount name."
            )
        extra = _bound_extra(store, namespace, obj)
    token = secrets.token_urlsafe(32)
    if authenticator is not None:  # without authentication any token passes anyway
        authenticator.add_service_account(
            token, namespace, name, uid=str(account["metadata"].get("uid") or ""), extra=extra
        )
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    expires = now + datetime.timedelta(seconds=seconds)
    return {
        "kind": "TokenRequest",
        "apiVersion": API_VERSION,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": {
            "audiences": list(spec.get("audiences") or ["https://kubernetes.default.svc"]),
            "expirationSeconds": seconds,
            "boundObjectRef": bound or None,
        },
        "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }


EXTRA_PREFIX = "authentication.kubernetes.io/"


def _bound_extra(store: Store, namespace: str, bound: Obj) -> dict[str, tuple[str, ...]]:
    """The user extra a token bound to `bound` authenticates with: the pod's name and UID
    and its node's, or the node's (what admission policies key on)."""
    md = bound["metadata"]
    extra: dict[str, tuple[str, ...]] = {}
    node_name = md.get("name") if bound.get("kind") == "Node" else None
    if bound.get("kind") == "Pod":
        extra = {f"{EXTRA_PREFIX}pod-name": (md["name"],), f"{EXTRA_PREFIX}pod-uid": (md["uid"],)}
        node_name = (bound.get("spec") or {}).get("nodeName")
    if node_name:
        node = store.get(("", "nodes"), "", node_name)
        extra[f"{EXTRA_PREFIX}node-name"] = (node_name,)
        if node is not None:
            extra[f"{EXTRA_PREFIX}node-uid"] = (node["metadata"]["uid"],)
    return extra


def _check_bound(store: Store, namespace: str, ref: Any) -> Obj:
    """The object a token is to be bound to (404 if missing, 409 on a UID mismatch)."""
    if not isinstance(ref, dict):
        raise errors.bad_request("spec.boundObjectRef must be an object")
    kind = ref.get("kind")
    if kind not in _BOUND_KINDS:
        raise errors.bad_request(
            f"cannot bind token to object of type {kind}: use one of {', '.join(_BOUND_KINDS)}"
        )
    group, plural = _BOUND_KINDS[kind]
    scope = "" if kind == "Node" else namespace
    obj = store.get((group, plural), scope, str(ref.get("name") or ""))
    if obj is None:
        raise errors.not_found(group, plural, str(ref.get("name") or ""))
    obj = dict(obj, kind=kind)
    uid = ref.get("uid")
    if uid and uid != obj["metadata"].get("uid"):
        raise errors.conflict(
            group,
            plural,
            str(ref.get("name")),
            f"the UID in the bound object reference ({uid}) does not match the UID in record. "
            "The object might have been deleted and then recreated",
        )
    return obj
