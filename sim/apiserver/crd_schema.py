"""Admission of custom resources: what kube-apiserver does with one CRD version's schema.

Decode (prune, drop nulls, default), validate the structural schema, the list types and
the transition rules, ratcheting on update, and answer 400 or 422 with the real server's
field paths, reasons and messages, so clients see the same errors as against a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.apiserver.crd_lists import list_errors
from sim.apiserver.crd_pruning import apply_defaults, integral_floats_to_int, prune, prune_nulls
from sim.apiserver.crd_rules import rule_errors, rule_problems
from sim.apiserver.crd_values import ValueSchema
from sim.apiserver.errors import Cause, bad_request, invalid
from sim.apiserver.go_format import go_quote
from sim.apiserver.json_values import ABSENT, JSON, json_copy, name_of
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
        self._values = ValueSchema(schema)

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

    def admit(
        self,
        new: Mapping[str, Any],
        old: Mapping[str, Any] | None = None,
        *,
        field_validation: str = "Warn",
        warnings: list[str] | None = None,
    ) -> dict[str, Any]:
        """The object as stored (pruned, defaulted), or ApiError (422 / 400); with an `old`
        object, transition rules and ratcheting too. Under `Warn`, the `unknown field`
        warnings are added to `warnings` (before a 422: decoding comes first)."""
        stored = self._decode(new, field_validation, warnings)
        previous = self.default(old) if isinstance(old, Mapping) else ABSENT
        causes = self._values.errors(stored, previous)
        # List types ratchet as a whole: an old object that broke them does not count.
        listed = list_errors(stored, self.schema, "")
        if listed and (previous is ABSENT or not list_errors(previous, self.schema, "")):
            causes += listed
        causes += self._rule_errors(stored, previous, causes)
        if causes:
            raise invalid(self.group, self.kind, name_of(stored), causes)
        return stored

    def admit_create(
        self, obj: Mapping[str, Any], *, field_validation: str = "Warn"
    ) -> dict[str, Any]:
        """`admit` of a new object."""
        return self.admit(obj, field_validation=field_validation)

    def admit_update(
        self, new: Mapping[str, Any], old: Mapping[str, Any], *, field_validation: str = "Warn"
    ) -> dict[str, Any]:
        """`admit` of a change to `old`."""
        return self.admit(new, old, field_validation=field_validation)

    def default(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Pruned and defaulted copy, no validation (what a read from storage returns)."""
        return self._decode(obj, "Ignore")

    def unknown_fields(self, obj: Mapping[str, Any]) -> list[str]:
        """Paths pruning would drop (`spec.numnodes`): the server's `unknown field` warnings."""
        pruned: list[str] = []
        prune(dict(obj), self.schema, "", pruned, root=True)  # builds a new object
        return pruned

    def validate(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[Cause]:
        """All causes for an already pruned and defaulted object (empty when valid)."""
        previous = old if old is not None else ABSENT
        causes = self._values.errors(obj, previous)
        causes += list_errors(obj, self.schema, "")
        causes += self._rule_errors(obj, previous, causes)
        return causes

    # -- decoding: prune, nulls, defaults -----------------------------------------------

    def _decode(
        self, obj: Mapping[str, Any], field_validation: str, warnings: list[str] | None = None
    ) -> dict[str, Any]:
        if not isinstance(obj, Mapping):
            raise bad_request(
                f"{self.kind} in version {go_quote(self.version)} cannot be "
                f"handled as a {self.kind}: the body must be a JSON object"
            )
        pruned: list[str] = []
        out = prune(json_copy(dict(obj)), self.schema, "", pruned, root=True)
        if pruned and field_validation == "Strict":
            listed = ", ".join(f"unknown field {go_quote(p)}" for p in pruned)
            raise bad_request(
                f"{self.kind} in version {go_quote(self.version)} cannot be "
                f"handled as a {self.kind}: strict decoding error: {listed}"
            )
        if warnings is not None and field_validation == "Warn":
            warnings += [f'unknown field "{p}"' for p in pruned]
        prune_nulls(out, self.schema)
        apply_defaults(out, self.schema)
        return integral_floats_to_int(out)

    # -- x-kubernetes-validations -------------------------------------------------------

    def _rule_errors(self, new: JSON, old: Any, causes: list[Cause]) -> list[Cause]:
        return rule_errors(new, old, self.schema, causes) if self.has_rules else []
