"""The driver on a Kubernetes 1.32 and a 1.33 API: the emulator serving resource.k8s.io in
v1beta1 only, and in v1beta2 only (`compute-domain-sim --resource-api`). The agent and the
controller find the served version themselves; a ComputeDomain's workloads get their
channels, `diagnose` reads the beta objects, and a deletion cleans up. And the driver pinned
to v1beta1 against the real kube-apiserver, whose own conversion then checks ours."""

from __future__ import annotations

import pytest
from kubernetes import client
from scenario_env import NAMESPACE, delete_until_clean, ready, run_scenario
from test_diagnose import BOUNDARIES, statuses, verdict

from agent.diagnose.report import OK, SKIPPED
from api import names
from runtime.kubecall import call
from sim.cluster.cluster import SimCluster
from sim.cluster.demo import create_objects
from sim.cluster.example import builtin
from sim.cluster.node import clique_id
from sim.controlplane.binaries import available


@pytest.mark.parametrize(("version", "mode"), [("v1beta1", "driverManaged"),
                                               ("v1beta2", "hostManaged")])
def test_a_domain_comes_up_and_goes_away_on_a_beta_resource_api(short_dir, version: str,
                                                                 mode: str) -> None:
    async def body(cluster: SimCluster) -> None:
        custom = client.CustomObjectsApi(cluster.admin)
        objects = builtin(clique_id(1), 2, name="beta")
        await create_objects(cluster.admin, objects)
        await ready(cluster, "beta")
        # Published through the beta API: a v1beta1 device holds its attributes in `basic`.
        slices = await call(custom.list_cluster_custom_object, "resource.k8s.io", version,
                            "resourceslices")
        devices = [d for s in slices["items"] for d in s["spec"]["devices"]]
        assert devices and all(("basic" in d) == (version == "v1beta1") for d in devices)
        claims = await call(custom.list_namespaced_custom_object, "resource.k8s.io",
                            version, NAMESPACE, "resourceclaims")
        assert [c["status"]["allocation"] for c in claims["items"]]
        report = await verdict(cluster, "beta", None, OK, "every boundary holds")
        assert statuses(report) == {**dict.fromkeys(BOUNDARIES, OK), "cleanup": SKIPPED}
        cd = objects[0]
        live = await call(custom.get_namespaced_custom_object, "resource.nvidia.com",
                          "v1beta1", NAMESPACE, "computedomains", cd["metadata"]["name"])
        await delete_until_clean(cluster, objects, [live["metadata"]["uid"]])

    run_scenario(short_dir, body, nodes=2, mode=mode, resource_versions=(version,))


@pytest.mark.e2e
def test_the_driver_pinned_to_v1beta1_works_through_a_real_kube_apiserver(short_dir) -> None:
    """kube-apiserver with v1beta1 and v1beta2 enabled next to v1, and the driver pinned to
    v1beta1 (the chart's `resourceApiVersion`): what the driver sends is converted by the
    real server, not by our own code, and the server records which version each writer
    used (`managedFields`)."""
    if not available()[0]:
        pytest.fail(f"--control-plane kubernetes: {available()[1]}")
    pinned = {"RESOURCE_API_VERSION": "resource.k8s.io/v1beta1"}

    async def body(cluster: SimCluster) -> None:
        objects = builtin(clique_id(1), 2, name="pinned")
        await create_objects(cluster.admin, objects)
        await ready(cluster, "pinned")
        custom = client.CustomObjectsApi(cluster.admin)
        slices = await call(custom.list_cluster_custom_object, "resource.k8s.io", "v1",
                            "resourceslices")
        ours = [s for s in slices["items"] if s["spec"]["driver"] == names.DRIVER_NAME]
        assert len(ours) == 2
        templates = await call(custom.list_namespaced_custom_object, "resource.k8s.io", "v1",
                               NAMESPACE, "resourceclaimtemplates")
        for obj in [*ours, *templates["items"]]:
            writers = {m["apiVersion"] for m in obj["metadata"]["managedFields"]}
            assert writers == {"resource.k8s.io/v1beta1"}, obj["metadata"]
        cd = await call(custom.get_namespaced_custom_object, "resource.nvidia.com",
                        "v1beta1", NAMESPACE, "computedomains", "pinned")
        await delete_until_clean(cluster, objects, [cd["metadata"]["uid"]])

    run_scenario(short_dir, body, nodes=2, control_plane="kubernetes",
                 resource_versions=("v1", "v1beta1", "v1beta2"), agent_env=pinned,
                 controller_env=pinned)
