"""The simulated DRA scheduler against the API emulator."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from eventually import eventually_async
from kubernetes import client

from api import names
from runtime.kubecall import call
from sim.cluster.claims import ClaimController
from sim.cluster.scheduler import Scheduler

CLIQUE_LABEL = "nvidia.com/gpu.clique"


async def wait_until(check: Callable[[], Any], timeout: float = 10) -> Any:
    """Poll a blocking check (off the loop) until it returns something truthy."""
    return await eventually_async(lambda: call(check), check.__qualname__, timeout=timeout,
                                  interval=0.05)


def scheduler_rounds(scheduler: Scheduler) -> list[None]:
    """One entry per scheduling round `scheduler` completes from now on (each retries every
    pending pod)."""
    rounds: list[None] = []
    real = scheduler.schedule_pending

    async def schedule_pending() -> None:
        await real()
        rounds.append(None)

    scheduler.schedule_pending = schedule_pending  # type: ignore[method-assign]
    return rounds


def _cluster(k8s, nodes: dict[str, dict[str, str]], slices: list[str], classes: bool = True):
    core, resource = client.CoreV1Api(k8s), client.ResourceV1Api(k8s)
    if classes:
        for name, expr in (
            (names.DEVICE_CLASS_DEFAULT_CHANNEL, names.DEVICE_CLASS_DEFAULT_CHANNEL_SELECTOR),
            (names.DEVICE_CLASS_DAEMON, names.DEVICE_CLASS_DAEMON_SELECTOR),
        ):
            resource.create_device_class(
                {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": expr}}]}}
            )
    for name, labels in nodes.items():
        # What a kubelet reports: the scheduler places pods only where pods are allocatable.
        core.create_node({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"pods": "110"}, "capacity": {"pods": "110"}},
        })  # fmt: skip
    for node in slices:
        resource.create_resource_slice(
            {
                "metadata": {"name": f"{node}-{names.DRIVER_NAME}"},
                "spec": {
                    "driver": names.DRIVER_NAME,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": "channel-0",
                            "attributes": {"type": {"string": "channel"}, "id": {"int": 0}},
                        },
                        {
                            "name": "daemon-0",
                            "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}},
                        },
                    ],
                },
            }
        )
    resource.create_namespaced_resource_claim_template(
        "default",
        {
            "metadata": {"name": "channel"},
            "spec": {"spec": _claim_spec(names.DEVICE_CLASS_DEFAULT_CHANNEL)},
        },
    )
    return core, resource


def _claim_spec(device_class: str) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [{"name": "channel", "exactly": {"deviceClassName": device_class}}],
            "config": [
                {
                    "requests": ["channel"],
                    "opaque": {"driver": names.DRIVER_NAME, "parameters": {"a": 1}},
                }
            ],
        }
    }


def _pod(name: str, claim: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    claim = claim or {"resourceClaimTemplateName": "channel"}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "cd"}]}}],
            "resourceClaims": [{"name": "cd", **claim}],
            **spec,
        },
    }


def _run(k8s, body: Callable[[Scheduler], Awaitable[None]]) -> None:
    async def main() -> None:
        controller, scheduler = ClaimController(k8s), Scheduler(k8s, retry_seconds=0.2)
        controller.start()
        scheduler.start()
        try:
            await body(scheduler)
        finally:
            await scheduler.stop()
            await controller.stop()

    asyncio.run(main())


async def _placed(scheduler: Scheduler, core, pod: str) -> str:
    """The node chosen, once the pod is bound there through pods/binding."""
    node = await wait_until(lambda: scheduler.assigned.get(f"default/{pod}"))
    await wait_until(lambda: core.read_namespaced_pod(pod, "default").spec.node_name == node)
    assert f"default/{pod}" not in scheduler.bind_refused
    return node


def _claim_of(core, resource, pod: str):
    p = core.read_namespaced_pod(pod, "default")
    name = p.status.resource_claim_statuses[0].resource_claim_name
    return resource.read_namespaced_resource_claim(name, "default")


async def _unschedulable(core, pod: str) -> str:
    def condition():
        for c in core.read_namespaced_pod(pod, "default").status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c.message
        return None

    return await wait_until(condition)


def _events(core, pod: str) -> list[Any]:
    return [
        e
        for e in core.list_namespaced_event("default").items
        if e.involved_object.name == pod and e.reason == "FailedScheduling"
    ]


def test_allocates_and_binds(k8s) -> None:
    core, resource = _cluster(k8s, {"n1": {}, "n2": {}}, slices=["n2"])

    async def body(scheduler: Scheduler) -> None:
        pod = await call(core.create_namespaced_pod, "default", _pod("w"))
        assert await _placed(scheduler, core, "w") == "n2"
        claim = await call(_claim_of, core, resource, "w")
        alloc = k8s.sanitize_for_serialization(claim.status.allocation)
        assert alloc["devices"]["results"] == [
            {"request": "channel", "driver": names.DRIVER_NAME, "pool": "n2", "device": "channel-0"}
        ]
        assert alloc["devices"]["config"] == [
            {
                "source": "FromClaim",
                "requests": ["channel"],
                "opaque": {"driver": names.DRIVER_NAME, "parameters": {"a": 1}},
            }
        ]
        term = alloc["nodeSelector"]["nodeSelectorTerms"][0]
        assert term == {
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]
        }
        (ref,) = claim.status.reserved_for
        assert (ref.resource, ref.name, ref.uid) == ("pods", "w", pod.metadata.uid)

    _run(k8s, body)


def test_node_selector_affinity_and_taints(k8s) -> None:
    nodes = {"n1": {}, "n2": {"zone": "b"}, "n3": {CLIQUE_LABEL: "x"}}
    core, _ = _cluster(k8s, nodes, slices=list(nodes))
    core.patch_node(
        "n1", {"spec": {"taints": [{"key": "gpu", "value": "off", "effect": "NoSchedule"}]}}
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": CLIQUE_LABEL, "operator": "In", "values": ["x"]}]}
                ]
            }
        }
    }

    async def body(scheduler: Scheduler) -> None:
        await call(core.create_namespaced_pod, "default", _pod("aff", affinity=affinity))
        await call(core.create_namespaced_pod, "default", _pod("sel", nodeSelector={"zone": "b"}))
        assert await _placed(scheduler, core, "aff") == "n3"
        assert await _placed(scheduler, core, "sel") == "n2"
        await call(core.create_namespaced_pod, "default", _pod("plain"))
        tolerate = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
        # n1 is tainted, n2 and n3 hold their only channel already.
        message = await _unschedulable(core, "plain")
        assert message == (
            "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: off}, "
            "2 node(s) cannot allocate all claims."
        )
        await call(core.create_namespaced_pod, "default", _pod("tol", tolerations=tolerate))
        assert await _placed(scheduler, core, "tol") == "n1"

    _run(k8s, body)


def test_device_taken_goes_elsewhere_then_unschedulable(k8s) -> None:
    core, resource = _cluster(k8s, {"n1": {}, "n2": {}}, slices=["n1", "n2"])

    async def body(scheduler: Scheduler) -> None:
        await call(core.create_namespaced_pod, "default", _pod("a"))
        assert await _placed(scheduler, core, "a") == "n1"
        await call(core.create_namespaced_pod, "default", _pod("b"))
        assert await _placed(scheduler, core, "b") == "n2"
        await call(core.create_namespaced_pod, "default", _pod("c"))
        expected = "0/2 nodes are available: 2 node(s) cannot allocate all claims."
        assert await _unschedulable(core, "c") == expected
        events = await wait_until(lambda: _events(core, "c"))
        assert events[0].type == "Warning" and events[0].message == expected
        rounds = scheduler_rounds(scheduler)
        await eventually_async(lambda: len(rounds) >= 3, "three more scheduling rounds")
        assert len(await call(_events, core, "c")) == 1  # still one event
        assert "c" not in scheduler.assigned

        # A pod sharing a's (allocated) claim joins it on n1.
        shared = (await call(_claim_of, core, resource, "a")).metadata.name
        await call(
            core.create_namespaced_pod,
            "default",
            _pod("s", {"resourceClaimName": shared}, nodeSelector={}),
        )
        assert await _placed(scheduler, core, "s") == "n1"
        claim = await call(resource.read_namespaced_resource_claim, shared, "default")
        assert [r.name for r in claim.status.reserved_for] == ["a", "s"]

        # Once a's claim is gone with its pods (emulator GC), its device frees up for c.
        # Bound pods wait for their kubelet; none runs here, so delete with grace 0.
        await call(core.delete_namespaced_pod, "s", "default", grace_period_seconds=0)
        await call(core.delete_namespaced_pod, "a", "default", grace_period_seconds=0)
        assert await _placed(scheduler, core, "c") == "n1"

    _run(k8s, body)


def test_missing_device_class(k8s) -> None:
    core, resource = _cluster(k8s, {"n1": {}}, slices=["n1"], classes=False)

    async def body(scheduler: Scheduler) -> None:
        await call(core.create_namespaced_pod, "default", _pod("w"))
        message = await _unschedulable(core, "w")
        assert message.startswith("0/1 nodes are available: ")
        assert f"device class {names.DEVICE_CLASS_DEFAULT_CHANNEL} does not exist" in message
        events = await wait_until(lambda: _events(core, "w"))
        assert events[0].message == message
        claim = await call(_claim_of, core, resource, "w")
        assert claim.status is None or claim.status.allocation is None

    _run(k8s, body)
