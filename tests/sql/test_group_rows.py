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

from headwater.sql.maintain.aggregate_state import GroupRows
from headwater.sql.maintain.changelog import GROUP_COLUMNS, Materializer

#: a window of 10 ms ending at 10, 20 or 30, and the unwindowed key's one group
ENDS = [(0, 10), (10, 20), (20, 30), (-(2**62), 2**62)]


def _step(rng: random.Random, keys: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    groups = {(f"k{rng.randrange(keys)}", *rng.choice(ENDS)) for _ in range(rng.randrange(1, 12))}
    fired = pd.DataFrame(sorted(groups), columns=list(GROUP_COLUMNS))
    fired = fired.astype({"__gk": object, "__gs": np.int64, "__ge": np.int64})
    shown = fired[[rng.random() < 0.85 for _ in range(len(fired))]]  # HAVING drops some
    values = [rng.choice([1, 2, 3, None]) for _ in range(len(shown))]
    results = shown.assign(n=pd.array(values, dtype="Int64").astype("float64"))
    return fired, results.reset_index(drop=True)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("keys", [3, 40])
def test_group_rows_give_the_materializers_changelog(seed, keys):
    rng = random.Random(seed)
    fast, general = GroupRows(["n"]), Materializer(["n"])
    for step in range(30):
        fired, results = _step(rng, keys)
        want = general.apply(fired, results, step)
        have = fast.apply(fired, results, step)
        pd.testing.assert_frame_equal(
            have.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False
        )
        if step % 10 == 9:
            horizon = rng.choice([10, 20])
            fast.expire(horizon)
            general.expire(horizon)
