from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headwater.model.changelog import latest_panes, rollup
from headwater.model.combiners import Count, Max, Mean, Sum
from headwater.model.reducer import Reducer
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MAX_TIMESTAMP
from headwater.model.triggers import AfterCount, AfterWatermark
from headwater.model.windows import Sessions


def _changelog(seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A retracting session pipeline fed out of order, and its input."""
    rng = np.random.default_rng(seed)
    n = 400
    data = pd.DataFrame(
        {
            "key": rng.choice(["a", "b", "c"], n),
            "ts": rng.integers(0, 200_000, n),
            "v": rng.integers(1, 100, n),
        }
    )
    strategy = WindowingStrategy.of(
        Sessions(5), AfterWatermark(early=AfterCount(3), late=AfterCount(1)), "retracting", 10**9
    )
    r = Reducer(strategy, {"v": (Sum(), "v")})
    parts = []
    for i, rows in enumerate(np.array_split(np.arange(n), 20)):
        chunk = data.iloc[rows]
        parts.append(r.add_bundle(chunk.key, chunk.ts, chunk[["v"]]).panes)
        parts.append(r.advance_watermark(i * 8_000).panes)
    parts.append(r.advance_watermark(MAX_TIMESTAMP).panes)
    return pd.concat([p for p in parts if len(p)], ignore_index=True), data


@pytest.mark.parametrize("seed", range(5))
def test_rollup_with_inverse_equals_input_totals(seed):
    log, data = _changelog(seed)
    assert log["is_retraction"].any()
    per_key = rollup(log, ["key"], "v", Sum()).set_index("key")["v"].to_dict()
    assert per_key == data.groupby("key")["v"].sum().to_dict()
    current = latest_panes(log, ["key"])
    assert current.groupby("key")["v"].sum().to_dict() == per_key


def test_count_and_mean_inverses():
    log = pd.DataFrame(
        {
            "team": ["x", "x", "x", "y"],
            "v": [4.0, 4.0, 10.0, 1.0],
            "is_retraction": [False, True, False, False],
        }
    )
    assert rollup(log, ["team"], "v", Count())["v"].tolist() == [1, 1]
    assert rollup(log, ["team"], "v", Mean())["v"].tolist() == [10.0, 1.0]


def test_rollup_needs_an_inverse():
    with pytest.raises(TypeError, match="no inverse"):
        rollup(pd.DataFrame({"k": [1], "v": [1], "is_retraction": [False]}), ["k"], "v", Max())
