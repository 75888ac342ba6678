"""The base CDI spec: built from a fake driver root, or by a fake `nvidia-ctk`.

findFile, which locates its files, is tested in test_discovery_findfile.py.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from cdi_helpers import assert_schema_valid, read_yaml

from agent.cdispecs import find_device_nodes, write_base_spec
from agent.discovery import CharDevice
from cdi import load_spec

BASE_FILE = "k8s.compute-domain.nvidia.com-device_base.yaml"
RO = ["ro", "nosuid", "nodev", "bind"]
NVML_REAL = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.10"

# In-root path → device; everything else under dev/ is "not a char device".
FAKE_DEVICES = {
    path: CharDevice(path, *numbers)
    for path, numbers in {
        "/dev/nvidia0": (195, 0, 0o666),
        "/dev/nvidiactl": (195, 255, 0o666),
        "/dev/nvidia-uvm": (510, 0, 0o666),
        "/dev/nvidia-uvm-tools": (510, 1, 0o666),
        "/dev/nvidia-modeset": (195, 254, 0o666),
        "/dev/nvidia-caps/nvidia-cap1": (238, 1, 0o400),
        "/dev/nvidia-caps/nvidia-cap2": (238, 2, 0o444),
        "/dev/nvidia-caps-imex-channels/channel0": (234, 0),
        "/dev/nvidia-fs0": (241, 0),  # excluded: GPUDirect Storage
        "/dev/nvidia-nvswitchctl": (236, 0),  # excluded
        "/dev/nvidia-nvlink": (237, 0),  # excluded
        "/dev/fuse": (10, 229),  # not NVIDIA
    }.items()
}


def fake_probe(root: Path):
    def probe(path: Path) -> CharDevice | None:
        return FAKE_DEVICES.get("/" + path.relative_to(root).as_posix())

    return probe


def make_file(path: Path, text: str = "x", mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
def driver_root(tmp_path: Path) -> Path:
    """A driver root as the plugin sees the host: device files, IMEX binaries, NVML."""
    root = tmp_path / "driver-root"
    for dev in FAKE_DEVICES:
        make_file(root / dev.lstrip("/"), "", 0o644)
    make_file(root / "dev/nvidia-notachar", "", 0o644)  # matches, but the probe says no
    make_file(root / "usr/bin/nvidia-imex")
    make_file(root / "usr/bin/nvidia-imex-ctl.real")
    (root / "usr/bin/nvidia-imex-ctl").symlink_to("nvidia-imex-ctl.real")
    make_file(root / NVML_REAL.lstrip("/"), mode=0o644)
    # An absolute link, as driver installers write them: resolved inside the root.
    (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").symlink_to(NVML_REAL)
    (root / "usr/lib64/libnvidia-ml.so.1").mkdir(parents=True)  # a directory: skipped
    return root


def check_file(path: Path) -> dict:
    assert path.name == BASE_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = read_yaml(path)
    assert_schema_valid(doc)
    assert load_spec(path).to_dict() == doc
    return doc


def no_ctk(tmp_path: Path) -> str:
    empty = tmp_path / "empty-path"
    empty.mkdir(exist_ok=True)
    return str(empty)


EXPECTED_NODE_PATHS = [
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia0",
    "/dev/nvidiactl",
    "/dev/nvidia-caps-imex-channels/channel0",
    "/dev/nvidia-caps/nvidia-cap1",
    "/dev/nvidia-caps/nvidia-cap2",
]


def test_builtin_base_spec_from_a_driver_root(tmp_path, driver_root):
    cdi_root = tmp_path / "cdi"
    result = write_base_spec(
        cdi_root,
        container_driver_root=str(driver_root),
        host_driver_root="/",
        ctk_search_path=no_ctk(tmp_path),
        char_device=fake_probe(driver_root),
    )
    assert result.source == "builtin"
    assert result.missing == ()
    assert result.ctk_error == ""
    assert result.path == cdi_root / BASE_FILE
    doc = check_file(result.path)
    assert doc == result.spec.to_dict()
    assert doc["cdiVersion"] == "0.5.0"
    assert doc["kind"] == "k8s.compute-domain.nvidia.com/device"
    assert "containerEdits" not in doc
    [device] = doc["devices"]
    assert device["name"] == "all"
    edits = device["containerEdits"]
    assert edits["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    nodes = edits["deviceNodes"]
    assert [n["path"] for n in nodes] == EXPECTED_NODE_PATHS
    for node in nodes:
        numbers = FAKE_DEVICES[node["path"]]
        assert node["hostPath"] == node["path"]  # driver root → host root "/"
        assert node["type"] == "c"
        assert node["major"] == numbers.major
        assert node.get("minor", 0) == numbers.minor
        assert node.get("fileMode") == numbers.file_mode
    assert edits["mounts"] == [
        {
            "hostPath": "/usr/bin/nvidia-imex",
            "containerPath": "/usr/bin/nvidia-imex",
            "options": RO,
        },
        {
            "hostPath": "/usr/bin/nvidia-imex-ctl.real",
            "containerPath": "/usr/bin/nvidia-imex-ctl",
            "options": RO,
        },
        {
            "hostPath": NVML_REAL,
            "containerPath": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "options": RO,
        },
    ]


def test_builtin_base_spec_with_another_host_driver_root(tmp_path, driver_root):
    result = write_base_spec(
        tmp_path / "cdi",
        container_driver_root=str(driver_root),
        host_driver_root="/run/nvidia/driver",
        ctk_search_path=no_ctk(tmp_path),
        char_device=fake_probe(driver_root),
    )
    edits = check_file(result.path)["devices"][0]["containerEdits"]
    assert edits["deviceNodes"][0] == {
        "path": "/dev/nvidia-modeset",
        "hostPath": "/run/nvidia/driver/dev/nvidia-modeset",
        "type": "c",
        "major": 195,
        "minor": 254,
        "fileMode": 0o666,
    }
    assert edits["mounts"][0]["hostPath"] == "/run/nvidia/driver/usr/bin/nvidia-imex"


def test_builtin_base_spec_from_an_empty_driver_root_is_valid_and_reports(tmp_path):
    root = tmp_path / "driver-root"
    root.mkdir()
    result = write_base_spec(
        tmp_path / "cdi",
        container_driver_root=str(root),
        host_driver_root="/",
        dev_root=root,
        ctk_search_path=no_ctk(tmp_path),
        char_device=lambda path: None,
    )
    doc = check_file(result.path)
    assert doc == {
        "cdiVersion": "0.3.0",
        "kind": "k8s.compute-domain.nvidia.com/device",
        "devices": [{"name": "all", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}],
    }
    assert len(result.missing) == 4
    assert result.missing[0].startswith("NVIDIA device nodes: none found under")
    assert [m.split(":")[0] for m in result.missing[1:]] == [
        "nvidia-imex",
        "nvidia-imex-ctl",
        "libnvidia-ml.so.1",
    ]
    assert "/usr/sbin/nvidia-imex" in result.missing[1]
    assert "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1" in result.missing[3]


def test_binary_at_the_root_is_mounted_in_usr_bin(tmp_path):
    root = tmp_path / "flat"
    make_file(root / "nvidia-imex")
    result = write_base_spec(
        tmp_path / "cdi",
        container_driver_root=str(root),
        host_driver_root=str(root),  # equal roots: no transform
        dev_root=root,
        ctk_search_path=no_ctk(tmp_path),
        char_device=lambda path: None,
    )
    mounts = check_file(result.path)["devices"][0]["containerEdits"]["mounts"]
    assert mounts == [
        {
            "hostPath": str(root / "nvidia-imex"),
            "containerPath": "/usr/bin/nvidia-imex",
            "options": RO,
        }
    ]


def test_find_device_nodes_keeps_host_path_when_the_dev_root_is_not_slash(driver_root):
    nodes = find_device_nodes(driver_root, fake_probe(driver_root))
    assert [n.path for n in nodes] == EXPECTED_NODE_PATHS
    assert nodes[0].host_path == str(driver_root / "dev/nvidia-modeset")


def test_find_device_nodes_with_the_real_probe_on_a_dir_without_devices(driver_root):
    assert find_device_nodes(driver_root) == []  # regular files are not char devices


# --- nvidia-ctk ----------------------------------------------------------------------------

CTK_SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "k8s.compute-domain.nvidia.com/device",
    "devices": [
        {
            "name": "all",
            "containerEdits": {
                "deviceNodes": [
                    {"path": "/dev/nvidiactl", "hostPath": "/driver-root/dev/nvidiactl"},
                    {"path": "/dev/nvidia0", "hostPath": "/driver-root/dev/nvidia0"},
                ]
            },
        }
    ],
    "containerEdits": {
        "env": ["NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64", "NVIDIA_VISIBLE_DEVICES=all"],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/usr/local/nvidia/toolkit/nvidia-cdi-hook",
                "args": [
                    "nvidia-cdi-hook",
                    "create-symlinks",
                    "--link",
                    "libcuda.so.1::/usr/lib64/libcuda.so",
                ],
            }
        ],
        "mounts": [
            {
                "hostPath": "/driver-root/usr/lib64/libcuda.so.570.86.10",
                "containerPath": "/usr/lib64/libcuda.so.570.86.10",
                "options": RO,
            }
        ],
    },
}


def fake_ctk(tmp_path: Path, body: str) -> tuple[str, Path]:
    """A PATH dir holding an `nvidia-ctk` script that records its arguments."""
    bindir = tmp_path / "ctk-bin"
    args_file = tmp_path / "ctk-args"
    make_file(
        bindir / "nvidia-ctk",
        f'#!/bin/sh\nprintf "%s\\n" "$@" > "{args_file}"\n'
        'echo "level=info msg=\\"Generating CDI spec\\"" >&2\n' + body,
    )
    return str(bindir), args_file


def printing(doc: object) -> str:
    return f"cat <<'JSON'\n{json.dumps(doc)}\nJSON\n"


def test_base_spec_from_nvidia_ctk(tmp_path):
    path_dir, args_file = fake_ctk(tmp_path, printing(CTK_SPEC))
    result = write_base_spec(
        tmp_path / "cdi",
        container_driver_root="/driver-root",
        host_driver_root="/",
        dev_root="/driver-root",
        hook_path="/usr/local/nvidia/toolkit/nvidia-cdi-hook",
        ctk_search_path=path_dir,
    )
    assert result.source == "nvidia-ctk"
    assert result.ctk_error == "" and result.missing == ()
    assert args_file.read_text().splitlines() == [
        "cdi",
        "generate",
        "--mode=management",
        "--vendor=k8s.compute-domain.nvidia.com",
        "--class=device",
        "--driver-root=/driver-root",
        "--dev-root=/driver-root",
        "--nvidia-cdi-hook-path=/usr/local/nvidia/toolkit/nvidia-cdi-hook",
        "--format=json",
    ]
    doc = check_file(result.path)
    assert doc["cdiVersion"] == "0.5.0"
    assert doc["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0"},  # sorted, root-transformed
        {"path": "/dev/nvidiactl", "hostPath": "/dev/nvidiactl"},
    ]
    common = doc["containerEdits"]
    assert common["env"] == ["NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64", "NVIDIA_VISIBLE_DEVICES=void"]
    assert common["mounts"][0]["hostPath"] == "/usr/lib64/libcuda.so.570.86.10"
    assert common["hooks"] == CTK_SPEC["containerEdits"]["hooks"]  # createContainer: untouched


def test_nvidia_ctk_without_hook_path_and_with_another_kind(tmp_path):
    other = {**CTK_SPEC, "kind": "nvidia.com/gpu"}
    path_dir, args_file = fake_ctk(tmp_path, printing(other))
    result = write_base_spec(
        tmp_path / "cdi",
        container_driver_root="/driver-root",
        host_driver_root="/driver-root",
        dev_root="/",
        ctk_search_path=path_dir,
    )
    assert result.source == "nvidia-ctk"
    assert "--dev-root=/" in args_file.read_text().splitlines()
    assert not any(
        a.startswith("--nvidia-cdi-hook-path") for a in args_file.read_text().splitlines()
    )
    doc = check_file(result.path)
    assert doc["kind"] == "k8s.compute-domain.nvidia.com/device"
    # Equal roots: host paths as the toolkit printed them.
    assert doc["containerEdits"]["mounts"][0]["hostPath"].startswith("/driver-root/")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ('echo "failed to initialize NVML" >&2\nexit 1\n', "exited with status 1: "),
        ("echo 'not json'\n", "printed no valid CDI spec"),
        (
            printing({**CTK_SPEC, "devices": [{**CTK_SPEC["devices"][0], "name": "gpu0"}]}),
            "no device 'all'",
        ),
        (printing({**CTK_SPEC, "containerEdits": {"env": ["NOEQUALS"]}}), "invalid environment"),
    ],
)
def test_failing_nvidia_ctk_falls_back_to_the_builtin_spec(tmp_path, driver_root, body, error):
    path_dir, _ = fake_ctk(tmp_path, body)
    result = write_base_spec(
        tmp_path / "cdi",
        container_driver_root=str(driver_root),
        host_driver_root="/",
        ctk_search_path=path_dir,
        char_device=fake_probe(driver_root),
    )
    assert result.source == "builtin"
    assert error in result.ctk_error
    assert "nvidia-ctk cdi generate --mode=management" in result.ctk_error
    doc = check_file(result.path)
    assert [
        n["path"] for n in doc["devices"][0]["containerEdits"]["deviceNodes"]
    ] == EXPECTED_NODE_PATHS


def test_ctk_stderr_is_in_the_error(tmp_path, driver_root):
    path_dir, _ = fake_ctk(tmp_path, 'echo "failed to initialize NVML" >&2\nexit 3\n')
    result = write_base_spec(
        tmp_path / "cdi",
        container_driver_root=str(driver_root),
        host_driver_root="/",
        ctk_search_path=path_dir,
        char_device=fake_probe(driver_root),
    )
    assert "status 3" in result.ctk_error and "failed to initialize NVML" in result.ctk_error
