"""`compute-domain-agent prestart`: waits for the NVIDIA driver under the driver root."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from agent import prestart
from agent.cli import add_commands
from runtime.cli import program_parser
from sim.cluster.node import NodeHost

SMI_OK = "#!/bin/sh\necho 'NVIDIA-SMI version  : 580.82.07'\n"
SMI_FAILING = (
    "#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch' >&2\nexit 18\n"
)


def install(root: Path, *, smi: str | None = SMI_OK, lib: bool = True, lib_dir: str = "usr/lib64",
            smi_dir: str = "usr/bin") -> None:  # fmt: skip
    if smi is not None:
        path = root / smi_dir / "nvidia-smi"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(smi)
        path.chmod(0o755)
    if lib:
        path = root / lib_dir / "libnvidia-ml.so.1"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")


def parse(argv: list[str], environ: dict[str, str] | None = None):
    parser, sub = program_parser("compute-domain-agent", None)
    add_commands(sub, environ=environ or {})
    return parser.parse_args(argv)


class FakeSleep:
    """Counts the waits; runs `then` before the `at`-th one returns (the driver arrives)."""

    def __init__(self, at: int | None = None, then=lambda: None) -> None:
        self.calls: list[float] = []
        self.at, self.then = at, then

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        if len(self.calls) == self.at:
            self.then()
        if len(self.calls) > 50:
            raise AssertionError("still waiting after 50 attempts")


def test_found_at_once_runs_nvidia_smi_and_reports_both(tmp_path: Path) -> None:
    install(tmp_path)
    found = prestart.check(tmp_path)
    assert found.ok
    assert found.smi is not None and found.smi.path == "/usr/bin/nvidia-smi"
    assert found.lib is not None and found.lib.path == "/usr/lib64/libnvidia-ml.so.1"
    assert found.version == "NVIDIA-SMI version  : 580.82.07"
    sleep = FakeSleep()
    out = io.StringIO()
    assert prestart.wait_for_driver(tmp_path, "/", 10.0, out, sleep=sleep).ok
    assert sleep.calls == [] and out.getvalue() == ""


def test_missing_files_are_waited_for_with_hints_every_sixth_attempt(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    sleep = FakeSleep(at=8, then=lambda: install(tmp_path))
    out = io.StringIO()
    found = prestart.wait_for_driver(tmp_path, "/run/nvidia/driver", 2.5, out, sleep=sleep)
    assert found.ok
    assert sleep.calls == [2.5] * 8
    text = out.getvalue()
    attempts = [line for line in text.splitlines() if line.startswith("attempt ")]
    assert len(attempts) == 8
    assert attempts[0] == (
        f"attempt 1: {tmp_path} (/run/nvidia/driver on the host): nvidia-smi: not found, "
        "libnvidia-ml.so.1: not found"
    )
    hints = [line for line in text.splitlines() if "set nvidiaDriverRoot in the Helm" in line]
    assert len(hints) == 2  # attempts 1 and 7
    assert hints[0] == (
        "hint: NVIDIA_DRIVER_ROOT=/run/nvidia/driver is the driver root on the host: / for a "
        "host-installed driver, /run/nvidia/driver for the GPU Operator's driver container; set "
        "nvidiaDriverRoot in the Helm values"
    )
    assert f"hint: {tmp_path} holds: etc" in text


def test_one_file_missing_is_named(tmp_path: Path) -> None:
    install(tmp_path, lib=False)
    found = prestart.check(tmp_path)
    assert not found.ok and found.lib is None
    line = prestart.describe(tmp_path, "/", found)
    assert f"nvidia-smi: {tmp_path}/usr/bin/nvidia-smi" in line
    assert "libnvidia-ml.so.1: not found" in line


@pytest.mark.parametrize(
    ("smi_dir", "lib_dir"),
    [("usr/sbin", "usr/lib/x86_64-linux-gnu"), ("bin", "usr/lib"), ("sbin", "lib"),
     ("opt/bin", "lib64"), ("usr/bin", "usr/lib/aarch64-linux-gnu")],
)  # fmt: skip
def test_every_search_place_is_looked_in(tmp_path: Path, smi_dir: str, lib_dir: str) -> None:
    install(tmp_path, smi_dir=smi_dir, lib_dir=lib_dir)
    found = prestart.check(tmp_path)
    assert found.ok, found
    assert found.smi is not None and found.smi.path == f"/{smi_dir}/nvidia-smi"
    assert found.lib is not None and found.lib.path == f"/{lib_dir}/libnvidia-ml.so.1"


def test_a_link_to_the_library_is_resolved_inside_the_root(tmp_path: Path) -> None:
    install(tmp_path, lib=False)
    real = tmp_path / "usr/lib64/libnvidia-ml.so.580.82.07"
    real.parent.mkdir(parents=True)
    real.write_text("")
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").symlink_to("/usr/lib64/libnvidia-ml.so.580.82.07")
    found = prestart.check(tmp_path)
    assert found.ok and found.lib is not None and found.lib.real_path == real


def test_nvidia_smi_failing_keeps_waiting_and_says_why(tmp_path: Path) -> None:
    install(tmp_path, smi=SMI_FAILING)
    sleep = FakeSleep(at=2, then=lambda: install(tmp_path))
    out = io.StringIO()
    assert prestart.wait_for_driver(tmp_path, "/", 0.0, out, sleep=sleep).ok
    text = out.getvalue()
    assert (
        "`nvidia-smi --version` exited 18: Failed to initialize NVML: Driver/library version "
        "mismatch" in text
    )
    assert "nvidia-smi is there but does not answer" in text
    assert len(sleep.calls) == 2


def test_nvidia_smi_runs_with_a_clean_environment_preloading_the_library(tmp_path: Path) -> None:
    install(tmp_path, lib=False)
    lib = tmp_path / "usr/lib64/libnvidia-ml.so.1"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF")
    seen: dict[str, object] = {}

    def run(argv, **kwargs):
        seen.update(argv=argv, env=kwargs["env"], timeout=kwargs["timeout"])
        return subprocess.CompletedProcess(argv, 0, "NVIDIA-SMI version  : 1\n", "")

    assert prestart.check(tmp_path, timeout=7.0, run=run).ok
    assert seen == {
        "argv": [str(tmp_path / "usr/bin/nvidia-smi"), "--version"],
        "env": {"LD_PRELOAD": str(lib)},
        "timeout": 7.0,
    }


def test_nvidia_smi_that_hangs_or_cannot_run(tmp_path: Path) -> None:
    install(tmp_path)

    def hangs(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    found = prestart.check(tmp_path, timeout=3.0, run=hangs)
    assert not found.ok and found.error == "`nvidia-smi --version` did not finish within 3s"
    (tmp_path / "usr/bin/nvidia-smi").chmod(0o644)
    found = prestart.check(tmp_path)
    assert not found.ok and "could not run: Permission denied" in found.error


def test_flags_and_their_environment(tmp_path: Path) -> None:
    args = parse(["prestart"])
    assert args.driver_root == Path("/driver-root")
    assert args.nvidia_driver_root == "/"
    assert args.interval == 10.0
    args = parse(["prestart"], {"DRIVER_ROOT_CTR_PATH": "/driver-root-parent/driver",
                                "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
                                "PRESTART_INTERVAL": "1m30s"})  # fmt: skip
    assert args.driver_root == Path("/driver-root-parent/driver")
    assert args.nvidia_driver_root == "/run/nvidia/driver"
    assert args.interval == 90.0
    assert parse(["prestart", "--interval", "0", "--driver-root", str(tmp_path)]).interval == 0
    with pytest.raises(SystemExit) as bad:
        parse(["prestart", "--interval", "soon"])
    assert bad.value.code == 2


def test_the_command_exits_0_naming_what_it_found(tmp_path: Path) -> None:
    install(tmp_path)
    out = subprocess.run(
        [str(Path(sys.executable).parent / "compute-domain-agent"), "prestart"],
        env={"DRIVER_ROOT_CTR_PATH": str(tmp_path), "NVIDIA_DRIVER_ROOT": ""},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        f"NVIDIA driver found under {tmp_path} (/ on the host): {tmp_path}/usr/bin/nvidia-smi "
        f"(NVIDIA-SMI version  : 580.82.07), {tmp_path}/usr/lib64/libnvidia-ml.so.1\n"
    )


def test_a_usage_error_exits_non_zero() -> None:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "compute-domain-agent"), "prestart", "--interval=x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "is not a duration" in out.stderr


def test_a_simulated_node_has_the_driver_prestart_waits_for(tmp_path: Path) -> None:
    """NodeHost installs a fake nvidia-smi (really run here) and libnvidia-ml.so.1."""
    host = NodeHost(tmp_path / "node", "node-01", clique=1)
    found = prestart.check(host.fs)
    assert found.ok, found
    assert found.version == "NVIDIA-SMI version  : 580.82.07"
    smi = subprocess.run([host.path("/usr/bin/nvidia-smi")], capture_output=True, text=True,
                         env={}, timeout=30)  # fmt: skip
    assert smi.returncode == 0 and "Driver Version: 580.82.07" in smi.stdout
    host.remove_driver()
    assert not prestart.check(host.fs).ok
    without = NodeHost(tmp_path / "bare", "node-02", clique=None, driver=False)
    assert prestart.check(without.fs).smi is None
    assert prestart.check(NodeHost(tmp_path / "h100", "node-03", clique=None).fs).ok
