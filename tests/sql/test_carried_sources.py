"""Which packet column holds each of a dead letter's columns on the Spark fast path
(:func:`~headwater.sql.execute.aggregate_spark.carried_sources`): a column the
projection already ships unchanged is read from there, so a row's values cross
the shuffle once; every other column travels as its own ``__r<i>``.

That the dead letters still hold whole rows on Spark is checked by the bad-input
suite (tests/bad_input), over late rows, malformed lines and null event times."""

from __future__ import annotations

import pytest

from headwater.sql import read_replay
from headwater.sql import sql as hsql
from headwater.sql.execute.aggregate_local import KEY, AggregatePlan, carried
from headwater.sql.execute.aggregate_spark import carried_sources
from headwater.sql.execute.local import compile_sql

PAPER = "tests/sql/data/paper/bids.jsonl"
WINDOW = "Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), dur => INTERVAL '10' MINUTE)"


def _sources(select: str, group: str = "") -> dict[str, str]:
    table = read_replay(PAPER, "Bid", "bidtime")
    text = f"SELECT wstart, wend, {select} FROM {WINDOW} GROUP BY wstart, wend{group}"
    plan = compile_sql(hsql(text, {"Bid": table}).plan)
    assert isinstance(plan, AggregatePlan)
    names = {column: name for name, column in zip(carried(plan), plan.schema.names, strict=True)}
    sources = carried_sources(plan)
    return {column: sources[names[column]] for column in plan.schema.names}


def test_an_argument_shipped_unchanged_is_not_carried_twice() -> None:
    """The event time is carried as its own column: in µs, where every letter's
    event time is the model's ms (tests/sql/test_microseconds.py)."""
    sources = _sources("SUM(price) AS total")
    assert sources["bidtime"].startswith("__r")
    assert sources["price"].startswith("__x")  # the SUM's own argument column
    assert sources["item"].startswith("__r")  # nothing else ships it


@pytest.mark.parametrize("select", ["SUM(price * 2) AS total", "SUM(CAST(price AS DOUBLE)) AS t"])
def test_a_computed_argument_leaves_the_column_carried(select: str) -> None:
    assert _sources(select)["price"].startswith("__r")


@pytest.mark.parametrize("column", ["item", "price"])
def test_the_lone_group_column_is_read_from_the_shard_key(column: str) -> None:
    """A text or integer GROUP BY column is the shard key itself: its dead-letter
    copy is the key, so the column crosses the shuffle once."""
    sources = _sources(f"{column}, COUNT(*) AS n", f", {column}")
    assert sources[column] == KEY
    other = "price" if column == "item" else "item"
    assert sources[other].startswith("__r")


def test_two_group_columns_leave_them_carried() -> None:
    """Two GROUP BY columns travel in the key as JSON, not as themselves."""
    sources = _sources("item, price, COUNT(*) AS n", ", item, price")
    assert sources["item"].startswith("__r") and sources["price"].startswith("__r")
