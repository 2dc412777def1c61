"""``GROUP BY ALL`` (headwater/sql/plan/group_all.py): parsed before EMIT, and
spelt out as the select items that aggregate nothing, so a windowed one keeps a
key and completes under EMIT AFTER WATERMARK; its table view is the bounded
query's at every step."""

from __future__ import annotations

import pytest

import headwater as hw
from headwater.sql import read_replay
from headwater.sql.plan.catalog import PTIME

BIDS = "tests/sql/data/paper/bids.jsonl"
TUMBLE = "Tumble(TABLE(Bid), DESCRIPTOR(bidtime), INTERVAL '10' MINUTE)"
QUERIES = {
    "windowed": f"SELECT wstart, item, COUNT(*) AS n, SUM(price) AS s FROM {TUMBLE} GROUP BY ALL",
    "expression": "SELECT UPPER(item) AS u, MAX(price) + 1 AS top FROM Bid GROUP BY ALL",
    "global": "SELECT COUNT(*) AS n, MIN(price) AS low FROM Bid GROUP BY ALL",
}


@pytest.fixture(scope="module")
def tables() -> dict:
    return {"Bid": read_replay(BIDS, "Bid", "bidtime")}


def rows(frame) -> list[str]:
    return sorted(map(str, frame.values.tolist()))


@pytest.mark.parametrize("emit", ["EMIT STREAM", "EMIT STREAM AFTER WATERMARK"])
@pytest.mark.parametrize("name", list(QUERIES))
def test_the_table_view_is_the_bounded_query(tables, name, emit) -> None:
    text = QUERIES[name]
    if emit.endswith("WATERMARK") and name != "windowed":
        pytest.skip("no watermark completes a group that holds no window")
    run = hw.sql(f"{text} {emit}", tables).run()
    frame = tables["Bid"].frame
    ptimes = sorted(set(frame[PTIME].tolist()))
    for as_of in ptimes:
        arrived = {"Bid": frame[frame[PTIME] <= as_of].drop(columns=PTIME)}
        view, bounded = rows(run.table(as_of)), rows(hw.sql(text, arrived).to_pandas())
        if emit == "EMIT STREAM":
            assert view == bounded, as_of
        else:  # the windows the watermark closed, each final
            assert set(view) <= set(bounded), as_of
    assert emit == "EMIT STREAM" or run.table(ptimes[-1]).shape[0] > 0


def test_a_windowed_group_by_all_is_keyed_by_its_window(tables) -> None:
    explained = hw.sql(f"{QUERIES['windowed']} EMIT STREAM AFTER WATERMARK", tables).explain()
    assert "key the window bounds and bid.item" in explained
