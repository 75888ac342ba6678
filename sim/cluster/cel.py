"""DeviceClass CEL selectors evaluated as the kube-scheduler's DRA allocator does.

The scheduler must match devices to classes the way a real cluster would, so a driver
whose selectors are wrong fails here too. The `device` variable carries `driver`,
`attributes` (domain -> name -> typed value; unqualified slice attribute names belong to
the driver's domain) and `capacity` (same shape). Errors count as no match, as upstream.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import celpy
import orjson
from celpy import celtypes

log = logging.getLogger(__name__)
# Results remembered per evaluator before it starts over (bounds a long run's memory).
MEMO_LIMIT = 20_000


def _attribute_value(value: Mapping[str, Any]) -> Any:
    """One DeviceAttribute (`{string|int|bool|version: ...}`) as a CEL value."""
    if "string" in value:
        return celtypes.StringType(value["string"])
    if "int" in value:
        return celtypes.IntType(int(value["int"]))
    if "bool" in value:
        return celtypes.BoolType(bool(value["bool"]))
    if "version" in value:
        # Upstream exposes a semver type; a string keeps equality checks working.
        return celtypes.StringType(value["version"])
    raise ValueError(f"attribute has no known type: {sorted(value)}")


def _capacity_value(value: Any) -> Any:
    """A DeviceCapacity (`{value: quantity}`) as its quantity string."""
    if isinstance(value, Mapping):
        value = value.get("value")
    return celtypes.StringType(str(value))


def _by_domain(driver: str, entries: Mapping[str, Any], convert: Any) -> celtypes.MapType:
    """Group `domain/name` (or bare `name`, the driver's domain) into domain -> name -> value."""
    out: dict[str, dict[str, Any]] = {}
    for qualified, value in entries.items():
        domain, sep, name = qualified.rpartition("/")
        if not sep:
            domain = driver
        out.setdefault(domain, {})[name] = convert(value)
    return celtypes.MapType(
        {
            celtypes.StringType(d): celtypes.MapType(
                {celtypes.StringType(n): v for n, v in names.items()}
            )
            for d, names in out.items()
        }
    )


def device_value(driver: str, device: Mapping[str, Any]) -> celtypes.MapType:
    """The CEL `device` variable for one ResourceSlice device (v1, or v1beta1's `basic`)."""
    body = device.get("basic") if isinstance(device.get("basic"), Mapping) else device
    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): _by_domain(
                driver, body.get("attributes") or {}, _attribute_value
            ),
            celtypes.StringType("capacity"): _by_domain(
                driver, body.get("capacity") or {}, _capacity_value
            ),
        }
    )


class SelectorEvaluator:
    """Compiles each expression once (per evaluator) and evaluates it against devices."""

    def __init__(self) -> None:
        self._env = celpy.Environment()
        # expression -> compiled program, or the compile error text (also no match).
        self._programs: dict[str, Any] = {}
        # (expression, driver, the device's attributes and capacity) -> the answer. What
        # `device` holds is all an expression can see, and a rack's nodes publish the same
        # devices: without this, placing N pods evaluated N x N devices (cel-python
        # interprets each evaluation: about a millisecond), the sim's scheduler, not the
        # driver, was what a 144-node bring-up waited on (tests/bench/bench_bringup.py).
        self._memo: dict[tuple[str, str, bytes], bool] = {}

    def _program(self, expression: str) -> Any:
        if expression not in self._programs:
            try:
                self._programs[expression] = self._env.program(self._env.compile(expression))
            except Exception as err:
                log.warning("CEL selector %r does not compile: %s", expression, err)
                self._programs[expression] = f"compile error: {err}"
        return self._programs[expression]

    def selector_matches(self, expression: str, driver: str, device: Mapping[str, Any]) -> bool:
        """True only if the expression evaluates to boolean true for this device."""
        body = device.get("basic") if isinstance(device.get("basic"), Mapping) else device
        seen = orjson.dumps([body.get("attributes"), body.get("capacity")],
                            option=orjson.OPT_SORT_KEYS)
        key = (expression, driver, seen)
        answer = self._memo.get(key)
        if answer is None:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            answer = self._memo[key] = self._evaluate(expression, driver, device)
        return answer

    def _evaluate(self, expression: str, driver: str, device: Mapping[str, Any]) -> bool:
        program = self._program(expression)
        if isinstance(program, str):
            return False
        name = device.get("name", "?")
        try:
            result = program.evaluate({"device": device_value(driver, device)})
        except Exception as err:
            log.debug("CEL selector %r on device %s: error %s (no match)", expression, name, err)
            return False
        if isinstance(result, Exception):  # cel-python may return its error value
            log.debug("CEL selector %r on device %s: error %s (no match)", expression, name, result)
            return False
        if not isinstance(result, celtypes.BoolType | bool):
            log.debug(
                "CEL selector %r on device %s: %r is not a bool (no match)",
                expression,
                name,
                result,
            )
            return False
        return bool(result)
