"""When the controller writes a ComputeDomain's status: at once for what users wait on, in
batches for the per-node entries.

While daemons join, every clique write changes one entry of `status.nodes`; written each
time, that is about two rewrites per join of an object every agent and `kubectl get -w`
receives, and whose size grows with the domain. A time limit alone (one write per interval)
makes the number of writes follow the length of the bring-up, so the writes per join would
follow how loaded the machine is (tests/bench/bench_bringup.py measures both). The pacer
therefore writes the entries (at most once per interval) once an eighth of them changed,
or once no new change came for QUIET_INTERVALS intervals (the end of a bring-up, a lone
change), or once the oldest held change waited HOLD_INTERVALS: a bring-up of a domain of
any size at any speed costs a few dozen writes. Ready/NotReady and conditions are not
paced (reconcile.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Entries are written once 1/BATCH_PARTS of them changed, once no new change came for
# QUIET_INTERVALS intervals, or once the oldest held change waited HOLD_INTERVALS.
BATCH_PARTS = 8
QUIET_INTERVALS = 2
HOLD_INTERVALS = 30


@dataclass
class _Held:
    since: float  # when the oldest unwritten change was seen
    changed: int  # how many entries differed at the last look
    last_change: float  # when that count last grew


@dataclass
class StatusPacer:
    interval: float  # seconds; 0 writes every change at once
    _written: dict[str, float] = field(default_factory=dict)  # uid -> time of last write
    _held: dict[str, _Held] = field(default_factory=dict)

    def hold_for(self, uid: str, now: float, changed: int, total: int) -> float | None:
        """None: write the change of `changed` of the domain's `total` entries now; else
        the seconds after which to look again (the change is held until then)."""
        last = self._written.get(uid)
        if last is None or self.interval <= 0:
            return None
        held = self._held.setdefault(uid, _Held(now, changed, now))
        if changed != held.changed:
            held.changed, held.last_change = changed, now
        spaced = last + self.interval
        quiet = held.last_change + QUIET_INTERVALS * self.interval
        due = held.since + HOLD_INTERVALS * self.interval
        enough = changed >= -(-total // BATCH_PARTS)
        if now >= due or (now >= spaced and (enough or now >= quiet)):
            return None
        return max(min(due, max(spaced, quiet if not enough else spaced)) - now, 0.0)

    def wrote(self, uid: str, now: float) -> None:
        self._written[uid] = now
        self._held.pop(uid, None)

    def nothing_held(self, uid: str) -> None:
        """The status says what the caches say again: no change is waiting."""
        self._held.pop(uid, None)

    def forget(self, uid: str) -> None:
        self._written.pop(uid, None)
        self._held.pop(uid, None)
