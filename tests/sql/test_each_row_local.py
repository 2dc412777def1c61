"""The local runner's stateless path (``replay_each_row``): a query whose
operators take each row on its own runs as one DuckDB query over every row on
time instead of a step per processing time. Its changelog (``ptime``, ``ver``,
dtypes) and its dead letters equal the general path's (``fast_path=False``, the
model's reducer step by step) at every processing time, over random
out-of-order replays with late rows, NULL event times, NULL values and many rows
per instant."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from fuzz_grammar import make_replay

import headwater.sql as hsql
from headwater.sql import read_replay

QUERIES = (
    "SELECT * FROM Bid",
    "SELECT auction, price * 2 AS doubled FROM Bid WHERE price > 5",
    "SELECT channel, UPPER(channel) AS up, bidtime FROM Bid WHERE channel IS NOT NULL",
    "SELECT price FROM Bid",
    "SELECT bidder, CASE WHEN price IS NULL THEN 'none' ELSE 'some' END AS has FROM Bid",
    "SELECT COALESCE(price, -1) AS p, auction + bidder AS ab FROM Bid WHERE auction <> 3",
)


def _both(query: str, tables: dict) -> tuple:
    each = hsql.sql(query, tables)
    general = hsql.sql(query, tables, fast_path=False)
    return each, general


def _same(each, general, as_of) -> None:
    pd.testing.assert_frame_equal(each.changelog(as_of), general.changelog(as_of))
    pd.testing.assert_frame_equal(each.dead_letters(as_of), general.dead_letters(as_of))


@pytest.mark.parametrize("seed", range(8))
def test_random_replays_equal_the_general_path(seed, tmp_path):
    replay = make_replay(seed, tmp_path)
    bid = {"Bid": replay.tables["Bid"]}
    for query in QUERIES:
        each, general = _both(query, bid)
        evaluation = "general path evaluation: stateless, one DuckDB query over every row"
        assert evaluation in each.explain() and evaluation not in general.explain()
        for as_of in (*replay.checkpoints, None):
            _same(each, general, as_of)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def _crowded(path: Path, seed: int) -> Path:
    """Bids at few instants (many rows each, equal rows among them), out of order,
    some late for a watermark of the latest time less 10 s, a few NULL times."""
    rng = random.Random(seed)
    lines, top = [], None
    for step in range(1, 7):
        for _ in range(rng.randint(3, 9)):
            t = rng.choice([100, 100.5, 130, 160, 161, 200, 230]) + (step - 1) * 20
            if rng.random() < 0.25:
                t -= 60  # late once the watermark has passed it
            row = {
                "bidtime": None if rng.random() < 0.08 else _iso(t),
                "item": rng.choice(["A", "B", None]),
                "price": rng.choice([1, 2, 2, None]),
            }
            lines.append({"ptime": _iso(1000 + step), "row": row})
            top = t if top is None else max(top, t)
        lines.append({"ptime": _iso(1000 + step), "watermark": _iso(top - 10)})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lateness", [0, 30_000])
def test_many_rows_per_instant_equal_the_general_path(seed, lateness, tmp_path):
    path = _crowded(tmp_path / f"bids-{seed}.jsonl", seed)
    types = {"bidtime": "TIMESTAMP", "item": "VARCHAR", "price": "BIGINT"}
    bid = {"Bid": read_replay(path, "Bid", "bidtime", types, lateness)}
    for query in ("SELECT * FROM Bid", "SELECT item, price FROM Bid WHERE price < 2"):
        each, general = _both(query, bid)
        late = general.dead_letters()
        assert lateness or (late["reason"] == "late").any(), "the data set has late rows"
        for as_of in (None, *[int(1000e3 + s * 1e3) for s in (1, 3, 5)]):
            _same(each, general, as_of)


def test_the_instant_at_the_watermark_is_on_time_and_the_one_before_late(tmp_path):
    """A row is late when its instant [t, t + 1 ms) ends by the watermark: at a
    watermark of 100.000 s, 99.999 s is late and 100.000 s is not."""
    lines = [
        {"ptime": _iso(1001), "row": {"bidtime": _iso(150), "item": "A", "price": 1}},
        {"ptime": _iso(1001), "watermark": _iso(100)},
    ]
    for t, item in ((99.999, "late"), (100, "on time"), (100.001, "after")):
        lines.append({"ptime": _iso(1002), "row": {"bidtime": _iso(t), "item": item, "price": 2}})
    path = tmp_path / "edge.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    bid = {"Bid": read_replay(path, "Bid", "bidtime")}
    each, general = _both("SELECT item FROM Bid", bid)
    _same(each, general, None)
    assert list(each.dead_letters()["item"]) == ["late"]
    assert sorted(each.changelog()["item"]) == ["A", "after", "on time"]
