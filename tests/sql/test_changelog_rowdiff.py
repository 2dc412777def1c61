"""The changelog by row hashes (Materializer) against the merge of every kept row
it replaced: the same changelog rows, in the same order, step by step."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headwater.sql.maintain import changelog, group_parts
from headwater.sql.maintain.changelog import (
    CHANGE_COLUMNS,
    GROUP_COLUMNS,
    Materializer,
    in_order,
    member_of,
    row_difference,
)

_SEQ = "__seq"


def _numbered(frame, columns):
    out = frame.copy()
    out[_SEQ] = out.groupby(columns, dropna=False, sort=False).cumcount()
    return out


class _MergeMaterializer:
    """The previous Materializer: one outer merge per step, versions by member_of."""

    def __init__(self, columns):
        self.columns = list(columns)
        self.keys = [*GROUP_COLUMNS, *self.columns]
        self.last = None
        self.versions = pd.DataFrame(
            {"__gk": pd.Series(dtype=object), "__gs": pd.Series(dtype=np.int64)}
            | {"__ge": pd.Series(dtype=np.int64), "ver": pd.Series(dtype=np.int64)}
        )

    def apply(self, fired, results, ptime):
        group = list(GROUP_COLUMNS)
        fired = fired[group].drop_duplicates()
        new = results[self.keys]
        last = new.iloc[:0] if self.last is None else self.last
        is_fired = member_of(last[group], fired)
        both = _numbered(last[is_fired], self.keys).merge(
            _numbered(new, self.keys), how="outer", on=[*self.keys, _SEQ], indicator=True
        )
        undo = both[both["_merge"] == "left_only"].assign(undo=True)
        added = both[both["_merge"] == "right_only"].assign(undo=False)
        change = pd.concat([undo, added], ignore_index=True).drop(columns=["_merge", _SEQ])
        kept = last[~is_fired]
        self.last = pd.concat([kept, new], ignore_index=True) if len(kept) else new.copy()
        if not len(change):
            return None
        change["ptime"] = ptime
        change = in_order(change)
        known = member_of(self.versions[group], change[group])
        base = change[group].merge(self.versions[known], how="left", on=group)["ver"]
        offset = base.to_numpy(np.float64, na_value=0).astype(np.int64)
        change["ver"] = offset + change.groupby(group, sort=False, dropna=False).cumcount()
        counts = change.groupby(group, sort=False, dropna=False)["ver"].max().reset_index()
        counts["ver"] += 1
        rest = self.versions[~known]
        self.versions = pd.concat([rest, counts], ignore_index=True) if len(rest) else counts
        return change[[*GROUP_COLUMNS, *self.columns, *CHANGE_COLUMNS]]


def _timeline(seed: int, steps: int = 30):
    """Steps of (fired groups, their result rows): keys that fire again with rows
    kept, changed, duplicated, dropped or null, as a GROUP BY/ROW_NUMBER query's."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        keys = np.unique(rng.integers(0, 40, rng.integers(1, 15)))
        fired = pd.DataFrame({"__gk": keys.astype(str), "__gs": 0, "__ge": 10**12})
        fired["__gs"] = np.where(keys % 3 == 0, 1000, 0)
        rows = rng.integers(0, 4, len(keys))
        at = np.repeat(np.arange(len(keys)), rows)
        v = rng.integers(0, 3, len(at)).astype(float)
        v[rng.random(len(at)) < 0.1] = np.nan
        results = (
            fired.iloc[at]
            .reset_index(drop=True)
            .assign(
                v=v,
                s=rng.choice(["a", "b", None], len(at)).astype(object),
                n=rng.integers(0, 2, len(at)),
            )
        )
        if seed % 2 and step % 5 == 4:  # another type than the kept rows': the merge's path
            results["n"] = results["n"].astype(float)
        yield fired, results


def _hashing(monkeypatch, kind: str) -> None:
    """Make the changelog's hashes weaker: the integral columns not hashed (every
    group's rows then hashed whole where a side has several), every whole row
    one hash (the hashes cannot decide: the merge), or groups that share hashes
    (their versions numbered by merges, their rows told apart by value)."""
    group_hashes = changelog.group_hashes
    if kind in ("numbers ignored", "rows collide"):
        monkeypatch.setattr(changelog, "combine_hash", lambda h, numbers: h)
    if kind == "rows collide":
        monkeypatch.setattr(changelog, "mix64", lambda x: np.zeros_like(x))
    if kind == "groups collide":
        weak = lambda frame: group_hashes(frame) & np.uint64(3)  # noqa: E731
        monkeypatch.setattr(changelog, "group_hashes", weak)
        monkeypatch.setattr(group_parts, "group_hashes", weak)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["real", "numbers ignored", "rows collide", "groups collide"])
def test_changelog_by_hashes_equals_the_merge(seed, kind, monkeypatch):
    _hashing(monkeypatch, kind)
    columns = ["v", "s", "n"]
    fast, slow = Materializer(columns), _MergeMaterializer(columns)
    changed = 0
    for step, (fired, results) in enumerate(_timeline(seed)):
        got = fast.apply(fired, results, step)
        want = slow.apply(fired, results, step)
        if want is None:
            assert not len(got)
            continue
        changed += len(want)
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
        if step % 7 == 6:  # a restored state (no hashes yet) continues the same log
            fast.last, fast.versions = slow.last.copy(), slow.versions.copy()
    assert changed > 50
    pd.testing.assert_frame_equal(
        fast.last.reset_index(drop=True), slow.last.reset_index(drop=True)
    )
    group = list(GROUP_COLUMNS)
    pd.testing.assert_frame_equal(
        fast.versions.sort_values(group).reset_index(drop=True),
        slow.versions.sort_values(group).reset_index(drop=True),
    )


def test_row_difference_pairs_equal_rows_as_multisets():
    old = pd.DataFrame({"a": [1, 1, 2, 3], "b": ["x", "x", None, "y"]})
    new = pd.DataFrame({"a": [1.0, 2.0, 4.0], "b": ["x", None, "y"]})
    gone, added = row_difference(old, new, ["a", "b"])
    assert gone.tolist() == [False, True, False, True]
    assert added.tolist() == [False, False, True]


def test_row_difference_leaves_unhashable_values_to_the_merge():
    old = pd.DataFrame({"a": [[1], [2]]})
    assert row_difference(old, old.copy(), ["a"]) is None


def test_row_difference_compares_the_text_of_rows_the_numbers_pair():
    """A row whose integral columns no other row of its side shares pairs with the
    one row of the other side that has them only when their text is equal too;
    rows that share them are hashed whole."""
    old = pd.DataFrame({"n": [1, 2, 2, 3, 4], "s": ["x", "y", "z", None, "v"]})
    new = pd.DataFrame({"n": [1, 2, 2, 3, 5], "s": ["w", "z", "y", None, "v"]})
    gone, added = row_difference(old, new, ["n", "s"])
    assert gone.tolist() == [True, False, False, False, True]
    assert added.tolist() == [True, False, False, False, True]
