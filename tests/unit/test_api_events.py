"""runtime.events.EventRecorder: the rate limit per (object, reason, key), the skipped count in
the next message, the body, truncation, and forgetting old keys."""

from __future__ import annotations

import asyncio
from typing import Any

from runtime import events as events_mod
from runtime.events import MESSAGE_LIMIT, EventRecorder, pod_ref


class FakeCore:
    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.created.append((namespace, body))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def recorder(core: FakeCore, clock: Clock) -> EventRecorder:
    rec = EventRecorder(None, "comp", "node-1", clock=clock, max_in_flight=8)
    rec._core = core  # type: ignore[assignment]
    return rec


POD_A = pod_ref("a", "ns", "uid-a")
POD_B = pod_ref("b", "ns", "uid-b")


def test_rate_limited_per_object_reason_and_key_with_the_skipped_count():
    core, clock = FakeCore(), Clock()

    async def scenario() -> list[bool]:
        rec = recorder(core, clock)
        out = [
            rec.warning(POD_A, "Waiting", "one"),
            rec.warning(POD_B, "Waiting", "other pod"),
            rec.warning(POD_A, "Failed", "other reason"),
            rec.normal(POD_A, "Prepared", "claim 1", key="c1"),
            rec.normal(POD_A, "Prepared", "claim 2", key="c2"),
            rec.warning(POD_A, "Waiting", "two"),
            rec.warning(POD_A, "Waiting", "three"),
        ]
        clock.now += 60
        out.append(rec.warning(POD_A, "Waiting", "four"))
        await rec.close()
        return out

    assert asyncio.run(scenario()) == [True] * 5 + [False, False, True]
    assert [(b["involvedObject"]["name"], b["reason"], b["message"]) for _, b in core.created] == [
        ("a", "Waiting", "one"), ("b", "Waiting", "other pod"), ("a", "Failed", "other reason"),
        ("a", "Prepared", "claim 1"), ("a", "Prepared", "claim 2"),
        ("a", "Waiting", "four (2 more since the last such event)"),
    ]
    namespace, body = core.created[3]
    assert namespace == "ns" and body["type"] == "Normal"
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "a",
                                      "namespace": "ns", "uid": "uid-a"}
    assert body["metadata"] == {"generateName": "a-", "namespace": "ns"}
    assert body["source"] == {"component": "comp", "host": "node-1"}
    assert (body["reportingComponent"], body["reportingInstance"]) == ("comp", "node-1")
    assert body["count"] == 1 and body["firstTimestamp"] == body["lastTimestamp"]


def test_a_long_message_is_cut_but_keeps_the_skipped_count():
    core, clock = FakeCore(), Clock()

    async def scenario() -> None:
        rec = recorder(core, clock)
        rec.warning(POD_A, "R", "x")
        rec.warning(POD_A, "R", "x")
        clock.now += 61
        rec.warning(POD_A, "R", "y" * 5000)
        await rec.close()

    asyncio.run(scenario())
    message = core.created[-1][1]["message"]
    assert len(message) == MESSAGE_LIMIT
    assert message.endswith("... (1 more since the last such event)")


def test_old_keys_are_forgotten(monkeypatch):
    monkeypatch.setattr(events_mod, "_PRUNE_ABOVE", 3)
    core, clock = FakeCore(), Clock()

    async def scenario() -> EventRecorder:
        rec = recorder(core, clock)
        for i in range(3):
            rec.warning(pod_ref(f"p{i}", "ns"), "R", "m")
        rec.warning(pod_ref("p0", "ns"), "R", "m")  # suppressed: its count must survive
        clock.now += 61
        rec.warning(pod_ref("new", "ns"), "R", "m")  # over the bound: sweep
        await rec.close()
        return rec

    rec = asyncio.run(scenario())
    assert sorted(k[0] for k in rec._last) == ["ns/new", "ns/p0"]
