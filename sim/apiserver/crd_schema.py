"""Admission of custom resources: what kube-apiserver does with one CRD version's schema.

Decode (prune, drop nulls, default), validate the structural schema, the list types and
the transition rules, ratcheting on update, and answer 400 or 422 with the real server's
field paths, reasons and messages, so clients see the same errors as against a cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from sim.apiserver.crd_lists import list_errors
from sim.apiserver.crd_pruning import apply_defaults, integral_floats_to_int, prune, prune_nulls
from sim.apiserver.crd_rules import rule_errors, rule_problems
from sim.apiserver.crd_values import schema_errors
from sim.apiserver.errors import Cause, bad_request, invalid
from sim.apiserver.go_format import go_quote
from sim.apiserver.json_values import ABSENT, JSON, name_of
from sim.apiserver.schema_nodes import Schema, rules_of, walk_nodes


class CRDSchema:
    """One CRD version's `openAPIV3Schema`, applied to custom resources as the server does.

    Construction refuses (ValueError) rules the emulator cannot evaluate, so a CRD whose
    validation would be weaker here than on a cluster can never be in use.
    """

    def __init__(
        self, schema: Schema, *, group: str = "", kind: str = "", version: str = ""
    ) -> None:
        if not isinstance(schema, Mapping):
            raise ValueError("openAPIV3Schema must be an object")
        problems = [f"{where}: {why}" for where, why in rule_problems(schema, "openAPIV3Schema")]
        if problems:
            raise ValueError("; ".join(problems))
        self.schema: Schema = schema
        self.group = group
        self.kind = kind
        self.version = version
        self.has_rules = any(rules_of(s) for s in walk_nodes(schema))

    @classmethod
    def from_crd(cls, crd: Mapping[str, Any], version: str | None = None) -> CRDSchema:
        """The schema of `version` (default: the storage version) of a CRD object."""
        spec = crd.get("spec") or {}
        versions = spec.get("versions") or []
        chosen = next(
            (v for v in versions if (v.get("name") == version if version else v.get("storage"))),
            None,
        )
        if chosen is None:
            raise KeyError(version or "storage version")
        schema = (chosen.get("schema") or {}).get("openAPIV3Schema") or {}
        return cls(
            schema,
            group=spec.get("group", ""),
            kind=(spec.get("names") or {}).get("kind", ""),
            version=chosen["name"],
        )

    # -- the public steps ---------------------------------------------------------------

    def admit_create(
        self, obj: Mapping[str, Any], *, field_validation: str = "Warn"
    ) -> dict[str, Any]:
        """The object as stored on create (pruned, defaulted), or ApiError (422 / 400)."""
        stored = self._decode(obj, field_validation)
        causes = schema_errors(stored, self.schema, ABSENT)
        causes += list_errors(stored, self.schema, "")
        causes += self._rule_errors(stored, ABSENT, causes)
        if causes:
            raise invalid(self.group, self.kind, name_of(stored), causes)
        return stored

    def admit_update(
        self, new: Mapping[str, Any], old: Mapping[str, Any], *, field_validation: str = "Warn"
    ) -> dict[str, Any]:
        """Like admit_create, plus transition rules and ratcheting against the old object."""
        stored = self._decode(new, field_validation)
        previous = self.default(old) if isinstance(old, Mapping) else ABSENT
        causes = schema_errors(stored, self.schema, previous)
        if previous is ABSENT or not list_errors(previous, self.schema, ""):
            causes += list_errors(stored, self.schema, "")
        causes += self._rule_errors(stored, previous, causes)
        if causes:
            raise invalid(self.group, self.kind, name_of(stored), causes)
        return stored

    def default(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Pruned and defaulted copy, no validation (what a read from storage returns)."""
        return self._decode(obj, "Ignore")

    def unknown_fields(self, obj: Mapping[str, Any]) -> list[str]:
        """Paths pruning would drop (`spec.numnodes`): the server's `unknown field` warnings."""
        pruned: list[str] = []
        prune(copy.deepcopy(dict(obj)), self.schema, "", pruned, root=True)
        return pruned

    def validate(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[Cause]:
        """All causes for an already pruned and defaulted object (empty when valid)."""
        previous = old if old is not None else ABSENT
        causes = schema_errors(obj, self.schema, previous)
        causes += list_errors(obj, self.schema, "")
        causes += self._rule_errors(obj, previous, causes)
        return causes

    # -- decoding: prune, nulls, defaults -----------------------------------------------

    def _decode(self, obj: Mapping[str, Any], field_validation: str) -> dict[str, Any]:
        if not isinstance(obj, Mapping):
            raise bad_request(
                f"{self.kind} in version {go_quote(self.version)} cannot be "
                f"handled as a {self.kind}: the body must be a JSON object"
            )
        pruned: list[str] = []
        out = prune(copy.deepcopy(dict(obj)), self.schema, "", pruned, root=True)
        if pruned and field_validation == "Strict":
            listed = ", ".join(f"unknown field {go_quote(p)}" for p in pruned)
            raise bad_request(
                f"{self.kind} in version {go_quote(self.version)} cannot be "
                f"handled as a {self.kind}: strict decoding error: {listed}"
            )
        prune_nulls(out, self.schema)
        apply_defaults(out, self.schema)
        return integral_floats_to_int(out)

    # -- x-kubernetes-validations -------------------------------------------------------

    def _rule_errors(self, new: JSON, old: Any, causes: list[Cause]) -> list[Cause]:
        return rule_errors(new, old, self.schema, causes) if self.has_rules else []
