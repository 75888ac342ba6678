"""The simulated ResourceClaim controller and the DeviceClass CEL selectors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from eventually import eventually_async
from kubernetes import client
from kubernetes.client.rest import ApiException
from scenario_env import pod_syncs, synced_since

from api import names
from runtime.kubecall import call
from sim.cluster.cel import SelectorEvaluator
from sim.cluster.claims import POD_CLAIM_NAME_ANNOTATION, ClaimController


def _device(name: str, type_: str, id_: int) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": type_}, "id": {"int": id_}}}


@pytest.mark.parametrize(
    ("expression", "device", "expected"),
    [
        (names.DEVICE_CLASS_DEFAULT_CHANNEL_SELECTOR, _device("channel-0", "channel", 0), True),
        (names.DEVICE_CLASS_DEFAULT_CHANNEL_SELECTOR, _device("channel-1", "channel", 1), False),
        (names.DEVICE_CLASS_DEFAULT_CHANNEL_SELECTOR, _device("daemon-0", "daemon", 0), False),
        (names.DEVICE_CLASS_DAEMON_SELECTOR, _device("daemon-0", "daemon", 0), True),
        (names.DEVICE_CLASS_DAEMON_SELECTOR, _device("channel-0", "channel", 0), False),
        # Qualified attribute names keep their own domain.
        (
            "device.attributes['example.com'].model == 'x'",
            {"name": "d", "attributes": {"example.com/model": {"string": "x"}}},
            True,
        ),
        ("device.attributes['example.com'].model == 'x'", _device("d", "channel", 0), False),
        (
            "device.capacity['compute-domain.nvidia.com'].mem == '1Gi'",
            {"name": "d", "capacity": {"mem": {"value": "1Gi"}}},
            True,
        ),
        ("device.attributes['compute-domain.nvidia.com'].id", _device("d", "daemon", 0), False),
        ("device.driver ==", _device("d", "daemon", 0), False),
    ],
)
def test_selectors(expression: str, device: dict[str, Any], expected: bool) -> None:
    assert SelectorEvaluator().selector_matches(expression, names.DRIVER_NAME, device) is expected


def test_other_driver_does_not_match() -> None:
    evaluator = SelectorEvaluator()
    assert not evaluator.selector_matches(
        names.DEVICE_CLASS_DAEMON_SELECTOR, "other.example.com", _device("daemon-0", "daemon", 0)
    )


def test_one_evaluator_answers_each_device_by_what_it_holds() -> None:
    """Answers are remembered by what a selector can see (driver, attributes, capacity):
    every node's channel-0 is one evaluation, and no other device gets its answer."""
    evaluator = SelectorEvaluator()
    selector = names.DEVICE_CLASS_DEFAULT_CHANNEL_SELECTOR
    for _ in range(3):  # asked again, as the scheduler does for every pod and node
        assert evaluator.selector_matches(selector, names.DRIVER_NAME,
                                          _device("channel-0", "channel", 0))
        assert not evaluator.selector_matches(selector, names.DRIVER_NAME,
                                              _device("channel-0", "channel", 1))
        assert not evaluator.selector_matches(selector, names.DRIVER_NAME,
                                              _device("channel-0", "daemon", 0))
        assert not evaluator.selector_matches(selector, "other.example.com",
                                              _device("channel-0", "channel", 0))
        assert evaluator.selector_matches(
            "device.capacity['compute-domain.nvidia.com'].mem == '1Gi'", names.DRIVER_NAME,
            {"name": "d", "capacity": {"mem": {"value": "1Gi"}}})
        assert not evaluator.selector_matches(
            "device.capacity['compute-domain.nvidia.com'].mem == '1Gi'", names.DRIVER_NAME,
            {"name": "d", "capacity": {"mem": {"value": "2Gi"}}})


async def wait_until(check: Callable[[], Any], timeout: float = 10) -> Any:
    """Poll a blocking check (off the loop) until it returns something truthy."""
    return await eventually_async(lambda: call(check), check.__qualname__, timeout=timeout,
                                  interval=0.05)


