"""Who the driver's containers run as, by the rules a container runtime applies to the
shipped manifests and the image the Dockerfile builds (USER 65532): the kubelet plugin and
the IMEX daemon write root-owned host paths and must run as root; the controller must not.
The sim's kubelet applies the same rules, so a manifest that forgets `runAsUser: 0` fails
there as on a node (Permission denied), not only here."""

from __future__ import annotations

from typing import Any

import pytest

from controller.render import RenderSettings, daemon_set
from sim.cluster import manifests
from sim.cluster.cluster import DOCKERFILE, SIM_IMAGE
from sim.cluster.containerconfig import ConfigError, identity
from sim.cluster.images import from_dockerfile, host_image

IMAGE = from_dockerfile(DOCKERFILE, SIM_IMAGE, {})


def _pod(workload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    pod = {"metadata": {"name": workload["metadata"]["name"]}, "spec": spec}
    return pod, spec["containers"][0]


@pytest.mark.parametrize("mode", ["driverManaged", "hostManaged"])
def test_shipped_workloads_run_as_the_user_their_work_needs(mode: str) -> None:
    objects = manifests.load(mode)
    [plugin] = [o for o in objects if o["kind"] == "DaemonSet"]
    [controller] = [o for o in objects if o["kind"] == "Deployment"]
    assert IMAGE.ids() == (65532, 65532)  # what a pod gets without runAsUser
    assert identity(*_pod(plugin), IMAGE)[:2] == (0, 0)
    uid, gid, _ = identity(*_pod(controller), IMAGE)
    assert (uid, gid) == (65532, 65532)


def test_the_daemon_the_controller_renders_runs_as_root() -> None:
    settings = RenderSettings(namespace="ns", image=SIM_IMAGE, daemon_log_verbosity=4)
    rendered = daemon_set("6c2dbdbe-e069-4806-8e9e-8002fec3520d", settings)
    assert identity(*_pod(rendered), IMAGE)[:2] == (0, 0)
    # Without the override it would be the image's user, which cannot write /imexd.
    pod, container = _pod(rendered)
    del container["securityContext"]
    assert identity(pod, container, IMAGE)[:2] == (65532, 65532)


def test_run_as_non_root_refuses_root() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"securityContext": {"runAsNonRoot": True}}}
    with pytest.raises(ConfigError, match="runAsNonRoot and image will run as root"):
        identity(pod, {"name": "c"}, host_image("busybox"))
    with pytest.raises(ConfigError, match="breaks non-root policy"):
        identity(pod, {"name": "c", "securityContext": {"runAsUser": 0}}, IMAGE)
