"""ValidatingAdmissionPolicies and their bindings, enforced as kube-apiserver does.

The driver ships policies (packaging/deploy: the kubelet plugin may change only its own
Node's driver labels, a daemon only its own clique entry, ...); the emulator must refuse
what kube-apiserver refuses, or a test of those limits passes here and proves nothing. A
request is checked after schema validation and before it is stored, against every
binding whose policy matches it:

- `matchConstraints` and the binding's `matchResources`: resource rules (groups, versions,
  operations, `resource`, `resource/subresource`, `*`, `*/*`), `excludeResourceRules`,
  label selectors on the object and its namespace;
- `matchConditions`, `variables`, `validations` (expression, message, messageExpression,
  reason) as CEL over `object`, `oldObject`, `request` (operation, namespace, name,
  resource, subResource, kind, dryRun, userInfo with its extra) and `variables`;
- a denial answers as the real server does: `<resource> "<name>" is forbidden:
  ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>`
  with the code of the validation's reason (422 Invalid by default). An expression that
  cannot be evaluated denies the request under `failurePolicy: Fail` (the default).

CEL is cel-python's: the policies' expressions use its common subset with Kubernetes' CEL
(macros, `has`, string functions); what it cannot compile is reported in the denial.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import celpy
from celpy import celtypes

from sim.apiserver.authn import UserInfo
from sim.apiserver.errors import ApiError, Cause
from sim.apiserver.resources import ResourceInfo
from sim.apiserver.store import Obj, Store
from sim.apiserver.workload_rules import selector_matches

log = logging.getLogger(__name__)

GROUP: Final = "admissionregistration.k8s.io"
POLICIES: Final = (GROUP, "validatingadmissionpolicies")
BINDINGS: Final = (GROUP, "validatingadmissionpolicybindings")
_CODES: Final = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}


@dataclass(frozen=True)
class Attributes:
    """What admission knows of one request."""

    operation: str  # CREATE | UPDATE | DELETE
    group: str
    version: str
    resource: str
    subresource: str
    kind: str
    namespace: str
    name: str
    user: Mapping[str, Any]  # username, uid, groups, extra
    dry_run: bool = False


class _EvaluationError(Exception):
    """An expression that did not evaluate to a value."""


class AdmissionPolicies:
    """Evaluates the stored policies and bindings on each write."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}

    # --- entry point ---------------------------------------------------------------------

    def validate(self, operation: str, info: ResourceInfo, subresource: str, new: Obj | None,
                 old: Obj | None, user: UserInfo | None, dry_run: bool) -> None:
        """Lifecycle's validating-admission hook: one write, as the server saw it."""
        md = (new or old or {}).get("metadata") or {}
        namespace = md.get("namespace", "") if info.namespaced else ""
        ns_labels = None
        if namespace:
            ns = self._store.get(("", "namespaces"), "", namespace)
            ns_labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
        who = user or UserInfo("")
        attrs = Attributes(
            operation=operation, group=info.group, version=info.version,
            resource=info.plural, subresource=subresource, kind=info.kind,
            namespace=namespace, name=str(md.get("name") or ""),
            user={"username": who.name, "uid": who.uid, "groups": list(who.groups),
                  "extra": {k: list(v) for k, v in who.extra.items()}},
            dry_run=dry_run)
        self.check(attrs, new, old, ns_labels)

    def check(self, attrs: Attributes, new: Obj | None, old: Obj | None,
              namespace_labels: Mapping[str, str] | None) -> None:
        """Raise the denial of the first binding that denies the request, if any."""
        policies = {p["metadata"]["name"]: p for p in self._store.list(POLICIES)}
        if not policies:
            return
        for binding in self._store.list(BINDINGS):
            spec = binding.get("spec") or {}
            policy = policies.get(spec.get("policyName") or "")
            if policy is None or "Deny" not in (spec.get("validationActions") or ()):
                continue
            pspec = policy.get("spec") or {}
            obj = new if new is not None else old
            if not _matches(pspec.get("matchConstraints") or {}, attrs, obj, namespace_labels):
                continue
            if spec.get("matchResources") and not _matches(
                    spec["matchResources"], attrs, obj, namespace_labels, require_rules=False):
                continue
            message, reason = self._evaluate(pspec, attrs, new, old)
            if message is None:
                continue
            text = (f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding "
                    f"'{binding['metadata']['name']}' denied request: {message}")
            qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
            raise ApiError(_CODES.get(reason, 422), reason,
                           f'{qualified} "{attrs.name}" is forbidden: {text}',
                           group=attrs.group, kind=attrs.resource, name=attrs.name,
                           causes=[Cause("", "", text)])

    # --- evaluation ----------------------------------------------------------------------

    def _evaluate(self, spec: Mapping[str, Any], attrs: Attributes, new: Obj | None,
                  old: Obj | None) -> tuple[str | None, str]:
        """(denial message, reason), or (None, "") when the policy admits the request."""
        fail = (spec.get("failurePolicy") or "Fail") == "Fail"
        activation: dict[str, Any] = {"request": celpy.json_to_cel(_request(attrs))}
        conditions = [c.get("expression") or "" for c in spec.get("matchConditions") or ()]
        try:
            # Most writes fail a condition on the request alone (another user): they need
            # no CEL copy of the objects, which for a Node costs more than the rest.
            if not any("bject" in c for c in conditions):
                for condition in conditions:
                    if not self._bool(condition, activation):
                        return None, ""
                conditions = []
            activation["object"] = celpy.json_to_cel(new)
            activation["oldObject"] = celpy.json_to_cel(old)
            for condition in conditions:
                if not self._bool(condition, activation):
                    return None, ""
            variables: dict[str, Any] = {}
            activation["variables"] = celtypes.MapType({})
            for variable in spec.get("variables") or ():
                variables[variable["name"]] = self._value(variable["expression"], activation)
                activation["variables"] = celtypes.MapType(
                    {celtypes.StringType(k): v for k, v in variables.items()})
            for validation in spec.get("validations") or ():
                expression = validation.get("expression") or ""
                if self._bool(expression, activation):
                    continue
                return self._message(validation, activation), str(
                    validation.get("reason") or "Invalid")
        except _EvaluationError as err:
            if fail:
                return f"expression evaluation failed: {err}", "Invalid"
            return None, ""
        return None, ""

    def _program(self, expression: str) -> Any:
        program = self._programs.get(expression)
        if program is None:
            try:
                program = self._env.program(self._env.compile(expression))
            except Exception as err:  # a CEL compile error names the expression
                raise _EvaluationError(f"compilation failed: {err}") from None
            self._programs[expression] = program
        return program

    def _value(self, expression: str, activation: dict[str, Any]) -> Any:
        try:
            result = self._program(expression).evaluate(activation)
        except _EvaluationError:
            raise
        except Exception as err:
            raise _EvaluationError(str(err)) from None
        if isinstance(result, celpy.CELEvalError):
            raise _EvaluationError(str(result.args[0] if result.args else result))
        return result

    def _bool(self, expression: str, activation: dict[str, Any]) -> bool:
        result = self._value(expression, activation)
        if not isinstance(result, bool | celtypes.BoolType):
            raise _EvaluationError(f"expression {expression!r} is not a boolean")
        return bool(result)

    def _message(self, validation: Mapping[str, Any], activation: dict[str, Any]) -> str:
        if validation.get("messageExpression"):
            try:
                text = self._value(validation["messageExpression"], activation)
            except _EvaluationError:
                text = None
            line = str(text).strip() if isinstance(text, str) else ""  # StringType is a str
            if line and "\n" not in line:
                return line
        if validation.get("message"):
            return str(validation["message"])
        return f"failed expression: {validation.get('expression')}"


