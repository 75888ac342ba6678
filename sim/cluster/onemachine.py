"""What a node gives the driver's containers that one machine cannot, supplied by the sim's
container runtime to every container of the project's image (`containerconfig.launch`), so
the driver runs from manifests exactly as shipped, whoever installed them (the sim itself,
`kubectl apply`, or `helm install` into `compute-domain-sim up --no-driver`):

- a network namespace per pod. On a node `:8081` is the pod's own port; here the pods of a
  node share the node's IP on this machine, so a listen address without a host
  (HTTP_ENDPOINT) is bound to that IP with the port the pod spec chose, and the health
  server (HEALTHCHECK_ADDRESS) too;
- the node's kernel and GPUs: the kubelet plugin (the container with a driver-root mount,
  DRIVER_ROOT_CTR_PATH) reads the node's simulated /proc/devices, fabric capability, boot ID
  and NVML through that mount (`NodeHost.hardware_env`);
- nvidia-imex-ctl: the node's fake one is a script of this machine's Python, which a chroot
  into the node's driver root would not find.

A variable the pod spec sets itself keeps the spec's value (a test pointing the plugin at
other files), except that an HTTP_ENDPOINT without a host gets the pod's IP.
"""

from __future__ import annotations

from collections.abc import Mapping

from api import names
from sim.cluster.node import NodeHost


def runtime_env(env: Mapping[str, str], pod_ip: str) -> dict[str, str]:
    """`env` (a project-image container's, as resolved from its spec) with the above."""
    out = dict(env)
    endpoint = out.get(names.ENV_HTTP_ENDPOINT, "")
    if endpoint.startswith(":"):
        out[names.ENV_HTTP_ENDPOINT] = f"{pod_ip}{endpoint}"
    out.setdefault(names.ENV_HEALTHCHECK_ADDRESS, pod_ip)
    driver_root = out.get(names.ENV_CONTAINER_DRIVER_ROOT)
    if driver_root:
        for key, value in NodeHost.hardware_env(driver_root).items():
            out.setdefault(key, value)
        out.setdefault("IMEX_CTL_CHROOT", "false")
    return out
