"""Combining container edits the way a runtime does before applying them to a container."""

from __future__ import annotations

import copy

from cdi.spec import ContainerEdits, Device, Spec


def merge_edits(*edits: ContainerEdits) -> ContainerEdits:
    """Concatenate edits in order, as the Go library's ContainerEdits.Append does.

    Lists are appended; a later `intelRdt` replaces an earlier one because a container
    has only one. The result is a deep copy, so adjusting it never alters a loaded spec.
    """
    merged = ContainerEdits()
    for item in edits:
        merged.env.extend(item.env)
        merged.device_nodes.extend(item.device_nodes)
        merged.net_devices.extend(item.net_devices)
        merged.hooks.extend(item.hooks)
        merged.mounts.extend(item.mounts)
        if item.intel_rdt is not None:
            merged.intel_rdt = item.intel_rdt
        merged.additional_gids.extend(item.additional_gids)
    return copy.deepcopy(merged)


def device_edits(spec: Spec, device: Device) -> ContainerEdits:
    """Everything a runtime applies for one device: the spec's shared edits, then its own."""
    return merge_edits(spec.container_edits, device.container_edits)
