"""Regenerate the committed gRPC stubs (`make proto`): `python -m api.kubelet.generate [OUT]`.

The stubs are committed so the agent needs no code generator at run time; a test
regenerates them into a temporary directory and compares, so they cannot drift.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_FILES = (
    "api/kubelet/pluginregistration/api.proto",
    "api/kubelet/dra/v1/api.proto",
    "api/kubelet/dra/v1beta1/api.proto",
)


def generate(out_dir: Path, root: Path = REPO_ROOT) -> list[Path]:
    """Write `*_pb2.py`, `*_pb2.pyi` and `*_pb2_grpc.py` for every proto under `out_dir`."""
    from grpc_tools import protoc  # only needed here, not at run time

    well_known = resources.files("grpc_tools") / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *PROTO_FILES,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")
    outputs = []
    for proto in PROTO_FILES:
        stem = proto.removesuffix(".proto")
        outputs += [out_dir / f"{stem}_pb2.py", out_dir / f"{stem}_pb2.pyi"]
        outputs.append(out_dir / f"{stem}_pb2_grpc.py")
    return outputs


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else REPO_ROOT
    for path in generate(out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
