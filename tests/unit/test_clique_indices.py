"""How every reader of a ComputeDomainClique settles the indices its daemons wrote
(api/clique.py `settled_indices`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from api.clique import settled_indices

raw_index = st.one_of(st.integers(min_value=-2, max_value=20), st.none(), st.text(max_size=2))


def test_the_earlier_entry_keeps_an_index_written_twice_the_later_holds_the_next_free():
    assert settled_indices([0, 0, 1]) == [0, 1, 2]
    assert settled_indices([0, 1, 0, 0]) == [0, 1, 2, 3]


def test_a_missing_index_is_zero_and_a_bad_one_the_smallest_free():
    assert settled_indices([None, 1]) == [0, 1]
    assert settled_indices([1, "x", -1, True]) == [1, 0, 2, 3]


@given(st.lists(raw_index, max_size=30))
def test_indices_are_unique_and_an_uncontested_one_is_kept(indices):
    settled = settled_indices(indices)
    assert len(set(settled)) == len(settled) == len(indices)
    for i, (raw, held) in enumerate(zip(indices, settled, strict=True)):
        if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 \
                and raw not in settled[:i]:
            assert held == raw


@given(st.lists(raw_index, max_size=30), st.lists(raw_index, max_size=10))
def test_later_appends_never_move_an_earlier_entry(indices, appended):
    # What lets a daemon know its index from the answer to its own append.
    assert settled_indices(indices + appended)[: len(indices)] == settled_indices(indices)
