"""What an admin of the reference driver greps, read the way its runbooks and its tests/bats
read it: `kubectl logs -l <the reference's selector>` and `kubectl get events`, on a cluster
whose driver the real helm installed with `--set logVerbosity=6`, on both control planes.

Each line is one entry of the inventory (tests/data/reference-wording.yaml), matched with the
pattern taken from the reference's source, after klog's header (whose form is an entry too).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from eventually import eventually
from sim_up import DEMO, Up
from test_helm_install import NS, RELEASE, Helm

from sim.cluster import manifests
from sim.cluster.sandbox import can_sandbox
from sim.controlplane.binaries import available

pytestmark = pytest.mark.skipif(bool(can_sandbox()), reason=can_sandbox() or "root")

INVENTORY = Path(__file__).parents[1] / "data" / "reference-wording.yaml"
ENTRIES: dict[str, dict[str, Any]] = {
    e["id"]: e for e in yaml.safe_load(INVENTORY.read_text())["entries"]
}
HEADER = re.compile(ENTRIES["log-line-format"]["pattern"])
PLUGINS = "dra-driver-nvidia-gpu-component=kubelet-plugin"
CONTROLLER = "dra-driver-nvidia-gpu-component=controller"

# The reference's bats spec of a permanent Prepare error (an opaque config with a field its
# ComputeDomainChannelConfig does not have), in resource.k8s.io/v1's form.
BAD_CONFIG = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: rc-bad-opaque-config
spec:
  devices:
    requests:
    - name: chan
      exactly: {deviceClassName: compute-domain-default-channel.nvidia.com}
    config:
    - opaque:
        driver: compute-domain.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          domainID: not-needed-for-test
          kind: ComputeDomainChannelConfig
          unexpectedField: foo
      requests: [chan]
---
apiVersion: v1
kind: Pod
metadata:
  name: pod-bad-opaque-config
spec:
  containers:
  - name: app
    image: busybox
    resources:
      claims: [{name: chan}]
  resourceClaims:
  - name: chan
    resourceClaimName: rc-bad-opaque-config
"""


