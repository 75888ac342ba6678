"""RBAC authorization with kube-apiserver's semantics: what a request may do.

The emulator can enforce this so tests prove that the shipped least-privilege RBAC
manifests really suffice: a missing verb or subresource shows up as the same 403 a real
cluster would return. The module is pure; the server passes in the request's attributes and
the RBAC objects it stores (plain dicts, as the API serves them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sim.apiserver.authn import (
    AUTHENTICATED_GROUP,
    MASTERS_GROUP,
    UNAUTHENTICATED_GROUP,
    UserInfo,
    service_account_username,
)
from sim.apiserver.errors import ApiError

RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class RequestAttributes:
    """What authorization decides on: kube-apiserver's `authorizer.Attributes`.

    `namespace` is "" for cluster-scoped objects and for lists across all namespaces;
    `name` is "" for list, watch, create and deletecollection (the server may set it from a
    `metadata.name=` field selector on list/watch, as the real one does).
    """

    user: UserInfo
    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    resource_request: bool = True
    path: str = ""

    @classmethod
    def for_path(cls, user: UserInfo, path: str, verb: str = "get") -> RequestAttributes:
        """A non-resource request (`/version`, `/apis`, `/healthz`, ...)."""
        return cls(user=user, verb=verb, resource_request=False, path=path)


@dataclass(frozen=True)
class Decision:
    """The authorizer's answer; `reason` names the granting binding, or RBAC lookup errors."""

    allowed: bool
    reason: str = ""


def verb_for(method: str, *, has_name: bool, watch: bool) -> str:
    """The RBAC verb of a resource request, as the server's RequestInfoFactory derives it.

    `watch` means the request will stream (`?watch=true` on a collection, or the legacy
    `/watch/` path prefix), so it wins even when a name is set.
    """
    match method.upper():
        case "GET" | "HEAD":
            if watch:
                return "watch"
            return "get" if has_name else "list"
        case "POST":
            return "create"
        case "PUT":
            return "update"
        case "PATCH":
            return "patch"
        case "DELETE":
            return "delete" if has_name else "deletecollection"
    raise ValueError(f"no RBAC verb for HTTP method {method!r}")


def non_resource_verb(method: str) -> str:
    """The verb of a non-resource request: the lower-cased HTTP method, as the real server."""
    return method.lower()


# ---------------------------------------------------------------------------------------
# Rule matching (k8s.io/kubernetes/pkg/apis/rbac/v1 helpers, plugin/pkg/auth/.../rbac.go)


def _strings(obj: Mapping[str, Any], key: str) -> list[str]:
    return list(obj.get(key) or [])


def rule_allows(attrs: RequestAttributes, rule: Mapping[str, Any]) -> bool:
    """Whether one PolicyRule covers the request, exactly as the real RuleAllows."""
    verbs = _strings(rule, "verbs")
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.resource_request:
        return _url_matches(_strings(rule, "nonResourceURLs"), attrs.path)
    groups = _strings(rule, "apiGroups")
    if "*" not in groups and attrs.api_group not in groups:
        return False
    if not _resource_matches(_strings(rule, "resources"), attrs.resource, attrs.subresource):
        return False
    names = _strings(rule, "resourceNames")
    # An empty name (list, watch, create, deletecollection) never matches a name list.
    return not names or attrs.name in names


