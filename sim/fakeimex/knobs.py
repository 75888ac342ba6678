"""Environment knobs that script the fake daemon's behaviour for a test or a sim scenario.

The driver passes its own environment on to `nvidia-imex`, so env vars are how a test reaches
a daemon the driver starts; the config file stays exactly what the driver rendered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sim.fakeimex.nodes import DEFAULT_HOSTS_FILE
from sim.fakeimex.states import DaemonState

DEFAULT_VERSION: Final = "570.172.08"
NOGPU_VERSION: Final = "NO_GPU"
# States a start can stall in; READY and SHUTTING_DOWN are reached by other means.
HOLDABLE: Final = tuple(
    s for s in DaemonState if s not in (DaemonState.READY, DaemonState.SHUTTING_DOWN)
)


@dataclass(frozen=True)
class Knobs:
    """Parsed `FAKE_IMEX_*` variables (see `from_env` for names and defaults)."""

    hosts_file: Path = DEFAULT_HOSTS_FILE
    start_delay: float = 0.0
    hold_state: DaemonState = DaemonState.INIT_GPU
    never_ready: bool = False
    crash_after: float | None = None
    exit_code: int = 1
    state_file: Path | None = None
    heartbeat: float = 0.5
    reload_interval: float = 5.0
    version: str | None = None
    placeholders: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Knobs:
        """Read the knobs; a malformed value raises ValueError naming the variable.

        FAKE_IMEX_HOSTS_FILE      hosts file to resolve names with (default /etc/hosts)
        FAKE_IMEX_START_DELAY     seconds spent in the hold state before READY (0)
        FAKE_IMEX_HOLD_STATE      state shown while starting or stalled (INIT_GPU)
        FAKE_IMEX_NEVER_READY=1   stay in the hold state forever
        FAKE_IMEX_CRASH_AFTER     seconds after start to die uncleanly
        FAKE_IMEX_EXIT_CODE       exit status of that crash (1); alone it means crash at once
        FAKE_IMEX_STATE_FILE      JSON file the daemon keeps current for observers
        FAKE_IMEX_HEARTBEAT       peer heartbeat and reconnect interval, seconds (0.5)
        FAKE_IMEX_RELOAD_INTERVAL SIGUSR1 is acted on at most this often, seconds (5, as IMEX)
        FAKE_IMEX_VERSION         version reported to peers and -N (570.172.08; --nogpu: NO_GPU)
        FAKE_IMEX_PLACEHOLDERS    extra comma-separated addresses/CIDRs meaning "empty slot"
        """

        def number(name: str, default: float | None, low: float = 0.0) -> float | None:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not a number") from None
            if value < low:
                raise ValueError(f"{name}={raw!r} must be >= {low}")
            return value

        hold_raw = env.get("FAKE_IMEX_HOLD_STATE", "").strip() or DaemonState.INIT_GPU
        if hold_raw not in HOLDABLE:
            raise ValueError(
                f"FAKE_IMEX_HOLD_STATE={hold_raw!r} is not one of {', '.join(HOLDABLE)}"
            )
        code_raw = env.get("FAKE_IMEX_EXIT_CODE", "").strip()
        if code_raw and not (code_raw.isdigit() and 0 <= int(code_raw) <= 255):
            raise ValueError(f"FAKE_IMEX_EXIT_CODE={code_raw!r} is not an exit status (0-255)")
        crash_after = number("FAKE_IMEX_CRASH_AFTER", 0.0 if code_raw else None)
        state_file = env.get("FAKE_IMEX_STATE_FILE", "").strip()
        placeholders = tuple(
            p.strip() for p in env.get("FAKE_IMEX_PLACEHOLDERS", "").split(",") if p.strip()
        )
        return cls(
            hosts_file=Path(env.get("FAKE_IMEX_HOSTS_FILE", "").strip() or DEFAULT_HOSTS_FILE),
            start_delay=number("FAKE_IMEX_START_DELAY", 0.0) or 0.0,
            hold_state=DaemonState(hold_raw),
            never_ready=env.get("FAKE_IMEX_NEVER_READY", "").strip() == "1",
            crash_after=crash_after,
            exit_code=int(code_raw) if code_raw else 1,
            state_file=Path(state_file) if state_file else None,
            heartbeat=number("FAKE_IMEX_HEARTBEAT", 0.5, 0.01) or 0.5,
            reload_interval=number("FAKE_IMEX_RELOAD_INTERVAL", 5.0) or 0.0,
            version=env.get("FAKE_IMEX_VERSION", "").strip() or None,
            placeholders=placeholders,
        )
