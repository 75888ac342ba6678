"""Driver file lookup (reference §7.11), the dev root, and single-node NVLink detection."""

from __future__ import annotations

import os

import pytest

from agent.discovery import (
    DiscoveryError,
    dev_root,
    find_file,
    find_imex,
    find_imex_ctl,
    find_nvidia_smi,
    find_nvml_library,
    is_single_node_nvlink,
)
from agent.discovery.findfile import LIBRARY_SEARCH_DIRS, NVIDIA_SMI_DIRS


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
        find_file(tmp_path, "libnvidia-ml.so.1", LIBRARY_SEARCH_DIRS)
    assert "--container-driver-root" in str(err.value)


def test_nvidia_smi(tmp_path):
    smi = touch(tmp_path / "usr/bin/nvidia-smi")
    assert find_nvidia_smi(tmp_path) == smi.resolve()


def test_nvidia_smi_directory_skipped(tmp_path):
    (tmp_path / "opt/bin/nvidia-smi").mkdir(parents=True)
    smi = touch(tmp_path / "usr/bin/nvidia-smi")
    assert find_file(tmp_path, "nvidia-smi", NVIDIA_SMI_DIRS) == smi.resolve()


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


def test_absolute_link_resolves_against_real_root(tmp_path):
    elsewhere = touch(tmp_path / "elsewhere/nvidia-imex")
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-imex").symlink_to(elsewhere)  # absolute target
    assert find_imex(root) == elsewhere.resolve()


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
    (tmp_path / "usr/bin/nvidia-smi").symlink_to(tmp_path / "d")
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