@pytest.fixture(scope="module", params=["emulator", "kubernetes"])
def up(request: pytest.FixtureRequest, kubectl_bin: Path, helm_bin: Path,
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    if request.param == "kubernetes" and not available()[0]:
        pytest.fail(f"--control-plane kubernetes: {available()[1]}")
    cluster = Up(kubectl_bin, tmp_path_factory.mktemp("reflogs"), "--no-driver",
                 "--control-plane", request.param)
    try:
        Helm(helm_bin, cluster).ok("upgrade", "--install", RELEASE, str(manifests.CHART_DIR),
                                   "--create-namespace", "--set", "logVerbosity=6", "--wait",
                                   "--timeout", "3m")
        for selector in (PLUGINS, CONTROLLER):
            cluster.ok("wait", "--for=condition=READY", "pods", "-n", NS, "-l", selector,
                       "--timeout=90s")
        yield cluster
    finally:
        cluster.close()


def messages(text: str) -> list[str]:
    """The messages of `kubectl logs` output, each line's klog header checked and cut off
    (a traceback's or a multi-line message's later lines have none and are kept whole)."""
    out = []
    for line in text.splitlines():
        match = HEADER.match(line)
        out.append(match["message"] if match else line)
    assert any(HEADER.match(line) for line in text.splitlines()), text[-2000:]
    return out


def found(entry_id: str, lines: list[str]) -> list[re.Match[str]]:
    pattern = re.compile(ENTRIES[entry_id]["pattern"])
    assert ENTRIES[entry_id]["ours"]["status"] == "same", entry_id
    return [m for line in lines if (m := pattern.search(line))]


def said(up: Up, entry_ids: tuple[str, ...], *selector: str) -> dict[str, list[re.Match[str]]]:
    """Each entry's matches in the logs of the pods `selector` picks, once every entry has
    one (or, after the wait, what there is, for the caller's assertion to show)."""
    result: dict[str, list[re.Match[str]]] = {}

    def complete() -> bool:
        text = up.ok("logs", "-n", NS, *selector, "--tail=-1", "--all-containers")
        lines = messages(text)
        result.update({e: found(e, lines) for e in entry_ids})
        return all(result.values())

    with contextlib.suppress(AssertionError):  # the assertion below names what is missing
        eventually(complete, f"{entry_ids} in the logs of {selector}", timeout=60,
                   interval=0.5)
    missing = [e for e in entry_ids if not result.get(e)]
    assert not missing, f"not logged by {selector}: {missing}"
    return result


def test_a_workload_logs_what_the_reference_logs(up: Up) -> None:
    up.ok("apply", "-f", str(DEMO / "channel-injection.yaml"))
    up.ok("wait", "--for=condition=Ready", "pod/imex-channel-injection", "--timeout=120s")
    cd_uid = up.ok("get", "computedomain", "imex-channel-injection", "-o",
                   "jsonpath={.metadata.uid}")
    controller = said(up, ("ctl-processing-cd", "ctl-cd-status-updated", "ctl-caches-populated",
                           "ctl-listing-and-watching", "ctl-cleanup-perform",
                           "ctl-round-trippers-response"), "-l", CONTROLLER)
    assert any(m["uid"] == cd_uid and m["name"] == "imex-channel-injection"
               for m in controller["ctl-processing-cd"])
    assert any(m["verb"] == "GET" for m in controller["ctl-round-trippers-response"])
    daemons = said(up, ("d-clique-inserted", "d-status-updated", "d-wait-for-update",
                        "d-round-trippers"),
                   "-l", f"resource.nvidia.com/computeDomain={cd_uid}")
    assert {m["status"] for m in daemons["d-status-updated"]} >= {"Ready"}
    assert all(m["clique"].startswith(f"{cd_uid}.") for m in daemons["d-clique-inserted"])
    plugins = said(up, ("kp-prepared-devices",), "-l", PLUGINS)
    # The daemon pods' claims (in the driver namespace) and the workload's.
    [claim] = [m for m in plugins["kp-prepared-devices"] if m["ns"] == "default"]
    assert claim["name"].startswith("imex-channel-injection"), claim.string
    assert "channel-0" in claim["devices"], claim.string

    up.ok("delete", "-f", str(DEMO / "channel-injection.yaml"), "--wait=true", "--timeout=120s")
    plugins = said(up, ("kp-unprepared-devices", "kp-deleted-claim-from-checkpoint"),
                   "-l", PLUGINS)
    assert claim["uid"] in {m["uid"] for m in plugins["kp-unprepared-devices"]}


def test_a_permanent_prepare_error_as_the_reference_reports_it(up: Up) -> None:
    up.ok("apply", "-f", "-", stdin=BAD_CONFIG)
    claim_uid = up.ok("get", "resourceclaim", "rc-bad-opaque-config", "-o",
                      "jsonpath={.metadata.uid}")
    pattern = re.compile(ENTRIES["kp-prepare-error-event"]["pattern"])
    decoding = re.compile(ENTRIES["kp-strict-decoding-unknown-field"]["pattern"])
    events: list[str] = []

    def reported() -> bool:
        events[:] = up.ok("get", "events", "--field-selector",
                          "involvedObject.name=pod-bad-opaque-config", "-o",
                          "jsonpath={range .items[*]}{.reason}: {.message}{'\\n'}{end}"
                          ).splitlines()
        return any(e.startswith("FailedPrepareDynamicResources: ") and pattern.search(e)
                   for e in events)

    with contextlib.suppress(AssertionError):  # the assertion below shows the events
        eventually(reported, "the pod's FailedPrepareDynamicResources event", timeout=90,
                   interval=0.5)
    [event, *_] = [m for e in events if (m := pattern.search(e))] or [None]
    assert event is not None, events
    assert (event["ns"], event["name"], event["uid"]) == ("default", "rc-bad-opaque-config",
                                                          claim_uid)
    field = decoding.search(event["error"])
    assert field is not None and field["field"] == "unexpectedField", event["error"]
    logged = said(up, ("kp-prepare-permanent-error-log",), "-l", PLUGINS)
    assert claim_uid in {m["uid"] for m in logged["kp-prepare-permanent-error-log"]}
    up.ok("delete", "-f", "-", "--wait=true", "--timeout=120s", stdin=BAD_CONFIG)


def test_the_startup_config_as_the_reference_logs_it(up: Up) -> None:
    """The bats test's greps of the startup record (test_cd_logging.bats, at level 0; here
    at 6, which holds level 0), and the record's form, which spans lines."""
    controller = up.ok("logs", "-n", NS, "-l", CONTROLLER, "--tail=-1")
    for words in ("Verbosity:", '"MPSSupport":false', "additionalNamespaces:",
                  "controller manager config", "maxNodesPerIMEXDomain"):
        assert words in controller, words
    for entry_id in ("ctl-startup-config", "ctl-manager-config"):
        assert found(entry_id, [controller]) or found(entry_id, messages(controller)), entry_id
    plugins = up.ok("logs", "-n", NS, "-l", PLUGINS, "-c", "compute-domains", "--tail=-1")
    for words in ("Verbosity", "nodeName", "identified fabric clique",
                  "driver version validation"):
        assert words in plugins, words
    lines = messages(plugins)
    for entry_id in ("kp-identified-fabric-clique", "kp-driver-version-validation-start",
                     "kp-driver-version-validation-passed"):
        assert found(entry_id, lines), entry_id
    [record, *_] = found("kp-startup-config", [plugins])
    assert "klogVerbosity: (int) 6," in record["flags"], record["flags"]
