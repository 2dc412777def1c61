"""The append path's bookkeeping (RowCounts in headwater/sql/maintain/changelog.py):
how many rows of each group were evaluated, looked up and recorded for all fired
groups at once. A wrong count makes old rows count as new (a doubled row) or new
rows as old (a lost one), so each operation is checked against a plain dictionary,
also with every group under one hash, and a snapshot (a Spark
micro-batch's restore) must keep the counts."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from headwater.sql.maintain import changelog, group_parts
from headwater.sql.maintain.changelog import Materializer, RowCounts
from headwater.sql.maintain.groups import GroupMaintainer, StreamLayout


def _frame(entries: list[tuple[str, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "__gk": pd.Series([k for k, _, _ in entries], dtype=object),
            "__gs": np.array([s for _, s, _ in entries], dtype=np.int64),
            "__ge": np.array([e for _, _, e in entries], dtype=np.int64),
        }
    )


@pytest.mark.parametrize("seed", range(5))
def test_counts_follow_a_dictionary_of_every_step(seed):
    rng = random.Random(seed)
    universe = [(f"k{rng.randrange(30)}", 0, rng.choice([10, 20, 30])) for _ in range(60)]
    universe = list(dict.fromkeys(universe))
    counts, expected = RowCounts(), {}
    for step in range(40):
        fired = rng.sample(universe, rng.randrange(0, 8))
        gone = [g for g in rng.sample(universe, rng.randrange(0, 3)) if g not in fired]
        looked = counts.lookup(_frame(fired))
        assert looked.tolist() == [expected.get(g, 0) for g in fired]
        lengths = np.array([expected.get(g, 0) + rng.randrange(3) for g in fired], np.int64)
        counts.record(_frame(fired), lengths, _frame(gone))
        for g in gone:
            expected.pop(g, None)
        expected.update(zip(fired, lengths.tolist(), strict=True))
        if step % 10 == 9:
            horizon = rng.choice([10, 20])
            counts.expire(horizon)
            expected = {g: n for g, n in expected.items() if g[2] > horizon}
        kept = counts.groups.itertuples(index=False)
        assert {(k, s, e): n for k, s, e, n in kept} == expected


def test_a_group_both_withdrawn_and_fired_again_keeps_its_new_count():
    counts = RowCounts()
    a = _frame([("a", 0, 10)])
    counts.record(a, np.array([2]), a.iloc[:0])
    counts.record(a, np.array([5]), a)
    assert counts.lookup(a).tolist() == [5]


def _one_hash(monkeypatch) -> None:
    """Every group under one hash, wherever the changelog's state hashes one."""
    same = lambda frame: np.zeros(len(frame), np.uint64)  # noqa: E731
    monkeypatch.setattr(changelog, "group_hashes", same)
    monkeypatch.setattr(group_parts, "group_hashes", same)


def test_groups_under_one_hash_keep_their_own_counts(monkeypatch):
    """Two groups under one hash: the second's lookup must not read the first's
    count (old rows counted as new would double them), and both are recorded."""
    _one_hash(monkeypatch)
    state = Materializer(["x"])
    state.seen = RowCounts()
    state.saw(_frame([("a", 0, 10)]), np.array([3]))
    assert state.seen_rows(_frame([("a", 0, 10)])).tolist() == [3]
    assert state.seen_rows(_frame([("b", 0, 10)])).tolist() == [0]
    state.saw(_frame([("b", 0, 10)]), np.array([1]))
    both = _frame([("b", 0, 10), ("a", 0, 10), ("a", 0, 20)])
    assert state.seen_rows(both).tolist() == [1, 3, 0]


@pytest.mark.parametrize("seed", range(3))
def test_counts_under_one_hash_follow_a_dictionary(seed, monkeypatch):
    _one_hash(monkeypatch)
    test_counts_follow_a_dictionary_of_every_step(seed)


def _maintainer() -> GroupMaintainer:
    layouts = (
        StreamLayout("b", ("x",), ("__c0",), (pa.int64(),), frozenset()),
        StreamLayout("a", ("y",), ("__c1",), (pa.int64(),), frozenset()),
    )
    return GroupMaintainer("SELECT b.x, a.y FROM b JOIN a ON b.x = a.y", layouts, {}, "q")


def test_a_snapshot_keeps_the_counts_and_an_old_one_restores_without():
    maintainer = _maintainer()
    assert maintainer.append is None
    state = maintainer.restore(None)
    state.saw(_frame([("a", 0, 10), ("b", 0, 20)]), np.array([2, 4]))
    restored = maintainer.restore(maintainer.snapshot(state))
    assert restored.seen_rows(_frame([("b", 0, 20), ("c", 0, 20)])).tolist() == [4, 0]
    old = pickle.dumps((1, state.last, state.versions))
    assert maintainer.restore(old).seen is None
