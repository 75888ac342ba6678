"""The chart spreads controller replicas over nodes: a preferred podAntiAffinity on the
controller's own pod labels, kept when `controller.affinity` is null or sets no
podAntiAffinity of its own."""

from __future__ import annotations

from pathlib import Path

import yaml
from test_helm_chart import one, pod_spec, render


def spread(labels: dict[str, str]) -> dict[str, object]:
    return {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": labels},
                                           "topologyKey": "kubernetes.io/hostname"}}]}


def test_replicas_spread_over_nodes_whatever_controller_affinity_says(
        helm_bin: Path, tmp_path: Path) -> None:  # fmt: skip
    own = {"dra-driver-nvidia-gpu-component": "controller"}
    objects = render(helm_bin, "--set", "controller.replicas=2")
    assert one(objects, "Deployment")["spec"]["replicas"] == 2
    affinity = pod_spec(objects, "Deployment")["affinity"]
    assert affinity["podAntiAffinity"] == spread(own)
    assert "nodeAffinity" in affinity  # the reference's default, kept
    # null (the reference's tests set it), and the selector labels overridden.
    assert pod_spec(render(helm_bin, "--set", "controller.affinity=null"), "Deployment")[
        "affinity"] == {"podAntiAffinity": spread(own)}
    objects = render(helm_bin, "--set", "controller.affinity=null",
                     "--set", "selectorLabelsOverride.app=cd")
    template_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert template_labels["app"] == "cd"
    assert pod_spec(objects, "Deployment")["affinity"] == {"podAntiAffinity": spread(
        {"app": "cd"})}
    # A podAntiAffinity of the user's own is theirs (Helm merges maps, replaces lists).
    zones = {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 50, "podAffinityTerm": {"labelSelector": {"matchLabels": own},
                                          "topologyKey": "topology.kubernetes.io/zone"}}]}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"controller": {"affinity": {"podAntiAffinity": zones}}}))
    affinity = pod_spec(render(helm_bin, "-f", str(values)), "Deployment")["affinity"]
    assert affinity["podAntiAffinity"] == zones
