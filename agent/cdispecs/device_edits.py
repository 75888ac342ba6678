"""The container edits of the two device types: IMEX channels and the IMEX daemon."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from agent.discovery.channels import CHANNEL_FILE_MODE
from agent.discovery.devnode import CharDevice
from api.names import (
    ENV_CLIQUE_ID,
    ENV_COMPUTE_DOMAIN_NAME,
    ENV_COMPUTE_DOMAIN_NAMESPACE,
    ENV_COMPUTE_DOMAIN_UUID,
    IMEXD_DIR,
    IMEXD_MOUNT_OPTIONS,
    channel_device_path,
)
from cdi import ContainerEdits, DeviceNode, Mount


def channel_node(major: int, channel: int) -> DeviceNode:
    """The device node of one IMEX channel: `/dev/nvidia-caps-imex-channels/channel<i>`.

    Type and major are explicit so the runtime creates the node in the container even
    when the host has none (the plugin never creates device nodes on the host).
    """
    return DeviceNode(
        path=channel_device_path(channel),
        type="c",
        major=major,
        minor=channel,
        file_mode=CHANNEL_FILE_MODE,
    )


def channel_edits(major: int, channels: Iterable[int]) -> ContainerEdits:
    """Device nodes for `channels`, in the order given (the claim spec sorts them)."""
    return ContainerEdits(device_nodes=[channel_node(major, channel) for channel in channels])


def daemon_edits(
    clique_id: str,
    cd_uid: str,
    cd_name: str,
    cd_namespace: str,
    domain_dir: Path,
    cap: CharDevice | None,
) -> ContainerEdits:
    """What an IMEX daemon container gets: its identity, its config dir and, on a fabric
    node, the fabric-imex-mgmt capability node (`cap`; None on a non-fabric node)."""
    nodes = []
    if cap is not None:
        nodes.append(
            DeviceNode(
                path=cap.path,
                type=cap.type,
                major=cap.major,
                minor=cap.minor,
                file_mode=cap.file_mode,
            )
        )
    return ContainerEdits(
        env=[
            f"{ENV_CLIQUE_ID}={clique_id}",
            f"{ENV_COMPUTE_DOMAIN_UUID}={cd_uid}",
            f"{ENV_COMPUTE_DOMAIN_NAME}={cd_name}",
            f"{ENV_COMPUTE_DOMAIN_NAMESPACE}={cd_namespace}",
        ],
        device_nodes=nodes,
        mounts=[
            Mount(
                host_path=str(domain_dir),
                container_path=IMEXD_DIR,
                options=list(IMEXD_MOUNT_OPTIONS),
            )
        ],
    )
