"""GroupRows (headwater/sql/maintain/aggregate_state.py), the fast path's changelog
of groups with one result row each, must give the changelog of the general
path's Materializer (a multiset difference per group) on every step: random
firings of windowed and unwindowed groups, rows that change, stay, vanish
(HAVING) and come back, NULLs, and windows expired by the watermark."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from headwater.sql.maintain.aggregate_state import AT, GroupRows
from headwater.sql.maintain.changelog import GROUP_COLUMNS, Materializer

#: a window of 10 ms ending at 10, 20 or 30, and the unwindowed key's one group
ENDS = [(0, 10), (10, 20), (20, 30), (-(2**62), 2**62)]


def _step(rng: random.Random, keys: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    groups = {(f"k{rng.randrange(keys)}", *rng.choice(ENDS)) for _ in range(rng.randrange(1, 12))}
    fired = pd.DataFrame(sorted(groups), columns=list(GROUP_COLUMNS))
    fired = fired.astype({"__gk": object, "__gs": np.int64, "__ge": np.int64})
    shown = fired[[rng.random() < 0.85 for _ in range(len(fired))]]  # HAVING drops some
    values = [rng.choice([1, 2, 3, None]) for _ in range(len(shown))]
    texts = [rng.choice(["a", "b", None]) for _ in range(len(shown))]
    results = shown.assign(n=pd.array(values, dtype="Int64").astype("float64"), s=texts)
    return fired, results.reset_index(drop=True)


def _positioned(fired: pd.DataFrame, results: pd.DataFrame):
    """``fired`` and ``results`` with each group's position in ``fired`` (``__hw_at``),
    as the fast path hands them over."""
    fired = fired.assign(**{AT: np.arange(len(fired))})
    return fired, results.merge(fired, on=list(GROUP_COLUMNS))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("keys", [3, 40])
@pytest.mark.parametrize("positioned", [False, True])
def test_group_rows_give_the_materializers_changelog(seed, keys, positioned):
    rng = random.Random(seed)
    fast, general = GroupRows(["n", "s"]), Materializer(["n", "s"])
    for step in range(30):
        fired, results = _step(rng, keys)
        want = general.apply(fired, results, step)
        given = _positioned(fired, results) if positioned else (fired, results)
        have = fast.apply(*given, step)
        pd.testing.assert_frame_equal(
            have.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False
        )
        if step % 10 == 9:
            horizon = rng.choice([10, 20])
            fast.expire(horizon)
            general.expire(horizon)
