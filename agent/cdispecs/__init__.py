"""The CDI specs the kubelet plugin writes: the base spec and one spec per prepared claim.

* `edits`: container edits of IMEX channels and of the IMEX daemon;
* `claims`: claim specs, their file names, the CDI IDs returned to kubelet, orphans;
* `base`: the base spec (`…/device=all`) daemon containers use to run host IMEX tools;
* `transform`: the host-root transform every written spec goes through;
* `simplify`: dedupe/sort of edits.

Driver files and device nodes under a root are found by `agent.discovery`.
"""

from agent.cdispecs.base import (
    BaseSpecError,
    BaseSpecResult,
    builtin_base_spec,
    ctk_base_spec,
    find_device_nodes,
    write_base_spec,
)
from agent.cdispecs.claims import (
    UnsafeClaimUIDError,
    check_claim_uid,
    claim_cdi_ids,
    claim_spec,
    claim_spec_path,
    orphaned_claim_specs,
    remove_claim_spec,
    write_claim_spec,
)
from agent.cdispecs.device_edits import channel_edits, channel_node, daemon_edits
from agent.cdispecs.transform import RootTransform, transform_spec

__all__ = [
    "BaseSpecError",
    "BaseSpecResult",
    "RootTransform",
    "UnsafeClaimUIDError",
    "builtin_base_spec",
    "channel_edits",
    "channel_node",
    "check_claim_uid",
    "claim_cdi_ids",
    "claim_spec",
    "claim_spec_path",
    "ctk_base_spec",
    "daemon_edits",
    "find_device_nodes",
    "orphaned_claim_specs",
    "remove_claim_spec",
    "transform_spec",
    "write_base_spec",
    "write_claim_spec",
]
