"""The changelog's order without sorting text where numbers decide: ``in_order``
sorts the integral keys (ptime, undo, window) as numbers and only the rows tied
on them by the key text and version; ``value_ordered`` hashes the text of only
the rows the numbers tie, and orders each tie class's rows (reading a column only
for the rows the columns before it leave tied); a first ``appended`` of groups that each change once
numbers them without hashing. Each is checked against the plain pandas form on
random changelogs with ties, NULL keys, duplicate index labels and columns
that are not integral (the fallback)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headwater.sql.maintain.changelog import (
    GROUP_COLUMNS,
    Materializer,
    in_order,
    value_ordered,
)

KEYS = ["ptime", "undo", "__gs", "__ge", "__gk", "ver"]


def _changes(seed: int, n: int, spread: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    keys = np.array(["a", "b", "c", None, "k10", "k2"], dtype=object)
    start = rng.integers(0, spread, n)
    return pd.DataFrame(
        {
            "__gk": keys[rng.integers(0, len(keys), n)],
            "__gs": start,
            "__ge": start + rng.integers(1, 3, n),
            "x": rng.integers(0, 3, n),
            "y": np.where(rng.random(n) < 0.2, np.nan, rng.integers(0, 3, n).astype(float)),
            "undo": rng.random(n) < 0.3,
            "ptime": rng.integers(0, 4, n) * 1000,
            "ver": rng.integers(0, 3, n),
        },
        index=rng.integers(0, n // 2 + 1, n),  # duplicate labels: positions decide
    )


def _reference_order(changes: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in KEYS if c in changes]
    ascending = [c != "undo" for c in keys]
    return changes.sort_values(keys, ascending=ascending, kind="stable").reset_index(drop=True)


def _reference_values(frame: pd.DataFrame, keys: list[str], ties: list[str]) -> pd.DataFrame:
    frame = frame.reset_index(drop=True)
    tied = np.flatnonzero(frame.duplicated(ties, keep=False).to_numpy())
    order = frame.iloc[tied].sort_values(keys, na_position="last", kind="stable").index
    places = np.arange(len(frame))
    places[tied] = order.to_numpy()
    return frame.iloc[places].reset_index(drop=True)


def _assert_same_within_ties(out: pd.DataFrame, frame: pd.DataFrame, keys, ties) -> None:
    """``out`` orders the rows of each tie class (rows equal on ``ties``) as the
    reference does, and leaves the other rows in place: only the order within a
    group shows in a changelog, so how the classes interleave is free."""
    want = _reference_values(frame, keys, ties)
    alone = ~want.duplicated(ties, keep=False).to_numpy()
    pd.testing.assert_frame_equal(out[alone], want[alone])
    by_class = {"by": ties, "na_position": "last", "kind": "stable"}
    pd.testing.assert_frame_equal(
        out.sort_values(**by_class).reset_index(drop=True),
        want.sort_values(**by_class).reset_index(drop=True),
    )


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("spread", [2, 50, 100_000])
def test_in_order_is_the_stable_sort(seed, spread):
    changes = _changes(seed, 400, spread)
    pd.testing.assert_frame_equal(in_order(changes), _reference_order(changes))
    without_version = changes.drop(columns=["ver"])
    pd.testing.assert_frame_equal(in_order(without_version), _reference_order(without_version))


def test_in_order_falls_back_where_a_key_is_not_integral():
    changes = _changes(1, 300, 20)
    changes["__gs"] = changes["__gs"].astype(float)
    changes.loc[changes.index[:3], "__gs"] = np.nan
    pd.testing.assert_frame_equal(in_order(changes), _reference_order(changes))
    one = changes.iloc[:1]
    pd.testing.assert_frame_equal(in_order(one), _reference_order(one))


def test_in_order_of_sorted_rows_keeps_them():
    changes = _reference_order(_changes(3, 500, 100_000))
    out = in_order(changes)
    pd.testing.assert_frame_equal(out, changes)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("spread", [2, 50, 100_000])
def test_value_ordered_sorts_the_tied_rows_only(seed, spread):
    frame = _changes(seed, 400, spread)
    keys = [*GROUP_COLUMNS, "x", "y"]
    ties = ["ptime", *GROUP_COLUMNS]
    _assert_same_within_ties(value_ordered(frame, keys, ties), frame, keys, ties)
    texts = ["__gk"]  # no integral tie column: every row hashed
    _assert_same_within_ties(value_ordered(frame, keys, texts), frame, keys, texts)


@pytest.mark.parametrize("seed", range(6))
def test_value_ordered_sorts_every_kind_of_column_as_pandas(seed):
    """Text with NULLs, floats with NaN and -0.0, times with NaT, booleans and
    nullable integers sort by codes as ``sort_values`` sorts them (NULLs last)."""
    rng = np.random.default_rng(seed)
    n = 300
    frame = _changes(seed, n, 3)
    frame["s"] = np.array(["x", "y", None, "ab"], dtype=object)[rng.integers(0, 4, n)]
    frame["f"] = np.array([0.0, -0.0, 1.5, np.nan, -2.0])[rng.integers(0, 5, n)]
    frame["t"] = pd.to_datetime(np.array([0, 1000, None], dtype=object)[rng.integers(0, 3, n)])
    frame["b"] = rng.random(n) < 0.5
    frame["o"] = pd.array(np.array([1, 2, None], dtype=object)[rng.integers(0, 3, n)], "Int64")
    for columns in (["s"], ["f", "s"], ["t", "b"], ["o", "f", "t"], ["b", "o", "s", "f"]):
        keys = [*GROUP_COLUMNS, *columns]
        out = value_ordered(frame, keys, ["__gk"])
        _assert_same_within_ties(out, frame, keys, ["__gk"])


def test_value_ordered_leaves_numbers_mixed_with_text_to_the_merge():
    frame = pd.DataFrame({"__gk": ["a"] * 3, "__gs": [0] * 3, "__ge": [1] * 3, "m": [1, "x", 2]})
    assert value_ordered(frame, [*GROUP_COLUMNS, "m"], list(GROUP_COLUMNS)) is None


@pytest.mark.parametrize("spread", [3, 1_000_000])
def test_a_first_append_numbers_each_group_from_its_count(spread):
    """``ver`` continues per group: 0, 1, ... in changelog order; the counts kept are
    each group's changes. With every group new and changed once, no hashing."""
    rng = np.random.default_rng(spread)
    n = 2000
    start = rng.choice(spread, n, replace=spread < n)
    added = pd.DataFrame(
        {
            "__gk": np.array(["k", "j"], dtype=object)[rng.integers(0, 2 if spread < n else 1, n)],
            "__gs": start,
            "__ge": start + 1,
            "x": rng.integers(0, 5, n),
            "ptime": rng.integers(0, 3, n),
        }
    )
    state = Materializer(["x"])
    out = state.appended(added)
    expected = in_order(added.assign(undo=False))
    expected = value_ordered(expected, [*GROUP_COLUMNS, "x"], ["ptime", *GROUP_COLUMNS])
    expected = in_order(expected)
    expected["ver"] = expected.groupby(list(GROUP_COLUMNS), sort=False).cumcount()
    pd.testing.assert_frame_equal(out, expected[out.columns.tolist()], check_dtype=False)
    counts = expected.groupby(list(GROUP_COLUMNS)).size().rename("ver").reset_index()
    kept = state.versions.sort_values(list(GROUP_COLUMNS)).reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, counts, check_dtype=False)
    again = state.appended(added.assign(ptime=added["ptime"] + 10))
    assert (again["ver"].to_numpy() >= 1).all()  # numbered after the first changes


@pytest.mark.parametrize("keys, versions", [(300, 3), (70_000, 3), (50, 10**12)])
def test_in_order_of_wide_ties_is_the_stable_sort(keys, versions):
    """Rows tied on the numbers, with key texts and versions of every width (8-bit,
    16-bit and int64 sort codes), in the order of the plain sort."""
    rng = np.random.default_rng(keys)
    n = 5000
    names = np.array([f"k{i}" for i in range(keys)] + [None], dtype=object)
    changes = pd.DataFrame(
        {
            "__gk": names[rng.integers(0, len(names), n)],
            "__gs": rng.integers(0, 3, n) * 1000,
            "__ge": rng.integers(0, 3, n) * 1000 + 1000,
            "undo": rng.random(n) < 0.5,
            "ptime": np.full(n, 7, np.int64),
            "ver": rng.integers(0, versions, n),
        }
    )
    pd.testing.assert_frame_equal(in_order(changes), _reference_order(changes))