def _resource_matches(rule_resources: Sequence[str], resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for entry in rule_resources:
        if entry in ("*", combined):
            return True
        # `*/status` grants the status subresource of every resource; `pods` grants only pods.
        if subresource and entry == f"*/{subresource}":
            return True
    return False


def _url_matches(rule_urls: Sequence[str], path: str) -> bool:
    for entry in rule_urls:
        if entry in ("*", path):
            return True
        if entry.endswith("*") and path.startswith(entry.rstrip("*")):
            return True
    return False


# ---------------------------------------------------------------------------------------
# Subjects and role references


def _meta(obj: Mapping[str, Any], key: str) -> str:
    return str((obj.get("metadata") or {}).get(key) or "")


def _subject_applies(user: UserInfo, subject: Mapping[str, Any], namespace: str) -> bool:
    """`namespace` is the RoleBinding's (what an unqualified ServiceAccount defaults to)."""
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.name == service_account_username(sa_namespace, name)
    return False


def _applying_subject(
    user: UserInfo, binding: Mapping[str, Any], namespace: str
) -> Mapping[str, Any] | None:
    for subject in binding.get("subjects") or []:
        if _subject_applies(user, subject, namespace):
            return subject
    return None


def _describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels; an empty selector matches everything."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(op, False)
        if not ok:
            return False
    return True


def _own_rules(role: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(role.get("rules") or [])


class _RoleRefError(Exception):
    """A binding's roleRef names no stored role; RBAC skips it and reports the text."""


class _Roles:
    """Roles and ClusterRoles indexed by name, with aggregated ClusterRoles resolved."""

    def __init__(
        self, roles: Iterable[Mapping[str, Any]], cluster_roles: Iterable[Mapping[str, Any]]
    ) -> None:
        self.roles = {(_meta(r, "namespace"), _meta(r, "name")): r for r in roles}
        self.cluster_roles = {_meta(r, "name"): r for r in cluster_roles}
        self._resolved: dict[str, list[Mapping[str, Any]]] = {}

    def cluster_role_rules(
        self, name: str, _visiting: frozenset[str] = frozenset()
    ) -> list[Mapping[str, Any]]:
        """Stored rules, or for an aggregated role the rules the aggregation controller
        would write into it: its own are replaced by those of every other matching role."""
        if name in self._resolved:
            return self._resolved[name]
        role = self.cluster_roles[name]
        aggregation = role.get("aggregationRule")
        if aggregation is None or name in _visiting:
            return _own_rules(role)
        rules: list[Mapping[str, Any]] = []
        for selector in aggregation.get("clusterRoleSelectors") or []:
            for other in sorted(self.cluster_roles):
                labels = (self.cluster_roles[other].get("metadata") or {}).get("labels") or {}
                if other == name or not selector_matches(selector, labels):
                    continue
                for rule in self.cluster_role_rules(other, _visiting | {name}):
                    if rule not in rules:
                        rules.append(rule)
        if not _visiting:  # results inside a (pathological) cycle depend on the path
            self._resolved[name] = rules
        return rules

    def rules_for(self, role_ref: Mapping[str, Any], namespace: str) -> list[Mapping[str, Any]]:
        """The referenced role's rules; `_RoleRefError` with the real server's text if absent."""
        kind, name = role_ref.get("kind"), role_ref.get("name", "")
        if kind == "Role":
            role = self.roles.get((namespace, name))
            if role is None:
                raise _RoleRefError(f'role.{RBAC_GROUP} "{name}" not found')
            return _own_rules(role)
        if kind == "ClusterRole":
            if name not in self.cluster_roles:
                raise _RoleRefError(f'clusterrole.{RBAC_GROUP} "{name}" not found')
            return self.cluster_role_rules(name)
        raise _RoleRefError(f'unsupported role reference kind: "{kind}"')


def aggregated_cluster_role_rules(
    name: str, cluster_roles: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The effective rules of ClusterRole `name` (what a GET on a real cluster would show
    once the aggregation controller has run); KeyError if there is no such role."""
    return _Roles((), cluster_roles).cluster_role_rules(name)


def _aggregate_errors(errors: Sequence[str]) -> str:
    """utilerrors.NewAggregate's text: one error bare, several deduplicated in brackets."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def authorize(
    attrs: RequestAttributes,
    *,
    roles: Iterable[Mapping[str, Any]],
    cluster_roles: Iterable[Mapping[str, Any]],
    role_bindings: Iterable[Mapping[str, Any]],
    cluster_role_bindings: Iterable[Mapping[str, Any]],
) -> Decision:
    """Decide as kube-apiserver's privileged-group then RBAC authorizers do.

    ClusterRoleBindings grant everywhere; RoleBindings only in their own namespace, so they
    never grant cluster-scoped objects, lists across all namespaces or non-resource URLs.
    A binding whose role is missing is skipped and reported in the reason.
    """
    user = attrs.user
    if MASTERS_GROUP in user.groups:
        return Decision(True, f'allowed by group "{MASTERS_GROUP}"')
    index = _Roles(roles, cluster_roles)
    errors: list[str] = []

    for binding in cluster_role_bindings:
        subject = _applying_subject(user, binding, "")
        if subject is None:
            continue
        ref = binding.get("roleRef") or {}
        try:
            rules = index.rules_for(ref, "")
        except _RoleRefError as e:
            errors.append(e.args[0])
            continue
        if any(rule_allows(attrs, r) for r in rules):
            return Decision(
                True,
                f'RBAC: allowed by ClusterRoleBinding "{_meta(binding, "name")}" of '
                f'{ref.get("kind")} "{ref.get("name")}" to {_describe_subject(subject, "")}',
            )

    if attrs.namespace:
        for binding in role_bindings:
            namespace = _meta(binding, "namespace")
            if namespace != attrs.namespace:
                continue
            subject = _applying_subject(user, binding, namespace)
            if subject is None:
                continue
            ref = binding.get("roleRef") or {}
            try:
                rules = index.rules_for(ref, namespace)
            except _RoleRefError as e:
                errors.append(e.args[0])
                continue
            if any(rule_allows(attrs, r) for r in rules):
                return Decision(
                    True,
                    f'RBAC: allowed by RoleBinding "{_meta(binding, "name")}/{namespace}" of '
                    f'{ref.get("kind")} "{ref.get("name")}" to '
                    f"{_describe_subject(subject, namespace)}",
                )

    return Decision(False, f"RBAC: {_aggregate_errors(errors)}" if errors else "")


# ---------------------------------------------------------------------------------------
# The 403


_SANITIZE = MappingProxyType(str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"}))


def _forbidden_detail(attrs: RequestAttributes) -> str:
    user = attrs.user.name
    if not attrs.resource_request:
        return f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    head = (
        f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}"'
    )
    if attrs.namespace:
        return f'{head} in the namespace "{attrs.namespace}"'
    return f"{head} at the cluster scope"


def forbidden(attrs: RequestAttributes, reason: str = "") -> ApiError:
    """The 403 the real server sends for a denied request (responsewriters.Forbidden).

    `reason` is the Decision's, appended after a colon when non-empty, as the real server does.
    """
    detail = _forbidden_detail(attrs).translate(_SANITIZE)
    if reason:
        detail = f"{detail}: {reason}"
    if not attrs.resource_request or not attrs.resource:
        return ApiError(403, "Forbidden", f"forbidden: {detail}")
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    prefix = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    return ApiError(
        403,
        "Forbidden",
        f"{prefix} is forbidden: {detail}",
        group=attrs.api_group,
        kind=attrs.resource,
        name=attrs.name,
    )


# ---------------------------------------------------------------------------------------
# The bootstrap policy every real cluster has


_BOOTSTRAP_LABELS = MappingProxyType({"kubernetes.io/bootstrapping": "rbac-defaults"})
_AUTOUPDATE = MappingProxyType({"rbac.authorization.kubernetes.io/autoupdate": "true"})


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": name,
            "labels": dict(_BOOTSTRAP_LABELS),
            "annotations": dict(_AUTOUPDATE),
        },
        "rules": rules,
    }


