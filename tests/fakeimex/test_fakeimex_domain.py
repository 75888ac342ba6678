"""Fake `nvidia-imex` daemons forming a domain on loopback, observed through the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
from eventually import eventually
from fakeimex_helpers import Domain, free_port, ip

NAMES = ["imex-node-0", "imex-node-1", "imex-node-2"]


def start_nodes(domain: Domain, count: int, **knobs: object) -> None:
    for n in range(count):
        domain.start(
            NAMES[n] if n < len(NAMES) else f"imex-node-{n}",
            domain.config(f"imex-node-{n}", ip(n + 1)),
            **knobs,
        )


def test_three_daemons_form_a_domain_and_lose_a_peer(domain: Domain):
    domain.write_hosts({name: ip(n + 1) for n, name in enumerate(NAMES)})
    domain.write_nodes(NAMES)
    start_nodes(domain, 3)
    for n, name in enumerate(NAMES):
        state = domain.wait_ready(name, "UP")
        assert (state["node_id"], state["bind_ip"]) == (n, ip(n + 1))

    for n in range(3):
        query = domain.ctl("-c", str(domain.root / f"imex-node-{n}.cfg"), "-q")
        assert (query.returncode, query.stdout) == (0, "READY\n")
    result = domain.ctl("-i", ip(2), str(domain.cmd_port), "-N", "-j")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["status"] == "UP"
    assert list(document) == ["nodes", "timestamp", "status"]
    assert sorted(document["nodes"]) == ["0", "1", "2"]
    for k, node in document["nodes"].items():
        assert node["status"] == "READY" and node["host"] == ip(int(k) + 1)
        assert node["version"] == "570.172.08" and "hostName" not in node
        assert {c["status"] for c in node["connections"].values()} == {"CONNECTED"}
    with_names = json.loads(
        domain.ctl("-i", ip(1), "-p", str(domain.cmd_port), "-N", "-j", "-H").stdout
    )
    assert with_names["nodes"]["2"]["hostName"] == "imex-node-2"
    text = domain.ctl("-c", str(domain.root / "imex-node-0.cfg"), "-N").stdout
    assert "Node #1   - 127.0.1.2       - READY" in text
    assert text.rstrip().endswith("Domain State: UP")

    domain.procs["imex-node-1"].kill()  # a crash: no goodbye, the sockets just reset
    domain.procs["imex-node-1"].wait()
    for name in ("imex-node-0", "imex-node-2"):
        state = domain.wait(name, lambda s: s["domain_status"] == "DEGRADED")
        assert state["peers"]["1"]["status"] == "RECOVERING"  # grace time -1: never cleaned up
    degraded = json.loads(domain.ctl("-i", ip(1), str(domain.cmd_port), "-N", "-j").stdout)
    assert degraded["status"] == "DEGRADED"
    assert degraded["nodes"]["1"]["status"] == "UNAVAILABLE"
    assert degraded["nodes"]["0"]["connections"]["1"]["status"] == "RECOVERING"
    assert "Connection to node 1 with ip address 127.0.1.2 lost" in domain.log("imex-node-0")


def test_unresolved_peer_degrades_until_hosts_entry_and_sigusr1(domain: Domain):
    names = [*NAMES, "imex-node-3"]
    domain.write_nodes(names)
    domain.write_hosts({name: ip(n + 1) for n, name in enumerate(NAMES)})
    start_nodes(domain, 3, FAKE_IMEX_RELOAD_INTERVAL=0)
    for name in NAMES:
        state = domain.wait_ready(name, "DEGRADED")
        assert state["peers"]["3"]["status"] == "INVALID" and state["peers"]["3"]["address"] is None
    assert domain.ctl("-c", str(domain.root / "imex-node-0.cfg"), "-q").stdout == "READY\n"

    domain.write_hosts({name: ip(n + 1) for n, name in enumerate(names)})
    domain.start("imex-node-3", domain.config("imex-node-3", ip(4)), FAKE_IMEX_RELOAD_INTERVAL=0)
    # It read the full hosts file at start and is connected to every peer: node 0 answered
    # its hello. Node 0 answers the query below only after that, and does not re-resolve
    # on its own (neither on node 3's call nor otherwise).
    domain.wait_ready("imex-node-3", "UP")
    status = json.loads(domain.ctl("-i", ip(1), str(domain.cmd_port), "-N", "-j").stdout)
    assert status["status"] == "DEGRADED"
    assert domain.state("imex-node-0")["domain_status"] == "DEGRADED"

    for name in NAMES:
        domain.procs[name].send_signal(signal.SIGUSR1)
    for name in NAMES:
        state = domain.wait(name, lambda s: s["domain_status"] == "UP")
        assert state["reload_count"] == 1
        assert state["peers"]["3"]["address"] == ip(4)
    assert (
        json.loads(domain.ctl("-i", ip(3), str(domain.cmd_port), "-N", "-j").stdout)["status"]
        == "UP"
    )

    # The node map is read only at start-up: SIGUSR1 reports a changed file, applies nothing.
    domain.write_nodes([*names, "imex-node-4"])
    domain.procs["imex-node-0"].send_signal(signal.SIGUSR1)
    state = domain.wait("imex-node-0", lambda s: s["reload_count"] == 2)
    assert state["nodes_config_stale"] is True and sorted(state["peers"]) == ["1", "2", "3"]


def test_start_delay_shows_a_starting_state_then_ready(domain: Domain):
    domain.write_nodes([ip(1)])
    cfg = domain.config("solo", ip(1))
    domain.start("solo", cfg, FAKE_IMEX_START_DELAY=1.0)
    domain.wait("solo", lambda s: s["state"] == "INIT_GPU")
    early = domain.ctl("-c", str(cfg), "-q")
    assert (early.returncode, early.stdout) == (0, "INIT_GPU\n")
    assert json.loads(domain.ctl("-c", str(cfg), "-N", "-j").stdout)["status"] == "DOWN"
    domain.wait_ready("solo", "UP")
    assert domain.ctl("-c", str(cfg), "-q").stdout == "READY\n"


def test_never_ready_holds_the_chosen_state(domain: Domain):
    domain.write_nodes([ip(1)])
    cfg = domain.config("stuck", ip(1))
    domain.start("stuck", cfg, FAKE_IMEX_NEVER_READY=1, FAKE_IMEX_HOLD_STATE="WAITING_FOR_RECOVERY")
    domain.wait("stuck", lambda s: s["state"] == "WAITING_FOR_RECOVERY")
    # Where it would go on to READY it says it stays instead.
    eventually(lambda: "FAKE_IMEX_NEVER_READY=1: staying in" in domain.log("stuck"),
               "the daemon deciding to stay")
    query = domain.ctl("-c", str(cfg), "-q")
    assert (query.returncode, query.stdout) == (0, "WAITING_FOR_RECOVERY\n")


def test_full_quorum_waits_for_every_peer(domain: Domain):
    domain.write_nodes([ip(1), ip(2)])
    cfg = domain.config("a", ip(1), IMEX_WAIT_FOR_QUORUM="FULL")
    domain.start("a", cfg)
    domain.wait("a", lambda s: s["state"] == "WAITING_FOR_PEERS")
    assert domain.ctl("-c", str(cfg), "-q").stdout == "WAITING_FOR_PEERS\n"
    domain.start("b", domain.config("b", ip(2), IMEX_WAIT_FOR_QUORUM="FULL"))
    domain.wait_ready("a", "UP")
    domain.wait_ready("b", "UP")
    # a left WAITING_FOR_PEERS only once it was connected to b.
    log = domain.log("a")
    left = log.index("WAITING_FOR_PEERS -> ")
    assert "Connection established to node 1 " in log[:left], log


def test_crash_after_exits_1_and_exit_code_knob(domain: Domain):
    domain.write_nodes([ip(1)])
    cfg = domain.config("crashy", ip(1))
    proc = domain.start("crashy", cfg, FAKE_IMEX_CRASH_AFTER=0.3)
    domain.wait_ready("crashy")
    assert proc.wait(5) == 1
    assert "Simulated crash after 0.3s" in domain.log("crashy")
    assert domain.ctl("-c", str(cfg), "-q").returncode == 1  # nobody answers any more

    proc = domain.start("failing", cfg, FAKE_IMEX_EXIT_CODE=3)
    assert proc.wait(5) == 3


def test_sigterm_exits_0_promptly_and_frees_ports(domain: Domain):
    domain.write_nodes([ip(1), ip(2)])
    a = domain.start("a", domain.config("a", ip(1)))
    domain.start("b", domain.config("b", ip(2), IMEX_NODE_DISCONNECTED_GRACE_TIME=0))
    domain.wait_ready("a", "UP")
    domain.wait_ready("b", "UP")
    started = time.monotonic()
    a.send_signal(signal.SIGTERM)
    assert a.wait(3) == 0
    assert time.monotonic() - started < 1.5
    assert domain.state("a")["state"] == "SHUTTING_DOWN"
    assert "Received signal SIGTERM" in domain.log("a")
    # b heard the goodbye; a's ports can be bound again at once (by a restarted daemon).
    state = domain.wait("b", lambda s: s["domain_status"] == "DEGRADED")
    assert state["peers"]["0"]["status"] == "DISCONNECTED"  # grace time 0: cleaned up at once
    assert "Node 0 is shutting down" in domain.log("b")
    restarted = domain.start("a2", domain.config("a", ip(1)))
    domain.wait_ready("a2", "UP")
    domain.wait("b", lambda s: s["domain_status"] == "UP")
    restarted.send_signal(signal.SIGTERM)
    assert restarted.wait(3) == 0


def test_unix_socket_command_service(domain: Domain):
    sock = domain.root / "imex.sock"
    domain.write_nodes([ip(5)])
    cfg = domain.config("host", "", IMEX_CMD_PORT="", IMEX_CMD_UNIX_DOMAIN_PATH=sock)
    proc = domain.start("host", cfg)
    domain.wait_ready("host", "UP")
    query = domain.ctl("-q", f"--u={sock}")
    assert (query.returncode, query.stdout) == (0, "READY\n")
    assert domain.ctl("-u", str(sock), "-q").stdout == "READY\n"
    assert json.loads(domain.ctl("-c", str(cfg), "-N", "-j").stdout)["status"] == "UP"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(3) == 0
    assert not sock.exists()


def test_same_address_distinct_ports(domain: Domain):
    """A fake-only extension: `host:port` entries let several daemons share one address."""
    ports = [free_port(), free_port()]
    domain.write_nodes([f"{ip(9)}:{p}" for p in ports])
    for n, port in enumerate(ports):
        domain.start(
            f"d{n}", domain.config(f"d{n}", ip(9), SERVER_PORT=port, IMEX_CMD_PORT=free_port())
        )
    assert domain.wait_ready("d0", "UP")["node_id"] == 0
    assert domain.wait_ready("d1", "UP")["node_id"] == 1


def test_node_map_mismatch_is_not_connected(domain: Domain):
    (domain.root / "other.cfg").write_text(f"{ip(2)}\n{ip(1)}\n")
    domain.write_nodes([ip(1), ip(2)])
    domain.start("a", domain.config("a", ip(1)))
    domain.start("b", domain.config("b", ip(2), IMEX_NODE_CONFIG_FILE=domain.root / "other.cfg"))
    state = domain.wait("a", lambda s: s["peers"]["1"]["status"] == "NODE_MAP_MISMATCH")
    assert state["domain_status"] == "DEGRADED"
    text = domain.ctl("-c", str(domain.root / "a.cfg"), "-N").stdout
    assert "!M!" in text


def test_startup_failures_exit_1_with_a_message(domain: Domain):
    bad = domain.root / "bad.cfg"
    bad.write_text("# comment\nLOG_LEVEL=4\nthis is not a setting\n")
    proc = domain.start("bad", bad)
    assert proc.wait(5) == 1
    assert f"{bad}:3: expected KEY=VALUE" in domain.log("bad")

    unset = domain.config("unset", ip(1), IMEX_NODE_CONFIG_FILE="")
    assert domain.start("unset", unset).wait(5) == 1
    assert "IMEX_NODE_CONFIG_FILE is not set" in domain.log("unset")

    domain.write_nodes(["10.255.0.1"])  # not an address of this host
    stranger = domain.start("stranger", domain.config("stranger"))
    assert stranger.wait(5) == 1
    assert "No matching network interface found" in domain.log("stranger")


def test_sigusr1_is_acted_on_at_most_once_per_interval(domain: Domain):
    domain.write_nodes([ip(1)])
    proc = domain.start("a", domain.config("a", ip(1)), FAKE_IMEX_RELOAD_INTERVAL=0.6)
    domain.wait_ready("a")
    for _ in range(3):
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.05)
    domain.wait("a", lambda s: s["reload_count"] == 1)
    # The others wait for the interval, coalesced: the second is deferred, the third is
    # folded into it (both signals were sent before the first reload was seen).
    eventually(lambda: "SIGUSR1 received: reload deferred" in domain.log("a"), "the deferral")
    assert domain.state("a")["reload_count"] == 1
    domain.wait("a", lambda s: s["reload_count"] == 2)
    # One more within the next interval: deferred to its end, so the third reload ends the
    # window in which a stray reload of the burst would have come.
    proc.send_signal(signal.SIGUSR1)
    domain.wait("a", lambda s: s["reload_count"] >= 3)
    log = domain.log("a")
    assert log.count("reload deferred") == 2 and log.count("re-resolving peer names") == 3, log
    assert domain.state("a")["reload_count"] == 3


def test_daemonize_forks_and_the_launcher_returns_0(domain: Domain):
    domain.write_nodes([ip(1)])
    cfg = domain.config("bg", ip(1), DAEMONIZE=1)
    launcher = domain.start("bg", cfg)
    assert launcher.wait(5) == 0
    del domain.procs["bg"]  # the daemon lives on in a forked child
    try:
        state = domain.wait("bg", lambda s: s["state"] == "READY")
        assert state["pid"] != launcher.pid
        assert domain.ctl("-c", str(cfg), "-q").stdout == "READY\n"
    finally:
        child = (domain.state("bg") or {}).get("pid")
        if child and child != launcher.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)
    domain.wait("bg", lambda s: s["state"] == "SHUTTING_DOWN")


def test_sigusr1_during_start_up_does_not_kill_it(domain: Domain):
    """The supervisor sends SIGUSR1 whenever peers change, possibly right after it started
    the daemon: before the fake reads its files a reload is moot, never fatal (a real
    nvidia-imex has its handler microseconds after exec, Python needs ~0.2 s)."""
    domain.write_nodes([ip(1)])
    proc = domain.start("early", domain.config("early", ip(1)))
    # From the launcher's `trap` on (bash's first ms, like a real binary's first µs).
    usr1 = 1 << (signal.SIGUSR1 - 1)

    def ignored() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"exited with {proc.returncode} before ignoring SIGUSR1")
        return bool(int(_proc_status(proc.pid, "SigIgn") or "0", 16) & usr1)

    eventually(ignored, "SIGUSR1 ignored", timeout=5, interval=0.001)
    for _ in range(100):
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.005)
    domain.wait_ready("early")
    assert proc.poll() is None


def _proc_status(pid: int, field: str) -> str | None:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    return next((ln.split()[1] for ln in lines if ln.startswith(f"{field}:")), None)
