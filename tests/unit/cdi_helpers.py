"""Shared helpers for the CDI tests: the official JSON schema and realistic driver specs."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from cdi import ContainerEdits, Device, DeviceNode, Mount, Spec, write_spec

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "data" / "cdi-schema"

CLAIM_KIND = "k8s.compute-domain.nvidia.com/claim"
DEVICE_KIND = "k8s.compute-domain.nvidia.com/device"
CLAIM_UID = "5f0c1e9a-2b3d-4c5e-8f60-718293a4b5c6"
DAEMON_CLAIM_UID = "8d3e2f10-4a5b-4c6d-9e7f-a0b1c2d3e4f5"
DOMAIN_UID = "0b6a7c8d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"


@functools.cache
def schema_validator() -> Draft7Validator:
    """The official CDI schema, with `defs.json` resolvable the way schema.json names it."""
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    registry = Registry().with_resource(
        "defs.json", Resource.from_contents(defs, default_specification=DRAFT7)
    )
    return Draft7Validator(schema, registry=registry)


def schema_errors(document: Any) -> list[str]:
    """Every schema violation in `document`, as readable strings."""
    return sorted(
        f"{'/'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in schema_validator().iter_errors(document)
    )


def assert_schema_valid(document: Any) -> None:
    """Fail with every schema violation listed."""
    errors = schema_errors(document)
    assert not errors, "spec violates the CDI JSON schema:\n" + "\n".join(errors)


def read_yaml(path: Path) -> Any:
    """A YAML file's content, read independently of the library under test."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def write_checked(spec: Spec, directory: Path, name: str, **kwargs: Any) -> Path:
    """`write_spec`, then check the file on disk against the official schema."""
    path = write_spec(spec, directory, name, **kwargs)
    assert_schema_valid(read_yaml(path))
    return path


def channel_node(channel: int) -> DeviceNode:
    """An IMEX channel device node as the driver injects it."""
    path = f"{CHANNEL_DIR}/channel{channel}"
    return DeviceNode(
        path=path, host_path=path, type="c", major=234, minor=channel, file_mode=0o666
    )


def channel_claim_spec(claim_uid: str = CLAIM_UID) -> Spec:
    """A workload's channel claim: one device giving channel 0."""
    return Spec(
        kind=CLAIM_KIND,
        devices=[
            Device(
                name=f"{claim_uid}-channel-0",
                container_edits=ContainerEdits(device_nodes=[channel_node(0)]),
            )
        ],
    )


def all_channels_spec(claim_uid: str = CLAIM_UID, count: int = 2048) -> Spec:
    """A claim for every IMEX channel on the node."""
    return Spec(
        kind=CLAIM_KIND,
        devices=[
            Device(
                name=f"{claim_uid}-channels-all",
                container_edits=ContainerEdits(
                    device_nodes=[channel_node(c) for c in range(count)]
                ),
            )
        ],
    )


def daemon_claim_spec(claim_uid: str = DAEMON_CLAIM_UID) -> Spec:
    """The IMEX daemon's claim on a fabric-attached node."""
    return Spec(
        kind=CLAIM_KIND,
        devices=[
            Device(
                name=f"{claim_uid}-daemon-0",
                container_edits=ContainerEdits(
                    env=[
                        f"CLIQUE_ID={DOMAIN_UID}.32766",
                        f"COMPUTE_DOMAIN_UUID={DOMAIN_UID}",
                        "COMPUTE_DOMAIN_NAME=imex-domain",
                        "COMPUTE_DOMAIN_NAMESPACE=default",
                    ],
                    device_nodes=[
                        DeviceNode(
                            path="/dev/nvidia-caps/nvidia-cap7",
                            type="c",
                            major=238,
                            minor=7,
                            file_mode=0o400,
                        )
                    ],
                    mounts=[
                        Mount(
                            host_path=f"/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/"
                            f"{DOMAIN_UID}",
                            container_path="/imexd",
                            options=["rw", "nosuid", "nodev", "bind"],
                        )
                    ],
                ),
            )
        ],
    )
