"""The control planes a simulated cluster runs on.

`emulator` (the default): the project's own API emulator (`sim.apiserver`) with the sim's
scheduler and workload controllers (`sim.cluster`), zero dependencies, up in a second.
`kubernetes`: upstream etcd, kube-apiserver, kube-controller-manager and kube-scheduler of
the pinned release (`make k8s`, `upstream/go.mod`), so the driver meets the real DRA
allocator, CRD validation, RBAC and Node authorization, watch semantics and garbage
collector. Both serve the same `ControlPlane` interface (`sim.controlplane.base`).
"""

from __future__ import annotations

from typing import Final

EMULATOR: Final = "emulator"
KUBERNETES: Final = "kubernetes"
CONTROL_PLANES: Final = (EMULATOR, KUBERNETES)
