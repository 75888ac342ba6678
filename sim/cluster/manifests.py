"""The shipped deploy manifests, rendered from the Helm chart, and installed without kubectl.

The one source of truth is the chart (`packaging/helm/dra-driver-nvidia-gpu`). The static
manifests for `kubectl apply -f` (`packaging/deploy/<mode>.yaml`, one per IMEX mode, and
`driver-managed-agent.yaml` for driverManaged with IMEX placement agent) are its
`helm template` output for the release `dra-driver-nvidia-gpu` in the namespace of that
name, after a Namespace object; `make manifests` (`python -m sim.cluster.manifests`)
regenerates them and tests/packaging/test_deploy_manifests.py proves the committed files
equal a fresh render. The simulated cluster installs exactly those files, so a manifest bug
(a missing RBAC verb, a wrong selector) shows up in the sim as it would on a real cluster,
and the sim needs no helm binary to run.
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "packaging" / "helm" / "dra-driver-nvidia-gpu"
CRD_DIR = CHART_DIR / "crds"
DEPLOY_DIR = REPO / "packaging" / "deploy"
RELEASE = "dra-driver-nvidia-gpu"
NAMESPACE = "dra-driver-nvidia-gpu"
# The Helm values of each IMEX mode's static manifests.
MODE_VALUES: Mapping[str, Mapping[str, str]] = {
    "driverManaged": {},
    "hostManaged": {"resources.computeDomains.imex.mode": "hostManaged",
                    "featureGates.HostManagedIMEXDaemon": "true"},
}
# Where nvidia-imex runs for driverManaged (resources.computeDomains.imex.placement): pod,
# the chart's default, or agent (the kubelet plugin supervises it).
PLACEMENT_VALUES: Mapping[str, Mapping[str, str]] = {
    "pod": {},
    "agent": {"resources.computeDomains.imex.placement": "agent"},
}
_FILES = {("driverManaged", "pod"): "driver-managed.yaml",
          ("hostManaged", "pod"): "host-managed.yaml",
          ("driverManaged", "agent"): "driver-managed-agent.yaml"}
# The privileged kubelet plugin needs a namespace that Pod Security admits it into.
_NAMESPACE: Obj = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": NAMESPACE,
                 "labels": {"pod-security.kubernetes.io/enforce": "privileged"}},
}
# Creation order for `apply`: CRDs and namespaces before anything that needs them.
_APPLY_ORDER = ("CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole",
                "ClusterRoleBinding", "Role", "RoleBinding", "DeviceClass")


def manifest_path(mode: str, placement: str = "pod") -> Path:
    """The static manifests of an IMEX mode ("driverManaged" or "hostManaged") and placement
    ("pod", or "agent" with driverManaged)."""
    try:
        return DEPLOY_DIR / _FILES[mode, placement]
    except KeyError:
        if mode not in MODE_VALUES:
            raise ValueError(f"unknown IMEX mode {mode!r}: use one of "
                             f"{sorted(MODE_VALUES)}") from None
        if placement not in PLACEMENT_VALUES:
            raise ValueError(f"unknown IMEX placement {placement!r}: use one of "
                             f"{sorted(PLACEMENT_VALUES)}") from None
        raise ValueError(f"IMEX placement {placement} applies to driverManaged only, "
                         f"not {mode}") from None


def load(mode_or_path: str | Path, placement: str = "pod") -> list[Obj]:
    """The objects of a mode's (and placement's) static manifests, or of any multi-document
    YAML file."""
    path = (manifest_path(mode_or_path, placement) if mode_or_path in MODE_VALUES
            else Path(mode_or_path))
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def chart_values(mode: str, placement: str) -> dict[str, str]:
    """The Helm values (`--set` keys) of an IMEX mode and placement."""
    manifest_path(mode, placement)  # refuses a combination without static manifests
    return {**MODE_VALUES[mode], **PLACEMENT_VALUES[placement]}


def helm_template_args(mode: str, release: str = RELEASE, namespace: str = NAMESPACE,
                       placement: str = "pod") -> list[str]:
    """`helm template` arguments that render a mode's manifests (after the helm binary)."""
    args = ["template", release, str(CHART_DIR), "--namespace", namespace, "--include-crds",
            "--api-versions", "resource.k8s.io/v1"]
    for key, value in chart_values(mode, placement).items():
        args += ["--set", f"{key}={value}"]
    return args


def helm_env(home: Path) -> dict[str, str]:
    """The environment of a helm run whose cache, config and data live under `home`, not in
    the user's ~/.cache/helm (no repositories are used)."""
    return {**os.environ, **{f"HELM_{kind}_HOME": str(home / kind.lower())
                             for kind in ("CACHE", "CONFIG", "DATA")}}