TEMPLATE = {
    "metadata": {"name": "channel-tpl", "namespace": "default"},
    "spec": {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "channel",
                        "exactly": {"deviceClassName": names.DEVICE_CLASS_DEFAULT_CHANNEL},
                    }
                ]
            }
        },
    },
}


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "cd"}]}}],
            "resourceClaims": [{"name": "cd", "resourceClaimTemplateName": "channel-tpl"}],
        },
    }


def test_claim_from_template(k8s) -> None:
    core, resource = client.CoreV1Api(k8s), client.ResourceV1Api(k8s)
    resource.create_namespaced_resource_claim_template("default", TEMPLATE)

    async def main() -> None:
        controller = ClaimController(k8s)
        synced = pod_syncs(controller)
        controller.start()
        try:
            pod = await call(core.create_namespaced_pod, "default", _pod("work"))

            def recorded() -> list[Any] | None:
                p = core.read_namespaced_pod("work", "default")
                return p.status.resource_claim_statuses

            statuses = await wait_until(recorded)
            assert len(statuses) == 1 and statuses[0].name == "cd"
            claim_name = statuses[0].resource_claim_name
            assert claim_name.startswith("work-cd-")
            claim = await call(resource.read_namespaced_resource_claim, claim_name, "default")
            assert claim.metadata.annotations[POD_CLAIM_NAME_ANNOTATION] == "cd"
            assert claim.metadata.labels == {"app": "x"}
            (ref,) = claim.metadata.owner_references
            assert (ref.kind, ref.name, ref.uid) == ("Pod", "work", pod.metadata.uid)
            assert ref.controller and ref.block_owner_deletion
            req = claim.spec.devices.requests[0]
            assert req.exactly.device_class_name == names.DEVICE_CLASS_DEFAULT_CHANNEL

            # Idempotent: more pod events create no second claim.
            patched = await call(
                core.patch_namespaced_pod, "work", "default", {"metadata": {"labels": {"a": "b"}}}
            )
            patched_rv = int(patched.metadata.resource_version)
            await eventually_async(lambda: synced_since(synced, {"default/work": patched_rv}),
                                   "the controller synced the patched pod")
            claims = await call(resource.list_namespaced_resource_claim, "default")
            assert [c.metadata.name for c in claims.items] == [claim_name]

            # The emulator's GC removes the claim with its owner.
            await call(core.delete_namespaced_pod, "work", "default")

            def gone() -> bool:
                try:
                    resource.read_namespaced_resource_claim(claim_name, "default")
                except ApiException as err:
                    return err.status == 404
                return False

            await wait_until(gone)
        finally:
            await controller.stop()

    asyncio.run(main())


def test_stale_reservation_removed(k8s) -> None:
    core, resource = client.CoreV1Api(k8s), client.ResourceV1Api(k8s)
    claim = {
        "metadata": {"name": "shared", "namespace": "default"},
        "spec": TEMPLATE["spec"]["spec"],
    }
    resource.create_namespaced_resource_claim("default", claim)
    live = core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "live", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
    )
    current = k8s.sanitize_for_serialization(
        resource.read_namespaced_resource_claim("shared", "default")
    )
    current["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "channel",
                        "driver": names.DRIVER_NAME,
                        "pool": "n1",
                        "device": "channel-0",
                    }
                ]
            }
        },
        "reservedFor": [
            {"resource": "pods", "name": "live", "uid": live.metadata.uid},
            {"resource": "pods", "name": "gone", "uid": "00000000-0000-0000-0000-000000000001"},
        ],
    }
    resource.replace_namespaced_resource_claim_status("shared", "default", current)

    async def main() -> None:
        controller = ClaimController(k8s)
        controller.start()
        try:

            def reserved() -> list[str]:
                c = resource.read_namespaced_resource_claim("shared", "default")
                return [r.name for r in c.status.reserved_for or []]

            await wait_until(lambda: reserved() == ["live"])
            c = await call(resource.read_namespaced_resource_claim, "shared", "default")
            assert c.status.allocation is not None
            # The last consumer goes: reservation and allocation are cleared.
            await call(core.delete_namespaced_pod, "live", "default")

            def freed() -> bool:
                c = resource.read_namespaced_resource_claim("shared", "default")
                return not c.status.reserved_for and c.status.allocation is None

            await wait_until(freed)
        finally:
            await controller.stop()

    asyncio.run(main())
