"""Driver file lookup, the dev root, and single-node NVLink detection.

The lookup cases are the reference's `TestFindFile` in
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-kubelet-plugin/root_test.go.

Deliberate fix over the reference: symlinks are resolved inside the root (like `chroot ROOT
readlink -f`), not against the real filesystem root, so no link leads out of the root.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.discovery import (
    BINARY_SEARCH_DIRS,
    LIBRARY_SEARCH_DIRS,
    DiscoveryError,
    dev_root,
    find_file,
    find_imex,
    find_imex_ctl,
    find_nvidia_smi,
    find_nvml_library,
    is_single_node_nvlink,
    require_file,
    resolve_in_root,
)
from agent.discovery.findfile import NVIDIA_SMI_DIRS


def touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    return path


def test_library_found(tmp_path):
    lib = touch(tmp_path / "usr/lib64/libnvidia-ml.so.1")
    assert find_nvml_library(tmp_path) == lib.resolve()


def test_directory_skipped_for_later_file(tmp_path):
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").mkdir(parents=True)
    lib = touch(tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    assert find_nvml_library(tmp_path) == lib.resolve()


def test_only_directory_is_error(tmp_path):
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").mkdir(parents=True)
    with pytest.raises(DiscoveryError, match=r'^error locating "libnvidia-ml\.so\.1"'):
        find_nvml_library(tmp_path)


def test_nothing_is_error(tmp_path):
    with pytest.raises(DiscoveryError, match=r'error locating "libnvidia-ml\.so\.1"') as err:
        require_file(tmp_path, "libnvidia-ml.so.1", LIBRARY_SEARCH_DIRS)
    assert "--container-driver-root" in str(err.value)


def test_nvidia_smi(tmp_path):
    smi = touch(tmp_path / "usr/bin/nvidia-smi")
    assert find_nvidia_smi(tmp_path) == smi.resolve()


def test_nvidia_smi_directory_skipped(tmp_path):
    (tmp_path / "opt/bin/nvidia-smi").mkdir(parents=True)
    smi = touch(tmp_path / "usr/bin/nvidia-smi")
    assert require_file(tmp_path, "nvidia-smi", NVIDIA_SMI_DIRS) == smi.resolve()


def test_root_itself_first(tmp_path):
    top = touch(tmp_path / "nvidia-smi")
    touch(tmp_path / "usr/bin/nvidia-smi")
    assert find_nvidia_smi(tmp_path) == top.resolve()


def test_symlinks_resolved(tmp_path):
    real = touch(tmp_path / "usr/lib64/libnvidia-ml.so.580.82.07")
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.580.82.07")
    found = find_nvml_library(tmp_path)
    assert found == real.resolve() and found.name == "libnvidia-ml.so.580.82.07"
    assert found.is_absolute()


def test_absolute_link_resolves_inside_the_root(tmp_path):
    # Deliberate fix over the reference, which resolves an absolute target against the
    # real filesystem root: here it starts again at ROOT, as `chroot ROOT readlink -f`.
    root = tmp_path / "root"
    inside = touch(root / "opt/nvidia/nvidia-imex")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-imex").symlink_to("/opt/nvidia/nvidia-imex")  # absolute target
    assert find_imex(root) == inside.resolve()
    elsewhere = touch(tmp_path / "elsewhere/nvidia-imex")
    (root / "usr/bin/nvidia-imex").unlink()
    (root / "usr/bin/nvidia-imex").symlink_to(elsewhere)  # outside the root: not followed
    with pytest.raises(DiscoveryError, match='error locating "nvidia-imex"'):
        find_imex(root)


def test_dangling_and_looping_links_skipped(tmp_path):
    (tmp_path / "opt/bin").mkdir(parents=True)
    (tmp_path / "opt/bin/nvidia-imex-ctl").symlink_to(tmp_path / "missing")
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-imex-ctl").symlink_to("nvidia-imex-ctl")  # loop
    ctl = touch(tmp_path / "sbin/nvidia-imex-ctl")
    assert find_imex_ctl(tmp_path) == ctl.resolve()


def test_symlink_to_directory_skipped(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-smi").symlink_to("/d")  # in-root absolute target
    with pytest.raises(DiscoveryError, match='error locating "nvidia-smi"'):
        find_nvidia_smi(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_unreadable_directory_skipped(tmp_path):
    locked = tmp_path / "opt/bin"
    touch(locked / "nvidia-smi")
    smi = touch(tmp_path / "usr/bin/nvidia-smi")
    locked.chmod(0)
    try:
        assert find_nvidia_smi(tmp_path) == smi.resolve()
    finally:
        locked.chmod(0o755)


# --- find_file: where a file was found inside the root, and what it resolves to --------------


def test_find_library_file(tmp_path):
    touch(tmp_path / "usr/lib64/libnvidia-ml.so.1")
    found = find_file(tmp_path, "libnvidia-ml.so.1", LIBRARY_SEARCH_DIRS)
    assert found is not None
    assert found.path == "/usr/lib64/libnvidia-ml.so.1"
    assert found.real_path == tmp_path / "usr/lib64/libnvidia-ml.so.1"


def test_find_skips_a_directory(tmp_path):
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").mkdir(parents=True)
    touch(tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    found = find_file(tmp_path, "libnvidia-ml.so.1", LIBRARY_SEARCH_DIRS)
    assert found is not None and found.path == "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


def test_find_only_a_directory_or_nothing(tmp_path):
    assert find_file(tmp_path, "libnvidia-ml.so.1", LIBRARY_SEARCH_DIRS) is None
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").mkdir(parents=True)
    assert find_file(tmp_path, "libnvidia-ml.so.1", LIBRARY_SEARCH_DIRS) is None


def test_find_binary_prefers_the_root_then_dir_order(tmp_path):
    (tmp_path / "opt/bin/nvidia-smi").mkdir(parents=True)
    touch(tmp_path / "usr/bin/nvidia-smi")
    touch(tmp_path / "sbin/nvidia-smi")
    found = find_file(tmp_path, "nvidia-smi", BINARY_SEARCH_DIRS)
    assert found is not None and found.path == "/usr/bin/nvidia-smi"
    touch(tmp_path / "nvidia-smi")
    found = find_file(tmp_path, "nvidia-smi", BINARY_SEARCH_DIRS)
    assert found is not None and found.path == "/nvidia-smi"


def test_links_resolve_inside_the_root(tmp_path):
    touch(tmp_path / "real/lib.so")
    (tmp_path / "usr/lib64").mkdir(parents=True)
    (tmp_path / "usr/lib64/abs.so").symlink_to("/real/lib.so")
    (tmp_path / "usr/lib64/rel.so").symlink_to("../../real/lib.so")
    (tmp_path / "usr/lib64/up.so").symlink_to("../../../../../../real/lib.so")
    (tmp_path / "usr/lib64/dirlink").symlink_to("/real")
    for name in ("abs.so", "rel.so", "up.so"):
        assert resolve_in_root(tmp_path, f"/usr/lib64/{name}") == tmp_path / "real/lib.so"
    assert resolve_in_root(tmp_path, "/usr/lib64/dirlink/lib.so") == tmp_path / "real/lib.so"
    assert resolve_in_root(tmp_path, "/../../usr/lib64/abs.so") == tmp_path / "real/lib.so"


def test_dangling_and_looping_links_are_skipped(tmp_path):
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-imex").symlink_to("/nowhere")
    (tmp_path / "usr/bin/loop").symlink_to("loop")
    assert resolve_in_root(tmp_path, "/usr/bin/loop") is None
    assert find_file(tmp_path, "nvidia-imex", BINARY_SEARCH_DIRS) is None
    assert find_file(tmp_path, "loop", BINARY_SEARCH_DIRS) is None
    touch(tmp_path / "bin/nvidia-imex")
    found = find_file(tmp_path, "nvidia-imex", BINARY_SEARCH_DIRS)
    assert found is not None and found.path == "/bin/nvidia-imex"


def test_a_link_to_a_host_file_outside_the_root_is_not_followed_out(tmp_path):
    (tmp_path / "usr/bin").mkdir(parents=True)
    # /bin/sh exists on this machine but not inside the root.
    (tmp_path / "usr/bin/nvidia-imex").symlink_to("/bin/sh")
    assert Path("/bin/sh").exists()
    assert find_file(tmp_path, "nvidia-imex", BINARY_SEARCH_DIRS) is None


def test_dev_root(tmp_path):
    assert str(dev_root(tmp_path)) == "/"
    (tmp_path / "dev").write_text("not a dir")
    assert str(dev_root(tmp_path)) == "/"
    (tmp_path / "dev").unlink()
    (tmp_path / "dev").mkdir()
    assert dev_root(tmp_path) == tmp_path


def test_single_node_nvlink_none(tmp_path):
    assert not is_single_node_nvlink(tmp_path)
    (tmp_path / "proc/driver/nvidia-nvswitch/devices").mkdir(parents=True)
    touch(tmp_path / "sys/class/infiniband/mlx5_0/device/vpd").write_bytes(b"\x82PN:MCX75")
    (tmp_path / "sys/class/infiniband/mlx5_1").mkdir()  # no vpd
    assert not is_single_node_nvlink(tmp_path)


def test_single_node_nvlink_nvswitch(tmp_path):
    (tmp_path / "proc/driver/nvidia-nvswitch/devices/0000:05:00.0").mkdir(parents=True)
    assert is_single_node_nvlink(tmp_path)


def test_single_node_nvlink_switch_management_port(tmp_path):
    touch(tmp_path / "sys/class/infiniband/mlx5_0/device/vpd").write_bytes(b"\x82xSW_MNG\x00")
    assert is_single_node_nvlink(tmp_path)