def run_helm(
    helm: str | Path, args: Sequence[str], *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`helm <args>` in a throwaway home; with `check`, a failure raises CalledProcessError
    (holding helm's stderr), else the caller reads the return code."""
    with tempfile.TemporaryDirectory(prefix="helm-") as home:
        return subprocess.run([str(helm), *args], check=check, capture_output=True, text=True,
                              env=helm_env(Path(home)), timeout=120)


def render_static(helm: str | Path, mode: str, placement: str = "pod") -> str:
    """The text of a mode's (and placement's) static manifests, as `make manifests` writes
    it."""
    command = " ".join([f"helm template {RELEASE} <chart> --namespace {NAMESPACE} --include-crds",
                        *(f"--set {k}={v}" for k, v in chart_values(mode, placement).items())])
    out = run_helm(helm, helm_template_args(mode, placement=placement)).stdout
    what = mode if placement == "pod" else f"{mode}, placement {placement}"
    header = (
        f"# compute-domain.nvidia.com, IMEX mode {what}: `kubectl apply --server-side -f` this\n"
        "# file. Generated by `make manifests` from packaging/helm/dra-driver-nvidia-gpu:\n"
        f"#   {command}\n"
        "# Do not edit; change the chart (Helm is the recommended install, see README).\n"
        "---\n"
    )
    return header + yaml.safe_dump(_NAMESPACE, sort_keys=False) + out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.cluster.manifests",
                                     description="Regenerate packaging/deploy from the chart.")
    parser.add_argument("--helm", default=str(REPO / ".cache" / "bin" / "helm"))
    args = parser.parse_args(argv)
    for mode, placement in _FILES:
        path = manifest_path(mode, placement)
        path.write_text(render_static(args.helm, mode, placement))
        print(f"wrote {path.relative_to(REPO)}")
    return 0


# --- install ------------------------------------------------------------------------------


def apply(api_client: Any, objects: list[Obj], timeout: float = 30.0) -> list[Obj]:
    """Create the rendered objects through the real `kubernetes` client, CRDs and namespaces
    first (and CRDs served before anything else), so a fresh cluster, real or simulated,
    ends up as after `kubectl apply -k`. Objects that already exist are left as they are;
    returns the objects created, as the server returned them."""
    from kubernetes import client, utils
    from kubernetes.client.rest import ApiException

    def rank(obj: Obj) -> int:
        kind = obj["kind"]
        return _APPLY_ORDER.index(kind) if kind in _APPLY_ORDER else len(_APPLY_ORDER)

    created: list[Obj] = []
    crds: list[str] = []
    for obj in sorted(objects, key=rank):
        if obj["kind"] != "CustomResourceDefinition" and crds:
            _wait_established(client.ApiextensionsV1Api(api_client), crds, timeout)
            crds = []
        try:
            [result] = utils.create_from_dict(api_client, copy.deepcopy(obj))
        except utils.FailToCreateError as err:
            exc = err.api_exceptions[0]
            if isinstance(exc, ApiException) and exc.status == 409:
                continue
            raise exc from None
        created.append(api_client.sanitize_for_serialization(result))
        if obj["kind"] == "CustomResourceDefinition":
            crds.append(obj["metadata"]["name"])
    if crds:
        _wait_established(client.ApiextensionsV1Api(api_client), crds, timeout)
    return created


def _wait_established(api: Any, names: list[str], timeout: float) -> None:
    """A CRD's resources 404 until it is Established: wait for that condition on a watch."""
    from kubernetes import watch

    def established(crd: Obj) -> bool:
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in conditions)

    deadline = time.monotonic() + timeout
    for name in names:
        selector = f"metadata.name={name}"
        listing = api.api_client.sanitize_for_serialization(
            api.list_custom_resource_definition(field_selector=selector))
        if any(established(crd) for crd in listing["items"]):
            continue
        remaining = max(1, int(deadline - time.monotonic()))
        stream = watch.Watch(return_type="object")
        for event in stream.stream(api.list_custom_resource_definition,
                                   field_selector=selector, timeout_seconds=remaining,
                                   resource_version=listing["metadata"]["resourceVersion"]):
            if established(api.api_client.sanitize_for_serialization(event["object"])):
                stream.stop()
                break
        else:
            raise TimeoutError(f"CustomResourceDefinition {name} not Established after "
                               f"{timeout}s")


if __name__ == "__main__":
    sys.exit(main())