def _request(attrs: Attributes) -> dict[str, Any]:
    return {
        "operation": attrs.operation,
        "namespace": attrs.namespace,
        "name": attrs.name,
        "resource": {"group": attrs.group, "version": attrs.version, "resource": attrs.resource},
        "subResource": attrs.subresource,
        "kind": {"group": attrs.group, "version": attrs.version, "kind": attrs.kind},
        "dryRun": attrs.dry_run,
        "userInfo": dict(attrs.user),
    }


def _listed(values: Any, value: str) -> bool:
    return "*" in (values or ()) or value in (values or ())


def _rule_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    if not (_listed(rule.get("apiGroups"), attrs.group)
            and _listed(rule.get("apiVersions"), attrs.version)
            and _listed(rule.get("operations"), attrs.operation)):
        return False
    wanted = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    for pattern in rule.get("resources") or ():
        if pattern == "*/*" or pattern == wanted:
            return True
        if pattern == "*" and not attrs.subresource:
            return True
        head, _, tail = pattern.partition("/")
        if tail == "*" and head == attrs.resource:
            return True
        if head == "*" and tail and tail == attrs.subresource:
            return True
    return False


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A policy's object or namespace selector: absent or empty selects everything."""
    return not selector or selector_matches(selector, labels)


def _matches(match: Mapping[str, Any], attrs: Attributes, obj: Obj | None,
             namespace_labels: Mapping[str, str] | None, *, require_rules: bool = True) -> bool:
    rules = match.get("resourceRules")
    if (rules or require_rules) and not any(_rule_matches(r, attrs) for r in rules or ()):
        return False
    if any(_rule_matches(r, attrs) for r in match.get("excludeResourceRules") or ()):
        return False
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    if not _selector_matches(match.get("objectSelector"), labels):
        return False
    return namespace_labels is None or _selector_matches(
        match.get("namespaceSelector"), namespace_labels)
