"""The sim's ResourceClaim controller at scale: a client-go style work queue (several
workers, one key never twice at once) and syncs from its caches, not per-pod LISTs."""

from __future__ import annotations

import asyncio
from typing import Any

from eventually import eventually_async, run_virtual
from kubernetes import client
from scenario_env import pod_syncs, synced_since

from api import names
from runtime.kubecall import call
from sim.apiserver.authn import TokenAuthenticator
from sim.apiserver.runner import ServerThread
from sim.cluster.claims import ClaimController, WorkQueue

TEMPLATE = {
    "metadata": {"name": "tpl", "namespace": "default"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "channel",
                        "exactly": {"deviceClassName": names.DEVICE_CLASS_DEFAULT_CHANNEL},
                    }
                ]
            }
        }
    },
}


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "cd", "resourceClaimTemplateName": "tpl"}],
        },
    }


def test_work_queue_dedups_and_never_runs_a_key_twice_at_once() -> None:
    async def main() -> None:
        queue: WorkQueue[str] = WorkQueue()
        running: set[str] = set()
        runs: list[str] = []
        overlap: list[str] = []

        async def worker() -> None:
            while True:
                item = await queue.get()
                if item in running:
                    overlap.append(item)
                running.add(item)
                runs.append(item)
                await asyncio.sleep(0.02)
                if item == "a" and runs.count("a") == 1:
                    queue.add("a")  # changed while being synced: once more, afterwards
                running.discard(item)
                queue.done(item)

        for item in ("a", "a", "b", "a", "c"):
            queue.add(item)
        assert len(queue) == 3
        tasks = [asyncio.create_task(worker()) for _ in range(4)]
        await asyncio.sleep(0.2)  # virtual: five times the longest chain of runs
        for task in tasks:
            task.cancel()
        assert sorted(runs) == ["a", "a", "b", "c"]
        assert overlap == []

    run_virtual(main())


def test_many_pods_get_one_claim_each_without_listing_claims() -> None:
    auth = TokenAuthenticator()
    auth.add_admin("admin")
    auth.add_user("ctl", "claims", ["system:masters"])
    thread = ServerThread(authenticator=auth).start()
    admin, mine = thread.api_client("admin"), thread.api_client("ctl")
    core, resource = client.CoreV1Api(admin), client.ResourceV1Api(admin)
    resource.create_namespaced_resource_claim_template("default", TEMPLATE)
    pods = 12

    async def main() -> None:
        controller = ClaimController(mine, workers=4)
        synced = pod_syncs(controller)
        controller.start()
        try:
            for i in range(pods):
                await call(core.create_namespaced_pod, "default", _pod(f"w{i}"))

            def recorded() -> bool:
                listed = core.list_namespaced_pod("default").items
                return all(p.status.resource_claim_statuses for p in listed)

            await eventually_async(lambda: call(recorded), "claims recorded", timeout=20,
                                   interval=0.05)
            # More events per pod: no second claim for any of them.
            patched: dict[str, int] = {}
            for i in range(pods):
                pod = await call(
                    core.patch_namespaced_pod,
                    f"w{i}",
                    "default",
                    {"metadata": {"labels": {"a": "b"}}},
                )
                patched[f"default/w{i}"] = int(pod.metadata.resource_version)
            await eventually_async(lambda: synced_since(synced, patched),
                                   "every patched pod synced")
            claims = (await call(resource.list_namespaced_resource_claim, "default")).items
            owners = sorted(c.metadata.owner_references[0].name for c in claims)
            assert owners == sorted(f"w{i}" for i in range(pods))
            # Its two informers' listings and nothing else: every sync read the caches.
            verbs = thread.call(lambda: dict(thread.server.stats.by_user["claims"]))
            assert verbs.get("list") == 2, verbs
            assert verbs.get("create") == pods and verbs.get("patch") == pods, verbs
        finally:
            await controller.stop()

    try:
        asyncio.run(main())
    finally:
        admin.close()
        mine.close()
        thread.close()
