"""ServiceAccounts the way a cluster has them: every namespace gets its `default` account
(kube-controller-manager's ServiceAccount controller), and the ServiceAccount admission
plugin gives a new Pod its account (`default` unless named), refuses a Pod whose account
does not exist, and mounts the account's API token into every container as the projected
`kube-api-access-<random>` volume (unless the pod or the account turns automount off).
A manifest naming a ServiceAccount it does not create fails here as on a real cluster.
"""

from __future__ import annotations

import secrets
from typing import Any, Final

from sim.apiserver.errors import ApiError
from sim.apiserver.store import Obj, Store

DEFAULT: Final = "default"
TOKEN_PATH: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
VOLUME_PREFIX: Final = "kube-api-access-"
ROOT_CA_CONFIGMAP: Final = "kube-root-ca.crt"
KUBELET_TOKEN_SECONDS: Final = 3607
_SUFFIX: Final = "bcdfghjklmnpqrstvwxz2456789"


def default_account(namespace: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": DEFAULT, "namespace": namespace}}  # fmt: skip


def root_ca_configmap(namespace: str, ca_pem: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": namespace},
            "data": {"ca.crt": ca_pem}}  # fmt: skip


def _forbidden(namespace: str, pod: str, account: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'pods "{pod}" is forbidden: error looking up service account {namespace}/{account}: '
        f'serviceaccount "{account}" not found',
        kind="pods",
        name=pod,
    )


def _token_volume(name: str) -> Obj:
    return {
        "name": name,
        "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": KUBELET_TOKEN_SECONDS,
                                         "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIGMAP,
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }  # fmt: skip


def admit_pod(store: Store, namespace: str, pod: Obj) -> None:
    """The ServiceAccount admission plugin on Pod creation (mirror pods aside)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if "kubernetes.io/config.mirror" in annotations:
        return
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"] = DEFAULT
    name = spec["serviceAccountName"]
    account = store.get(("", "serviceaccounts"), namespace, name)
    if account is None:
        raise _forbidden(namespace, str((pod.get("metadata") or {}).get("name") or ""), name)
    automount: Any = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = account.get("automountServiceAccountToken")
    if automount is False:
        return
    volumes = spec.setdefault("volumes", [])
    existing = next((v["name"] for v in volumes if isinstance(v, dict)
                     and str(v.get("name", "")).startswith(VOLUME_PREFIX)), None)  # fmt: skip
    volume = existing or VOLUME_PREFIX + "".join(secrets.choice(_SUFFIX) for _ in range(5))
    mount = {"name": volume, "readOnly": True, "mountPath": TOKEN_PATH}
    needed = False
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            mounts = container.setdefault("volumeMounts", [])
            if not any(m.get("mountPath") == TOKEN_PATH for m in mounts if isinstance(m, dict)):
                mounts.append(dict(mount))
                needed = True
    if needed and existing is None:
        volumes.append(_token_volume(volume))
    if not volumes:
        del spec["volumes"]
