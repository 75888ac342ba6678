"""ComputeDomainClique: the daemons of one ComputeDomain in one NVLink clique.

Written by the daemons themselves (each owns its entry), read by the controller to
build `ComputeDomain.status.nodes`. It has no spec or status, only `daemons`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from api.objects import K8sModel, K8sObject


class ComputeDomainDaemonInfo(K8sModel):
    node_name: str
    ip_address: str
    clique_id: str = Field(alias="cliqueID")
    index: int = 0  # always serialized, as the reference does
    status: str | None = None


class ComputeDomainClique(K8sObject):
    api_version: Literal["resource.nvidia.com/v1beta1"] = "resource.nvidia.com/v1beta1"
    kind: Literal["ComputeDomainClique"] = "ComputeDomainClique"
    daemons: list[ComputeDomainDaemonInfo] | None = None

    def daemon(self, node_name: str) -> ComputeDomainDaemonInfo | None:
        return next((d for d in self.daemons or () if d.node_name == node_name), None)


def settled_indices(indices: Sequence[object]) -> list[int]:
    """The index each entry of a clique's `daemons` list (given in list order) holds.

    Two daemons that append at once may write one index. The list order the server
    committed settles it, the same way for every reader: an entry keeps the index it
    wrote unless an earlier entry holds it already; then (and for an entry whose index is
    not a non-negative integer) it holds the smallest index no earlier entry holds. An
    entry's index thus depends only on the entries before it, which later appends never
    change: a daemon knows its index from the answer to its own append and writes it with
    its next write (agent/daemon/clique_membership.py), and every reader (the daemons'
    hosts files, the controller's status) agrees meanwhile. A missing index is 0, as the
    reference's readers take it.
    """
    taken: set[int] = set()
    out: list[int] = []
    for raw in indices:
        index = 0 if raw is None else raw
        if isinstance(index, bool) or not isinstance(index, int) or index < 0 or index in taken:
            index = 0
            while index in taken:
                index += 1
        taken.add(index)
        out.append(index)
    return out
