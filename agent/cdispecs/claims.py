"""Per-claim CDI specs: built and written in Prepare, removed in Unprepare.

One file `k8s.compute-domain.nvidia.com-claim_<claimUID>.yaml` per claim, with one device
`<claimUID>-<device>` per prepared device whose group has container edits, as the reference's
`CreateClaimSpecFile` writes it
(https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/cdi.go).
Claim UIDs come from kubelet and end up in a file name, so anything that is not a plain
single path component is refused before the filesystem is touched.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path

from agent.cdispecs.simplify import simplify_edits
from agent.cdispecs.transform import RootTransform
from api.names import (
    CDI_BASE_DEVICE,
    CDI_CLASS_CLAIM,
    CDI_KIND_CLAIM,
    CDI_KIND_DEVICE,
    CDI_VENDOR,
    cdi_claim_device_name,
)
from cdi import ContainerEdits, Device, Spec, remove_spec, spec_path, write_spec

CLAIM_SPEC_PREFIX = f"{CDI_VENDOR}-{CDI_CLASS_CLAIM}_"
CLAIM_SPEC_SUFFIX = ".yaml"
# Linux file names are at most 255 bytes, and cdi.write_spec's temporary file
# `.<name>.<8 random chars>.tmp` is 14 bytes longer than the spec file name.
MAX_CLAIM_UID_BYTES = 255 - len(CLAIM_SPEC_PREFIX) - len(CLAIM_SPEC_SUFFIX) - 14


class UnsafeClaimUIDError(ValueError):
    """A claim UID that cannot safely name a spec file (empty, `/`, `.`, `..`, NUL, too long)."""


def check_claim_uid(claim_uid: str) -> str:
    """`claim_uid` if it is a safe single path component, else UnsafeClaimUIDError."""
    problem = ""
    if not isinstance(claim_uid, str) or not claim_uid:
        problem = "it is empty"
    elif claim_uid in (".", ".."):
        problem = "it is a relative directory name"
    elif "/" in claim_uid:
        problem = "it contains '/'"
    elif "\0" in claim_uid:
        problem = "it contains a NUL character"
    elif len(os.fsencode(claim_uid)) > MAX_CLAIM_UID_BYTES:
        problem = f"it is longer than {MAX_CLAIM_UID_BYTES} bytes"
    if problem:
        raise UnsafeClaimUIDError(
            f"refusing claim UID {claim_uid!r}: {problem}; a claim UID must be usable as a "
            "single file name component"
        )
    return claim_uid


def claim_spec(
    claim_uid: str,
    devices: Sequence[tuple[str, ContainerEdits]],
    *,
    transform: RootTransform | None = None,
) -> Spec | None:
    """The claim's spec: one device per `(device name, edits)` with non-empty edits.

    Edits are copied, deduplicated, sorted (device nodes and mounts by path depth, then
    lexicographically) and root-transformed. None when no device has edits: then no
    file is written and kubelet gets no claim CDI ID for the claim.
    """
    check_claim_uid(claim_uid)
    out: list[Device] = []
    seen: set[str] = set()
    for device_name, edits in devices:
        if edits.is_empty():
            continue
        name = cdi_claim_device_name(claim_uid, device_name)
        if name in seen:
            raise ValueError(f"claim {claim_uid}: device {device_name!r} is listed twice")
        seen.add(name)
        edits = simplify_edits(edits)
        if transform is not None:
            edits = transform.edits(edits)
        out.append(Device(name=name, container_edits=edits))
    if not out:
        return None
    return Spec(kind=CDI_KIND_CLAIM, devices=out)


def claim_spec_path(cdi_root: str | os.PathLike[str], claim_uid: str) -> Path:
    """Where the claim's spec lives: `<cdi_root>/k8s.compute-domain.nvidia.com-claim_<uid>.yaml`."""
    return spec_path(cdi_root, CDI_KIND_CLAIM, check_claim_uid(claim_uid))


def write_claim_spec(cdi_root: str | os.PathLike[str], claim_uid: str, spec: Spec) -> Path:
    """Validate and atomically write the claim's spec (minimal cdiVersion); returns its path."""
    check_claim_uid(claim_uid)
    if spec.kind != CDI_KIND_CLAIM:
        raise ValueError(f"a claim spec must have kind {CDI_KIND_CLAIM!r}, got {spec.kind!r}")
    return write_spec(spec, cdi_root, claim_uid)


def remove_claim_spec(cdi_root: str | os.PathLike[str], claim_uid: str) -> bool:
    """Durably delete the claim's spec; returns whether it existed (missing is fine)."""
    check_claim_uid(claim_uid)
    return remove_spec(cdi_root, CDI_KIND_CLAIM, claim_uid)


def claim_cdi_ids(claim_uid: str, device_name: str, has_edits: bool, daemon: bool) -> list[str]:
    """The CDI device IDs returned to kubelet for one prepared device.

    Daemon devices first get the base spec's `…/device=all`; any device whose group has
    container edits then gets its own `…/claim=<claimUID>-<device>`. A channel on a
    non-fabric node (no edits) therefore gets an empty list. The same IDs, in the same
    order, as the reference's `prepareDevices`
    (https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/device_state.go).
    """
    check_claim_uid(claim_uid)
    ids = []
    if daemon:
        ids.append(f"{CDI_KIND_DEVICE}={CDI_BASE_DEVICE}")
    if has_edits:
        ids.append(f"{CDI_KIND_CLAIM}={cdi_claim_device_name(claim_uid, device_name)}")
    return ids


def claim_uid_of(path: Path) -> str | None:
    """The claim UID a claim spec file name encodes, or None if it is not one of ours."""
    name = path.name
    if not (name.startswith(CLAIM_SPEC_PREFIX) and name.endswith(CLAIM_SPEC_SUFFIX)):
        return None
    uid = name[len(CLAIM_SPEC_PREFIX) : -len(CLAIM_SPEC_SUFFIX)]
    return uid or None


def orphaned_claim_specs(
    cdi_root: str | os.PathLike[str], known_uids: Collection[str]
) -> list[Path]:
    """Claim spec files in `cdi_root` whose claim is not in `known_uids`, sorted.

    `known_uids` must include every claim with a checkpoint entry, PrepareStarted ones
    too, or a spec written by a Prepare in flight would be reported. A missing
    `cdi_root` has no orphans. Only regular files are reported (never followed links).
    """
    known = set(known_uids)
    try:
        with os.scandir(cdi_root) as scan:
            entries = list(scan)
    except FileNotFoundError:
        return []
    orphans = []
    for entry in entries:
        uid = claim_uid_of(Path(entry.path))
        if uid is None or uid in known:
            continue
        if entry.is_file(follow_symlinks=False):
            orphans.append(Path(entry.path))
    return sorted(orphans)
