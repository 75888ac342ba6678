"""The pace of a ComputeDomain's status writes (controller/statuspacer.py), on a virtual
clock: what a bring-up costs must not depend on how fast it goes."""

from __future__ import annotations

import pytest

from controller.statuspacer import HOLD_INTERVALS, QUIET_INTERVALS, StatusPacer


def bring_up(nodes: int, seconds_per_change: float, interval: float = 1.0, *,
             num_nodes: bool = False) -> int:
    """Status writes while `nodes` daemons each join and turn Ready (two entry changes
    each), one change every `seconds_per_change`, as the controller's reconciles see them:
    one look per change, and one at each requeue it was asked for. The domain's size is
    the entries so far, or with `num_nodes` its spec's numNodes (reconcile.py)."""
    pacer, uid = StatusPacer(interval), "cd"
    pacer.wrote(uid, 0.0)  # the first status (NotReady, no nodes)
    changes = [(i + 1) * seconds_per_change for i in range(2 * nodes)]
    written_upto, writes, looks = 0, 0, list(changes)
    total = 0
    while looks:
        now = looks.pop(0)
        seen = sum(1 for t in changes if t <= now)
        total = nodes if num_nodes else min(nodes, seen)  # one entry per joined daemon
        changed = seen - written_upto
        if changed == 0:
            continue
        wait = pacer.hold_for(uid, now, changed, total)
        if wait is None:
            pacer.wrote(uid, now)
            writes, written_upto = writes + 1, seen
        else:
            looks = sorted([*looks, now + wait])
    return writes


# Paces of the bring-ups tests/bench/bench_bringup.py measures (an entry change every so
# many seconds on an idle machine); a loaded machine takes twice as long.
@pytest.mark.parametrize(("nodes", "pace"), [(36, 0.4), (144, 0.4), (1000, 0.3)])
@pytest.mark.parametrize("num_nodes", [False, True])
def test_a_bring_up_twice_as_slow_costs_about_the_same_writes_per_join(nodes, pace,
                                                                        num_nodes):
    idle = bring_up(nodes, pace, num_nodes=num_nodes)
    loaded = bring_up(nodes, 2 * pace, num_nodes=num_nodes)
    assert loaded / nodes <= 0.75
    assert abs(loaded - idle) / nodes <= 0.2
    # One write per interval would have cost one per second of the bring-up.
    assert loaded <= (2 * nodes * 2 * pace) / 2


def test_a_lone_change_waits_until_no_other_came_for_the_quiet_time():
    pacer = StatusPacer(1.0)
    pacer.wrote("cd", 0.0)
    assert pacer.hold_for("cd", 10.0, 1, 1000) == pytest.approx(QUIET_INTERVALS)
    assert pacer.hold_for("cd", 11.0, 2, 1000) == pytest.approx(QUIET_INTERVALS)
    assert pacer.hold_for("cd", 11.0 + QUIET_INTERVALS, 2, 1000) is None


def test_a_trickle_of_changes_is_written_after_the_hold_at_the_latest():
    pacer = StatusPacer(1.0)
    pacer.wrote("cd", 0.0)
    now, changed = 1.0, 0
    while (wait := pacer.hold_for("cd", now, changed := changed + 1, 1000)) is not None:
        assert wait > 0
        now += 1.0  # a new change every interval: never quiet, never an eighth
    assert now == pytest.approx(1.0 + HOLD_INTERVALS)


def test_the_first_status_and_interval_zero_are_written_at_once():
    assert StatusPacer(1.0).hold_for("cd", 0.0, 1, 100) is None
    zero = StatusPacer(0.0)
    zero.wrote("cd", 0.0)
    assert zero.hold_for("cd", 0.1, 1, 100) is None


def test_a_batch_waits_for_the_interval_since_the_last_write():
    pacer = StatusPacer(1.0)
    pacer.wrote("cd", 0.0)
    assert pacer.hold_for("cd", 0.25, 2, 16) == pytest.approx(0.75)
    assert pacer.hold_for("cd", 1.0, 2, 16) is None
