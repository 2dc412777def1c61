"""The local runner's stateless path under ``EMIT AFTER WATERMARK``: a query
whose operators take each row on its own gives each row's results once, at the
first step whose watermark reaches the end of its instant ``[t, t + 1 ms)``
(found by one search over the steps' watermarks), instead of stepping the
model's reducer and timers. Its changelog (every column, ``ver``, order), its
table view at every step and its dead letters equal the model's path
(``fast_path=False``) over seeded out-of-order replays with late rows, NULL
event times, rows exactly on the watermark, several rows per instant, steps
without rows, with and without an end of input. Spark keeps the shard operator
(a micro-batch cannot hold rows for a later one), and ``explain()`` says so."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

import headwater.sql as hsql
from headwater.sql import read_replay
from headwater.sql.plan.stateless import why_not

QUERIES = (
    "SELECT * FROM Bid",
    "SELECT item, price FROM Bid WHERE price < 3",
    "SELECT item, CASE WHEN price IS NULL THEN 'none' WHEN price > 2 THEN 'high'"
    " ELSE 'low' END AS band, bidtime FROM Bid",
    "SELECT UPPER(item) AS up, ABS(price - 3) AS off FROM Bid WHERE item IS NOT NULL",
)
TYPES = {"bidtime": "TIMESTAMP", "item": "VARCHAR", "price": "BIGINT"}
#: Processing time of the first step (s); steps are one second apart.
START = 1000
STEPS = 9


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def _replay(path: Path, seed: int) -> Path:
    """Bids at few instants (whole seconds and a few ms either side, several rows
    each, equal rows among them), arriving out of order over :data:`STEPS` steps;
    the watermark, where a step has one, lands exactly on an instant, one ms past
    it, or one ms before it; some steps have rows only, some a watermark only,
    some neither; some rows are late (their instant passed by the watermark)
    and a few have NULL event times."""
    rng = random.Random(seed)
    instants = sorted({s * 1000 + rng.choice([-1, 0, 0, 1]) for s in range(100, 160, 5)})
    lines, mark = [], None
    for step in range(1, STEPS + 1):
        ptime = _iso((START + step) * 1000)
        if rng.random() < 0.8:  # else a step without rows
            for _ in range(rng.randint(1, 7)):
                reach = min(len(instants), 2 + step)
                t = rng.choice(instants[:reach])
                row = {
                    "bidtime": None if rng.random() < 0.07 else _iso(t),
                    "item": rng.choice(["a", "b", None]),
                    "price": rng.choice([1, 2, 2, 4, None]),
                }
                lines.append({"ptime": ptime, "row": row})
        if rng.random() < 0.75:  # else the watermark stays where it is
            base = instants[min(len(instants) - 1, rng.randint(0, step + 1))]
            candidate = base + rng.choice([-1, 0, 1])
            mark = candidate if mark is None else max(mark, candidate)
            lines.append({"ptime": ptime, "watermark": _iso(mark)})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _both(query: str, tables: dict) -> tuple:
    return hsql.sql(query, tables), hsql.sql(query, tables, fast_path=False)


def _same(each, general, as_of) -> None:
    pd.testing.assert_frame_equal(each.changelog(as_of), general.changelog(as_of))
    pd.testing.assert_frame_equal(each.to_pandas(as_of), general.to_pandas(as_of))
    pd.testing.assert_frame_equal(each.dead_letters(as_of), general.dead_letters(as_of))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("lateness", [0, 20_000])
def test_random_replays_equal_the_model_path(seed, lateness, tmp_path):
    path = _replay(tmp_path / f"bids-{seed}.jsonl", seed)
    bid = {"Bid": read_replay(path, "Bid", "bidtime", TYPES, lateness)}
    steps = [(START + s) * 1000 for s in range(1, STEPS + 1)]
    # runs without an end of input (before the last step; one between two steps)
    # and with it (None)
    times = [steps[1], steps[2] + 500, steps[5], steps[-1] - 1, None]
    waited = 0
    for query in QUERIES:
        each, general = _both(query + " EMIT AFTER WATERMARK", bid)
        assert "general path evaluation: stateless" in each.explain()
        assert "the model's reducer and timers, not stateless" in general.explain()
        for as_of in times:
            _same(each, general, as_of)
        for as_of in (steps[-1] - 1, None):  # the table view at every step, of both runs
            for step in steps:
                view = each.run(as_of).table(step)
                pd.testing.assert_frame_equal(view, general.run(as_of).table(step))
        stream, stream_general = _both(query + " EMIT STREAM AFTER WATERMARK", bid)
        for as_of in (steps[-1] - 1, None):
            pd.testing.assert_frame_equal(stream.to_pandas(as_of), stream_general.to_pandas(as_of))
        # the same rows as at arrival (EMIT STREAM), each as late or later
        log, at_once = each.changelog(), hsql.sql(query + " EMIT STREAM", bid).changelog()
        assert len(log) == len(at_once)
        waited += int(_ms(log["ptime"]).sum() - _ms(at_once["ptime"]).sum())
    assert waited > 0, "some rows wait for the watermark"


def _ms(ptimes: pd.Series) -> pd.Series:
    return ptimes.astype("datetime64[ms]").astype("int64")


def _lines(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _row(step: int, t: int, item: str) -> dict:
    return {"ptime": _iso((START + step) * 1000), "row": {"bidtime": _iso(t), "item": item}}


def _mark(step: int, t: int) -> dict:
    return {"ptime": _iso((START + step) * 1000), "watermark": _iso(t)}


def test_a_row_is_emitted_when_the_watermark_reaches_its_instant_end(tmp_path):
    """An instant [t, t + 1) is complete once the watermark is at t + 1 ms: at a
    watermark of exactly t it still waits; rows of one instant that arrived at
    different steps come out together; a step of a watermark only emits; the
    rows still waiting at the last step come out at the end of input."""
    t = 100_000
    lines = [
        _row(1, t, "first"),
        _row(1, t + 5, "later"),
        _mark(1, t),  # exactly on the instant: not yet past it
        _row(2, t, "second"),
        _mark(3, t + 1),  # a step without rows: the instant [t, t + 1) is complete
        _row(4, t, "late"),  # its instant is already passed: a dead letter
        _row(4, t + 9, "never passed"),
        _mark(4, t + 6),
    ]
    bid = {"Bid": read_replay(_lines(tmp_path / "edge.jsonl", lines), "Bid", "bidtime")}
    each, general = _both("SELECT item FROM Bid EMIT STREAM AFTER WATERMARK", bid)
    for step in range(1, 5):
        _same(each, general, (START + step) * 1000)
    _same(each, general, None)
    log = each.changelog()
    steps = (_ms(log["ptime"]) - START * 1000) // 1000
    at = dict(zip(log["item"], steps, strict=True))
    assert at == {"first": 3, "second": 3, "later": 4, "never passed": 4}
    assert list(log["ver"]) == [0, 1, 0, 0]
    assert list(each.dead_letters()["item"]) == ["late"]
    # no end of input: as of step 4, the last row's instant waits still
    waiting = each.changelog((START + 4) * 1000 - 1)
    assert sorted(waiting["item"]) == ["first", "second"]


def test_a_row_within_the_allowed_lateness_fires_its_instant_again(tmp_path):
    """A row of an instant the watermark passed, within the allowed lateness, comes
    out at its arrival (the instant's late firing), continuing its versions."""
    t = 100_000
    lines = [_row(1, t, "a"), _mark(1, t + 1), _row(2, t, "b"), _mark(2, t + 10)]
    path = _lines(tmp_path / "late.jsonl", lines)
    bid = {"Bid": read_replay(path, "Bid", "bidtime", allowed_lateness=60_000)}
    each, general = _both("SELECT item FROM Bid EMIT STREAM AFTER WATERMARK", bid)
    _same(each, general, None)
    log = each.changelog()
    assert list(zip(log["item"], _ms(log["ptime"]) - START * 1000, log["ver"], strict=True)) == [
        ("a", 1000, 0),
        ("b", 2000, 1),
    ]


@pytest.mark.parametrize(
    ("emit", "local", "spark"),
    [
        ("", None, None),
        ("EMIT AFTER WATERMARK", None, "a micro-batch cannot hold rows"),
        ("EMIT STREAM AFTER WATERMARK", None, "a micro-batch cannot hold rows"),
        ("EMIT AFTER DELAY INTERVAL '1' SECOND", "a processing-time timer", "timer"),
    ],
)
def test_each_runner_says_which_path_and_why(emit, local, spark, tmp_path):
    path = _lines(tmp_path / "one.jsonl", [_row(1, 100_000, "a"), _mark(1, 100_001)])
    query = hsql.sql(f"SELECT item FROM Bid {emit}", {"Bid": read_replay(path, "Bid", "bidtime")})
    for holds_rows, expected in ((True, local), (False, spark)):
        found = why_not(query.plan, holds_rows)
        assert found is None if expected is None else expected in (found or "")
    explained = query.explain()
    if local is None:
        assert "general path evaluation: stateless" in explained
    else:
        reason = why_not(query.plan, holds_rows=True)
        assert f"the model's reducer and timers, not stateless, because {reason}" in explained
    if spark is None:
        assert "on Spark streams: stateless" in explained
    else:
        reason = why_not(query.plan)
        assert f"shard operator (transformWithStateInPandas, state store) because {reason}" in (
            explained
        )
