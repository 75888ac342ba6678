"""The single-file agent (PyInstaller onefile) runs with no Python and no packages around it."""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import pytest
from eventually import eventually
from plugin_env import Kubelet, NodeEnv

from api import names
from api.version import __version__

REPO = Path(__file__).resolve().parents[2]
BUILD = runpy.run_path(str(REPO / "packaging" / "pyinstaller" / "build.py"), run_name="build")
# What a host without Python gives a process: no PYTHONPATH, no venv, no HOME.
BARE_ENV = {"PATH": "/usr/bin:/bin"}


def run_bare(binary: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *args], env=BARE_ENV, cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def test_agent_never_imports_the_simulator_or_test_tools():
    """The spec leaves sim/ and the test-only packages out; that is only safe if unused."""
    code = textwrap.dedent("""
        import pkgutil, sys, importlib
        import agent, cdi
        for pkg in (agent, cdi):
            for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
                importlib.import_module(mod.name)
        import agent.cli, controller.cli
        print(" ".join(sorted({m.split(".")[0] for m in sys.modules})))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=True)
    loaded = set(out.stdout.split())
    assert "agent" in loaded
    assert not loaded & {"sim", "tests", "pytest", "hypothesis", "PyInstaller", "tkinter"}


def test_version_and_help_from_a_bare_environment(frozen_agent, tmp_path):
    out = run_bare(frozen_agent, "version", cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, f"compute-domain-agent {__version__}\n",
                                                        "")
    assert run_bare(frozen_agent, "--version", cwd=tmp_path).stdout == out.stdout
    out = run_bare(frozen_agent, "plugin", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for flag in ("--node-name", "[env NODE_NAME]", "--imex-mode", "--kubelet-plugins-directory"):
        assert flag in out.stdout
    out = run_bare(frozen_agent, "daemon", "check", "--help", cwd=tmp_path)
    assert out.returncode == 0 and "--imexd-dir" in out.stdout, out.stderr
    # The probe's no-IMEX path runs real code: argparse, names, the exit code.
    out = run_bare(frozen_agent, "daemon", "check", cwd=tmp_path)
    assert out.returncode == 0 and "no cliqueID" in out.stdout, out.stderr
    out = run_bare(frozen_agent, "plugin", cwd=tmp_path)
    assert out.returncode == 2 and "--node-name" in out.stderr
    # diagnose is in the binary: help, and a clear error without a usable kubeconfig.
    out = run_bare(frozen_agent, "diagnose", "--help", cwd=tmp_path)
    assert out.returncode == 0 and "--driver-namespace" in out.stdout, out.stderr
    out = run_bare(frozen_agent, "diagnose", "default/demo", "--kubeconfig",
                   str(tmp_path / "missing"), cwd=tmp_path)
    assert out.returncode == 2 and "cannot load the cluster configuration" in out.stderr
    assert "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written to the working directory


def test_binary_contents(frozen_agent):
    """Stubs and templates inside; no NVIDIA library, no simulator, no test tools."""
    from PyInstaller.archive.readers import CArchiveReader

    archive = CArchiveReader(str(frozen_agent))
    assert "agent/templates/compute-domain-daemon-config.tmpl.cfg" in archive.toc
    assert not [n for n in archive.toc if Path(n).name.startswith(("libnvidia", "libcuda"))]
    modules = set(archive.open_embedded_archive("PYZ.pyz").toc)
    for stub in ("api.kubelet.dra.v1.api_pb2_grpc", "api.kubelet.dra.v1beta1.api_pb2_grpc",
                 "api.kubelet.pluginregistration.api_pb2_grpc", "pynvml", "agent.plugin.app",
                 "agent.daemon.supervisor"):
        assert stub in modules
    roots = {m.split(".")[0] for m in modules}
    assert not roots & {"sim", "tests", "grpc_tools", "pytest", "hypothesis", "tkinter"}
    assert frozen_agent.stat().st_size < 60 * 2**20


def test_frozen_plugin_registers_serves_and_stops_cleanly(
    frozen_agent, apiserver, cluster, short_dir, tmp_path
):
    node = NodeEnv(short_dir / "n")
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kc")
    log = tmp_path / "agent.log"
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    with log.open("wb") as err:
        proc = subprocess.Popen([str(frozen_agent), "plugin", *node.args(kubeconfig)],
                                env=BARE_ENV, cwd=workdir, stdout=subprocess.DEVNULL, stderr=err)
    kubelet = Kubelet(node)
    try:
        def registered() -> object:
            if proc.poll() is not None:
                pytest.fail(log.read_text()[-3000:])
            try:
                return kubelet.get_info(timeout=0.5)
            except grpc.RpcError:
                return None

        try:
            info = eventually(registered, "registration", timeout=60, interval=0.05)
        except AssertionError:
            raise AssertionError("no registration: " + log.read_text()[-3000:]) from None
        assert info.name == names.DRIVER_NAME
        assert info.endpoint == str(node.dra_socket)
        kubelet.notify(True)
        assert list(kubelet.prepare([]).claims) == []
        assert list(kubelet.unprepare([]).claims) == []
        assert list(kubelet.prepare([], beta=True).claims) == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert not node.dra_socket.exists()
    assert not node.registration_socket.exists()
    assert "Traceback" not in log.read_text()


def test_build_script_refuses_nvidia_libraries(tmp_path, monkeypatch):
    # runpy returns a copy of the script's globals; check_binary reads the originals.
    script_globals = BUILD["check_binary"].__globals__
    monkeypatch.setitem(script_globals, "bundled_names", lambda binary: ["libnvidia-ml.so.1"])
    with pytest.raises(BUILD["BuildError"], match="NVIDIA"):
        BUILD["check_binary"](tmp_path / "x")


def test_freshness_follows_the_sources(tmp_path):
    binary = tmp_path / "compute-domain-agent"
    assert not BUILD["is_fresh"](binary, "agent")
    binary.write_bytes(b"")
    newest = max(p.stat().st_mtime for p in BUILD["source_files"]("agent"))
    os.utime(binary, (newest + 10, newest + 10))
    assert BUILD["is_fresh"](binary, "agent")
    os.utime(binary, (newest - 10, newest - 10))
    assert not BUILD["is_fresh"](binary, "agent")
