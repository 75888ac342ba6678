"""The write rules of kube-apiserver's generic registry, for every resource alike.

Metadata the server owns (uid, creationTimestamp, resourceVersion, generation), optimistic
concurrency (409 on a stale resourceVersion), the status/main split of resources with a
status subresource, finalizers and deletionTimestamp, graceful pod deletion and
generateName. The code under test relies on each of these, so each follows the real server.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sim.apiserver import errors, serviceaccounts
from sim.apiserver.admission import AdmitOptions
from sim.apiserver.authn import UserInfo
from sim.apiserver.errors import ApiError, Cause
from sim.apiserver.go_format import go_string_slice
from sim.apiserver.resources import ResourceInfo
from sim.apiserver.store import Obj, Store, clone, meta

# Finalizers the garbage collector itself honours.
FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
NAMESPACE_FINALIZER = "kubernetes"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the real server's generateName alphabet
SERVER_MANAGED = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
    "selfLink",
)

Admit = Callable[[ResourceInfo, Obj, Obj | None, AdmitOptions], Obj]


def now(offset_seconds: float = 0) -> str:
    """RFC 3339 with second precision, as metav1.Time serialises."""
    moment = datetime.now(UTC) + timedelta(seconds=offset_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _name_problem(name: str) -> str | None:
    if not name:
        return "name or generateName is required"
    if len(name) > 253:
        return "must be no more than 253 characters"
    if name in (".", ".."):
        return f"may not be '{name}'"
    for bad in ("/", "%"):
        if bad in name:
            return f"may not contain '{bad}'"
    return None


@dataclass(frozen=True)
class DeleteOptions:
    propagation: str | None = None  # Orphan | Background | Foreground
    grace_period: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False
    user: UserInfo | None = None


# ObjectMeta's omitempty maps and lists: stored empty, they come back absent.
_OMITTED_WHEN_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences")


def drop_empty_meta(md: Obj) -> None:
    for key in _OMITTED_WHEN_EMPTY:
        if key in md and not md[key]:
            del md[key]


Validate = Callable[
    [str, ResourceInfo, str, Obj | None, Obj | None, "UserInfo | None", bool], None
]


class Lifecycle:
    """Create, update, status update and delete with the real server's metadata rules.

    `admit(info, new, old)` is the validation/defaulting chain (CRD schema or built-in
    checks); it returns the object to store or raises ApiError (422).
    """

    def __init__(self, store: Store, admit: Admit, namespace_exists: Callable[[str], bool],
                 validate: Validate | None = None):
        """`validate(operation, info, subresource, new, old, user, dry_run)` is validating
        admission (the admission policies): it runs on every write after the schema, and
        raises to refuse it."""
        self._store = store
        self._admit = admit
        self._namespace_exists = namespace_exists
        self._validate = validate

    # --- create ----------------------------------------------------------------------

    def create(
        self,
        info: ResourceInfo,
        namespace: str,
        body: Any,
        *,
        dry_run: bool = False,
        opts: AdmitOptions | None = None,
    ) -> Obj:
        obj = self._check_body(info, body)
        md = meta(obj)
        if info.namespaced:
            if md.get("namespace") not in (None, "", namespace):
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            md["namespace"] = namespace
            if not self._namespace_exists(namespace):
                raise errors.not_found("", "namespaces", namespace)
        else:
            md.pop("namespace", None)
        if not md.get("name") and md.get("generateName"):
            md["name"] = self._generate_name(info, md.get("namespace", ""), md["generateName"])
        problem = _name_problem(md.get("name", ""))
        if problem:
            raise errors.invalid(
                info.group,
                info.kind,
                md.get("name", ""),
                [
                    Cause(
                        "metadata.name",
                        "FieldValueRequired" if not md.get("name") else "FieldValueInvalid",
                        problem,
                    )
                ],
            )
        if self._store.get(info.key, md.get("namespace", ""), md["name"]) is not None:
            raise errors.already_exists(info.group, info.plural, md["name"])
        for owned in SERVER_MANAGED:
            md.pop(owned, None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now()
        if "spec" in obj or not info.builtin:
            md["generation"] = 1
        self._prepare_create_status(info, obj)
        if info.builtin and info.kind == "Pod":
            serviceaccounts.admit_pod(self._store, namespace, obj)
        if info.builtin and info.kind == "Job":
            _job_selector(obj)
        opts = opts or AdmitOptions()
        obj = self._admit(info, obj, None, opts)
        drop_empty_meta(meta(obj))
        if self._validate is not None:
            self._validate("CREATE", info, "", obj, None, opts.user, dry_run)
        if dry_run:
            return obj
        return self._store.put(info.key, obj)

    def _generate_name(self, info: ResourceInfo, namespace: str, prefix: str) -> str:
        prefix = prefix[: 253 - 5]
        for _ in range(16):
            name = prefix + "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))
            if self._store.get(info.key, namespace, name) is None:
                return name
        raise errors.already_exists(info.group, info.plural, prefix)

    @staticmethod
    def _prepare_create_status(info: ResourceInfo, obj: Obj) -> None:
        """Status cannot be set on create, except where kubelets create Nodes with status."""
        if info.status_subresource and info.kind != "Node":
            obj.pop("status", None)
        if info.builtin and info.kind == "Pod":
            obj["status"] = {"phase": "Pending"}
        elif info.builtin and info.kind == "Namespace":
            obj.setdefault("spec", {}).setdefault("finalizers", [NAMESPACE_FINALIZER])
            obj["status"] = {"phase": "Active"}

    # --- update ----------------------------------------------------------------------

    def update(
        self,
        info: ResourceInfo,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        opts: AdmitOptions | None = None,
    ) -> Obj:
        new = self._check_body(info, body)
        current = self._require(info, namespace, name)
        md = meta(new)
        if md.get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({md.get('name')}) does not match the name on the URL "
                f"({name})"
            )
        if info.namespaced and md.get("namespace") not in (None, "", namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        self._check_preconditions(info, current, md.get("resourceVersion"), md.get("uid"))
        if subresource == "status":
            merged = clone(current)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            new = merged
        else:
            new = self._carry_server_fields(info, current, new)
        return self._commit_update(
            info, current, new, dry_run=dry_run, opts=opts, subresource=subresource
        )

    def _carry_server_fields(self, info: ResourceInfo, current: Obj, new: Obj) -> Obj:
        md, cur_md = meta(new), current["metadata"]
        for owned in SERVER_MANAGED:
            if owned in cur_md:
                md[owned] = cur_md[owned]
            else:
                md.pop(owned, None)
        md["name"] = cur_md["name"]
        if "namespace" in cur_md:
            md["namespace"] = cur_md["namespace"]
        if info.status_subresource:
            if "status" in current:
                new["status"] = current["status"]
            else:
                new.pop("status", None)
        return new

    def _commit_update(
        self,
        info: ResourceInfo,
        current: Obj,
        new: Obj,
        *,
        dry_run: bool,
        opts: AdmitOptions | None = None,
        subresource: str = "",
    ) -> Obj:
        cur_md, md = current["metadata"], meta(new)
        if cur_md.get("deletionTimestamp"):
            old = set(cur_md.get("finalizers") or ())
            added = [f for f in md.get("finalizers") or () if f not in old]
            if added:
                cause = Cause(
                    "metadata.finalizers",
                    "FieldValueForbidden",
                    "Forbidden: no new finalizers can be added if the object is being "
                    f"deleted, found new finalizers {go_string_slice(added)}",
                )
                # kube-apiserver checks ObjectMeta twice on this path, and says so twice.
                raise errors.invalid(info.group, info.kind, cur_md["name"], [cause, cause])
        if _spec_changed(current, new) and "generation" in cur_md:
            md["generation"] = int(cur_md["generation"]) + 1
        opts = opts or AdmitOptions()
        new = self._admit(info, new, current, opts)
        drop_empty_meta(md)
        if self._validate is not None:
            self._validate("UPDATE", info, subresource, new, current, opts.user, dry_run)
        if _same(current, new):
            return current
        if dry_run:
            return new
        if md.get("deletionTimestamp") and not md.get("finalizers"):
            self._store.put(info.key, new)
            return self._store.delete(info.key, md.get("namespace", ""), md["name"]) or new
        return self._store.put(info.key, new)

    def replace_stored(self, info: ResourceInfo, current: Obj, new: Obj) -> Obj:
        """A server-internal update (garbage collector, namespace controller): no admission."""
        md = meta(new)
        drop_empty_meta(md)
        if _same(current, new):
            return current
        if md.get("deletionTimestamp") and not md.get("finalizers"):
            self._store.put(info.key, new)
            return self._store.delete(info.key, md.get("namespace", ""), md["name"]) or new
        return self._store.put(info.key, new)

    # --- delete ----------------------------------------------------------------------

    def delete(
        self, info: ResourceInfo, namespace: str, name: str, opts: DeleteOptions
    ) -> tuple[Obj, bool]:
        """Returns (object, deleted-now). With finalizers the object only gets a
        deletionTimestamp; the last finalizer removal deletes it."""
        current = self._require(info, namespace, name)
        self._check_preconditions(info, current, opts.resource_version, opts.uid)
        if self._validate is not None:
            self._validate("DELETE", info, "", None, current, opts.user, opts.dry_run)
        obj = clone(current)
        md = obj["metadata"]
        finalizers = list(md.get("finalizers") or [])
        policy = opts.propagation
        if policy == "Foreground" and FOREGROUND_FINALIZER not in finalizers:
            finalizers.append(FOREGROUND_FINALIZER)
        elif policy == "Orphan" and ORPHAN_FINALIZER not in finalizers:
            finalizers.append(ORPHAN_FINALIZER)
        if info.builtin and info.kind == "Namespace":
            obj.setdefault("status", {})["phase"] = "Terminating"
            finalizers = finalizers or []
        grace = self._pod_grace(info, obj, opts) if info.kind == "Pod" and info.builtin else 0
        terminating = bool(finalizers) or grace > 0 or (info.builtin and info.kind == "Namespace")
        if not terminating:
            if info.builtin and info.kind == "Pod":
                # Graceful deletion with a period of 0: the answer still carries it.
                md["deletionTimestamp"] = now(0)
                md["deletionGracePeriodSeconds"] = 0
                if int(md.get("generation") or 0) > 0:
                    md["generation"] = int(md["generation"]) + 1
            if opts.dry_run:
                return obj, True
            self._store.delete(info.key, namespace, name)
            return obj, True
        if not md.get("deletionTimestamp"):
            md["deletionTimestamp"] = now(grace)
            md["deletionGracePeriodSeconds"] = grace
            if int(md.get("generation") or 0) > 0:  # the registry's BeforeDelete does this
                md["generation"] = int(md["generation"]) + 1
        elif grace == 0 and md.get("deletionGracePeriodSeconds", 0) > 0 and not finalizers:
            # A second delete with grace 0 (kubelet confirming termination) removes it now.
            if opts.dry_run:
                return obj, True
            return self._store.delete(info.key, namespace, name) or obj, True
        elif grace < int(md.get("deletionGracePeriodSeconds", 0)):
            md["deletionTimestamp"] = now(grace)
            md["deletionGracePeriodSeconds"] = grace
        if finalizers:
            md["finalizers"] = finalizers
        if opts.dry_run:
            return obj, False
        if grace == 0 and not finalizers and not (info.builtin and info.kind == "Namespace"):
            return self._store.delete(info.key, namespace, name) or obj, True
        if _same(current, obj):
            return current, False
        return self._store.put(info.key, obj), False

    @staticmethod
    def _pod_grace(info: ResourceInfo, pod: Obj, opts: DeleteOptions) -> int:
        """Graceful deletion: a pod bound to a node waits for its kubelet; others go now."""
        if not (pod.get("spec") or {}).get("nodeName"):
            return 0
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        if opts.grace_period is not None:
            return max(0, int(opts.grace_period))
        return int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))

    # --- helpers ---------------------------------------------------------------------

    def _require(self, info: ResourceInfo, namespace: str, name: str) -> Obj:
        current = self._store.get(info.key, namespace if info.namespaced else "", name)
        if current is None:
            raise errors.not_found(info.group, info.plural, name)
        return current

    @staticmethod
    def _check_body(info: ResourceInfo, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        obj = clone(body)
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if kind not in (None, info.kind) or api_version not in (None, info.api_version):
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({info.api_version})"
                if api_version != info.api_version
                else f"the kind in the data ({kind}) does not match the expected kind ({info.kind})"
            )
        obj["apiVersion"], obj["kind"] = info.api_version, info.kind
        if not isinstance(obj.get("metadata", {}), dict):
            raise errors.bad_request("metadata must be an object")
        return obj

    @staticmethod
    def _check_preconditions(info: ResourceInfo, current: Obj, rv: Any, uid: Any) -> None:
        cur_md = current["metadata"]
        if uid and uid != cur_md.get("uid"):
            raise errors.conflict(
                info.group,
                info.plural,
                cur_md["name"],
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{cur_md.get('uid')}",
            )
        if rv and str(rv) != cur_md.get("resourceVersion"):
            raise errors.conflict(
                info.group,
                info.plural,
                cur_md["name"],
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
            )


def _spec_changed(old: Obj, new: Obj) -> bool:
    keys = (set(old) | set(new)) - {"metadata", "status", "apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)


def _same(old: Obj, new: Obj) -> bool:
    """Equal but for resourceVersion and managedFields: such an update is a no-op."""

    def strip(o: Obj) -> Obj:
        o = dict(o)
        md = dict(o.get("metadata") or {})
        md.pop("resourceVersion", None)
        md.pop("managedFields", None)
        o["metadata"] = md
        return o

    return strip(old) == strip(new)


__all__ = ["ApiError", "DeleteOptions", "Lifecycle", "now"]


def _job_selector(job: Obj) -> None:
    """kube-apiserver's Job strategy (PrepareForCreate): unless `manualSelector`, the
    selector is the Job's own UID and the pod template carries the labels it selects, so
    `kubectl logs job/x` finds exactly its pods."""
    spec = job.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector"):
        return
    md = job["metadata"]
    uid, name = md["uid"], md.get("name", "")
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    template = spec.setdefault("template", {})
    tmd = template.setdefault("metadata", {})
    labels = tmd.setdefault("labels", {})
    labels.update({
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    })
