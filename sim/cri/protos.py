"""The CRI v1 gRPC stubs, generated from the pinned release's own `api.proto`.

`make k8s` runs `python -m sim.cri.protos OUT PROTO`: PROTO is `k8s.io/cri-api`'s
`pkg/apis/runtime/v1/api.proto` in Go's module cache at the version `upstream/go.mod`
pins, so the wire types are exactly the kubelet's and nothing is copied into this
repository. The stubs land in `.cache/k8s/<release>/cri/` as the package `criapi.v1`
(the proto's own package, `runtime.v1`, stays the service name on the wire; the module
name avoids this repository's `runtime` package).
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path
from types import ModuleType

from sim.controlplane.binaries import ComponentsMissingError, locate

PACKAGE = "criapi.v1"


def generate(out_dir: Path, proto: Path) -> Path:
    """Write `criapi/v1/api_pb2{,_grpc}.py` under `out_dir` from `proto`; returns the dir."""
    from grpc_tools import protoc  # build time only

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "criapi" / "v1" / "api.proto"
        source.parent.mkdir(parents=True)
        shutil.copyfile(proto, source)
        staging = Path(tmp) / "out"
        staging.mkdir()
        args = ["grpc_tools.protoc", f"-I{tmp}", f"-I{resources.files('grpc_tools') / '_proto'}",
                f"--python_out={staging}", f"--grpc_python_out={staging}",
                "criapi/v1/api.proto"]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {proto}")
        for package in ("criapi", "criapi/v1"):
            (staging / package / "__init__.py").touch()
        target = out_dir / "criapi"
        shutil.rmtree(target, ignore_errors=True)
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging / "criapi", target)
    return out_dir


def load() -> tuple[ModuleType, ModuleType]:
    """(api_pb2, api_pb2_grpc) of the pinned release; ComponentsMissingError naming
    `make k8s` when they were not generated."""
    directory = locate().directory / "cri"
    if not (directory / "criapi" / "v1" / "api_pb2_grpc.py").exists():
        raise ComponentsMissingError(
            f"the CRI v1 stubs are not generated in {directory}: run `make k8s`")
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    return (importlib.import_module(f"{PACKAGE}.api_pb2"),
            importlib.import_module(f"{PACKAGE}.api_pb2_grpc"))


if __name__ == "__main__":
    print(generate(Path(sys.argv[1]), Path(sys.argv[2])))