def _group_binding(name: str, groups: Sequence[str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": name,
            "labels": dict(_BOOTSTRAP_LABELS),
            "annotations": dict(_AUTOUPDATE),
        },
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups],
    }


_PUBLIC_URLS = ("/healthz", "/livez", "/readyz", "/version", "/version/")
_DISCOVERY_URLS = ("/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*")


def default_cluster_roles_and_bindings() -> list[dict[str, Any]]:
    """The bootstrap ClusterRoles and ClusterRoleBindings a real server creates at start.

    `cluster-admin` (everything, bound to `system:masters`), `system:discovery` (discovery
    and OpenAPI for every authenticated user), `system:basic-user` (self access reviews) and
    `system:public-info-viewer` (version and health, also for anonymous requests).
    """
    return [
        _cluster_role(
            "cluster-admin",
            [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
        ),
        _cluster_role(
            "system:discovery",
            [{"nonResourceURLs": [*_PUBLIC_URLS, *_DISCOVERY_URLS], "verbs": ["get"]}],
        ),
        _cluster_role(
            "system:basic-user",
            [
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["authentication.k8s.io"],
                    "resources": ["selfsubjectreviews"],
                    "verbs": ["create"],
                },
            ],
        ),
        _cluster_role(
            "system:public-info-viewer",
            [{"nonResourceURLs": list(_PUBLIC_URLS), "verbs": ["get"]}],
        ),
        _group_binding("cluster-admin", [MASTERS_GROUP]),
        _group_binding("system:discovery", [AUTHENTICATED_GROUP]),
        _group_binding("system:basic-user", [AUTHENTICATED_GROUP]),
        _group_binding("system:public-info-viewer", [AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP]),
    ]
