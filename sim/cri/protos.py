"""The CRI v1 gRPC stubs, generated from the pinned release's own `api.proto`.

`make k8s` runs `python -m sim.cri.protos OUT PROTO`: PROTO is `k8s.io/cri-api`'s
`pkg/apis/runtime/v1/api.proto` in Go's module cache at the version `upstream/go.mod`
pins, so the wire types are exactly the kubelet's and nothing is copied into this
repository. The stubs land in `.cache/k8s/<release>/cri/` as the package `criapi.v1`
(the proto's own package, `runtime.v1`, stays the service name on the wire; the module
name avoids this repository's `runtime` package).

Given the pinned `github.com/moby/spdystream` module directory as well, it also writes the
SPDY/3 header-compression dictionary (the byte table of that module's
`spdy/dictionary.go`, the one the kubelet's streaming client compresses with) to
`spdy-dictionary.bin` there, so the runtime's streaming server (sim/cri/spdy.py) needs
neither Go nor a copy of the table at run time.
"""

from __future__ import annotations

import importlib
import re
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path
from types import ModuleType

from sim.controlplane.binaries import ComponentsMissingError, locate

PACKAGE = "criapi.v1"
DICTIONARY = "spdy-dictionary.bin"
# The SPDY/3 header dictionary has 1423 bytes: a parse that finds another size is wrong.
DICTIONARY_SIZE = 1423


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


def write_dictionary(out_dir: Path, spdystream: Path) -> Path:
    """Write the bytes of `headerDictionary` in `spdystream`/spdy/dictionary.go to
    `out_dir`/spdy-dictionary.bin; returns that file."""
    source = (spdystream / "spdy" / "dictionary.go").read_text()
    table = re.search(r"headerDictionary\s*=\s*\[\]byte\{([^}]*)\}", source)
    if table is None:
        raise RuntimeError(f"no headerDictionary byte table in {spdystream}/spdy/dictionary.go")
    data = bytes(int(h, 16) for h in re.findall(r"0x([0-9a-fA-F]{2})", table.group(1)))
    if len(data) != DICTIONARY_SIZE:
        raise RuntimeError(f"the SPDY/3 dictionary in {spdystream} has {len(data)} bytes, "
                           f"not {DICTIONARY_SIZE}")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / DICTIONARY
    target.write_bytes(data)
    return target


def load_dictionary() -> bytes:
    """The SPDY/3 header dictionary `make k8s` wrote; ComponentsMissingError naming
    `make k8s` when it is not there."""
    path = locate().directory / "cri" / DICTIONARY
    if not path.exists():
        raise ComponentsMissingError(f"the SPDY/3 dictionary is not at {path}: run `make k8s`")
    return path.read_bytes()


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


if __name__ == "__main__":  # OUT PROTO [SPDYSTREAM_DIR]
    print(generate(Path(sys.argv[1]), Path(sys.argv[2])))
    if len(sys.argv) > 3:
        print(write_dictionary(Path(sys.argv[1]), Path(sys.argv[3])))
