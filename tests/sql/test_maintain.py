"""The general path's per-group state: what a group materialized last and its
next ``ver``, kept only while the model can still fire the group."""

from __future__ import annotations

import pandas as pd

from headwater.model.time import MIN_TIMESTAMP
from headwater.sql import sql
from headwater.sql.changelog import Materializer
from headwater.sql.local import compile_sql

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


def test_the_maintainer_keeps_a_window_for_its_allowed_lateness_and_emit_delay() -> None:
    bids = pd.DataFrame(
        {"bidtime": pd.to_datetime(["2024-01-01 10:01"]), "price": [1.0], "__ptime": [0]}
    )
    query = sql(
        "SELECT wstart, wend, ROW_NUMBER() OVER (PARTITION BY wstart, wend ORDER BY price) AS rn "
        "FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), "
        "dur => INTERVAL '10' MINUTE) EMIT AFTER DELAY INTERVAL '2' MINUTE",
        {"Bid": bids},
    )
    maintainer = compile_sql(query.plan).maintainer
    assert maintainer.retention == query.plan.allowed_lateness + 2 * MINUTE
    state = maintainer.restore(None)
    groups = _groups((0, 10 * MINUTE))
    state.apply(groups, groups.assign(wstart=0, wend=0, rn=[1]), ptime=1)
    maintainer.expire(state, MIN_TIMESTAMP)  # no watermark yet: nothing goes
    maintainer.expire(state, 10 * MINUTE + maintainer.retention - 1)
    assert len(state.last) == 1
    maintainer.expire(state, 10 * MINUTE + maintainer.retention)
    assert len(state.last) == 0 and len(state.versions) == 0
