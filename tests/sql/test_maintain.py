"""The general path's per-group state: what a group materialized last and its
next ``ver``, kept only while the model can still fire the group."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwater.model.reducer import Reducer
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MIN_TIMESTAMP
from headwater.model.windows import FixedWindows, Sessions
from headwater.sql.maintain.changelog import Materializer

MINUTE = 60_000


def _groups(*spans: tuple[int, int]) -> pd.DataFrame:
    return pd.DataFrame(
        {"__gk": ["0"] * len(spans), "__gs": [s for s, _ in spans], "__ge": [e for _, e in spans]}
    )


def test_expire_forgets_only_the_groups_that_ended_by_the_horizon() -> None:
    state = Materializer(["n"])
    groups = _groups((0, 10 * MINUTE), (10 * MINUTE, 20 * MINUTE))
    state.apply(groups, groups.assign(n=[1, 2]), ptime=1)
    state.expire(10 * MINUTE)
    assert list(state.last["__ge"]) == [20 * MINUTE]
    assert list(state.versions["__ge"]) == [20 * MINUTE]
    # the live group goes on numbering its changes: a withdrawal and an addition
    later = _groups((10 * MINUTE, 20 * MINUTE))
    change = state.apply(later, later.assign(n=[3]), ptime=2)
    assert list(change["undo"]) == [True, False]
    assert list(change["ver"]) == [1, 2]


def test_settled_waits_for_the_allowed_lateness_and_for_live_sessions() -> None:
    """``Reducer.settled``, the horizon of ``expire``: a window is settled once the
    model collected it and no live window contains it (a session merged into a
    live one is withdrawn only when that one fires)."""
    fixed = Reducer(WindowingStrategy.of(FixedWindows(600), allowed_lateness=300))  # seconds
    assert fixed.settled() == MIN_TIMESTAMP  # no watermark yet
    fixed.add_bundle(np.array(["a"], dtype=object), np.array([1 * MINUTE]), now=0)
    fixed.advance_watermark(12 * MINUTE)
    assert fixed.settled() == 0  # [0, 10) is live until 15: its start holds the horizon
    fixed.advance_watermark(20 * MINUTE)
    assert fixed.settled() == 15 * MINUTE  # collected: watermark - allowed lateness
    sessions = Reducer(WindowingStrategy.of(Sessions(120)))
    sessions.add_bundle(np.array(["a", "a"], dtype=object), np.array([0, MINUTE]), now=0)
    sessions.advance_watermark(2 * MINUTE)  # the session [0, 3) is still open
    assert sessions.settled() == 0
