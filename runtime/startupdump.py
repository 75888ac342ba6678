"""The startup record the reference's components log at level 0: its commit, the full
feature-gate map and every parsed flag, in one message.

Admins of the reference find a component's effective configuration there, and its end-to-end
tests grep it (`klogVerbosity`, `nodeName`, `additionalNamespaces`, `"MPSSupport":false`:
tests/data/reference-wording.yaml, kp-startup-config and ctl-startup-config). The layout is
the reference's (pkg/flags/utils.go of kubernetes-sigs/dra-driver-nvidia-gpu: `Commit:`,
a blank line, `Feature gates:` as Go's `%#v` of the map, `Flags:` as a go-spew dump); the
values are ours, under the reference's camelCase names where a flag has one.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from pathlib import Path

from api.featuregates import FeatureGates

# Our flag attributes whose reference name is not just their camelCase.
_REFERENCE_NAMES: Mapping[str, str] = {"verbosity": "klogVerbosity"}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def gate_map(gates: FeatureGates) -> str:
    """Go's `%#v` of a map[string]bool: keys sorted, `"Name":bool` pairs."""
    pairs = ", ".join(f'"{name}":{str(gates[name]).lower()}' for name in sorted(gates))
    return f"map[string]bool{{{pairs}}}"


def _spew_value(value: object) -> str:
    if isinstance(value, bool):
        return f"(bool) {str(value).lower()}"
    if isinstance(value, int):
        return f"(int) {value}"
    if isinstance(value, float):
        return f"(float64) {value:g}"
    if isinstance(value, str | Path):
        text = str(value)
        return f'(string) (len={len(text)}) "{text}"'
    if isinstance(value, list | tuple):
        items = ", ".join(_spew_value(v) for v in value)
        return f"([]string) (len={len(value)}) {{{items}}}"
    if value is None:
        return "(interface {}) <nil>"
    return f"({type(value).__name__}) {value}"


def flags_dump(args: argparse.Namespace, hidden: frozenset[str] = frozenset()) -> str:
    """A go-spew-like dump of the parsed flags, one `name: (type) value,` line each, sorted;
    `hidden` attributes (secrets, callables) are left out."""
    fields = []
    for attr, value in sorted(vars(args).items()):
        if attr in hidden or attr.startswith("_") or callable(value):
            continue
        name = _REFERENCE_NAMES.get(attr, camel(attr))
        fields.append(f" {name}: {_spew_value(value)},")
    return "(*flags.Flags)({\n" + "\n".join(fields) + "\n})"


def log_startup(log: logging.Logger, commit: str, gates: FeatureGates,
                args: argparse.Namespace) -> None:
    log.info("Commit: %s\n\nFeature gates: %s\nFlags: %s", commit, gate_map(gates),
             flags_dump(args, hidden=frozenset({"func", "command", "handler"})))
