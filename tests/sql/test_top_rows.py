"""Deduplication and Top-N keep only each key's first rows (``model.keep``): which
queries do (:mod:`headwater.sql.plan.top_rows`, by their text), and that their
table view is still, at every processing time, the query run bounded over the
rows arrived: many rows per key, ties on the order and NULLs in it, so that the
rows kept beyond the first ``n`` matter."""

from __future__ import annotations

import random

import pytest
from sql_helpers import assert_same_rows, changelog_order, millis, rows, write_replay
from test_keys import bounded

from headwater.sql import read_replay, sql
from headwater.sql.execute.local import compile_sql
from headwater.sql.plan.top_rows import first_rows

DAY = "2024-01-01"
COLUMNS = ("bidtime", "price", "item", "bidder", "id")


def _steps(seed: int) -> list[tuple]:
    """Eight steps of six bids on three items: prices from a few values (ties), a
    NULL price now and then, event times out of order, a unique ``id`` (ROW_NUMBER
    ranks ties in any order: the queries that number rows order by it last)."""
    rng = random.Random(seed)
    steps = []
    for step in range(8):
        bids = []
        for _ in range(6):
            second = rng.randrange(0, 60)
            price = None if rng.random() < 0.1 else rng.choice([1, 2, 2, 3, 5, 5, 8])
            bid = (f"10:0{step}:{second:02d}", price, rng.choice("ABC"), rng.choice("xy"))
            bids.append((*bid, len(steps) * 6 + len(bids)))
        steps.append((f"10:0{step}:59", bids, None))
    return steps


PTIMES = [f"10:0{step}:59" for step in range(8)]


@pytest.fixture(scope="module", params=[1, 2])
def tables(request, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp(f"top{request.param}")
    path = write_replay(folder / "bids.jsonl", DAY, _steps(request.param), "bidtime", COLUMNS)
    return {"Bid": read_replay(path, "Bid", "bidtime")}


def _ranked(rank: str, order: str, where: str, items: str = "*") -> str:
    return (
        f"SELECT {items} FROM (SELECT *, {rank}() OVER (PARTITION BY item ORDER BY {order}) "
        f"AS rn FROM Bid) WHERE {where}"
    )


#: query -> the rows per key it keeps: (n, ((column, descending), ...)), or None.
KEPT = {
    "top3": (
        _ranked("ROW_NUMBER", "price DESC, id", "rn <= 3"),
        (3, (("price", True), ("id", False))),
    ),
    "top2_two_columns": (
        _ranked("ROW_NUMBER", "price, bidtime DESC, id", "rn < 3", "item, price, bidtime, rn"),
        (2, (("price", False), ("bidtime", True), ("id", False))),
    ),
    "rank_ties": (_ranked("RANK", "price DESC", "rn <= 2"), (2, (("price", True),))),
    "dedup_first": (
        _ranked("ROW_NUMBER", "bidtime, id", "rn = 1"),
        (1, (("bidtime", False), ("id", False))),
    ),
    "second_only": (
        _ranked("ROW_NUMBER", "price DESC, id", "rn = 2"),
        (2, (("price", True), ("id", False))),
    ),
    "bound_first": (
        _ranked("ROW_NUMBER", "price NULLS FIRST, id", "2 >= rn AND price > 1"),
        (2, (("price", False), ("id", False))),
    ),
    "nulls_last_desc": (
        _ranked("ROW_NUMBER", "price DESC NULLS LAST, bidder, id", "rn <= 2"),
        (2, (("price", True), ("bidder", False), ("id", False))),
    ),
    # every row kept: the rank is not bounded, or not over the stream's rows as they are
    "or_bound": (_ranked("ROW_NUMBER", "price DESC", "rn <= 2 OR price > 5"), None),
    "dense_rank": (_ranked("DENSE_RANK", "price DESC", "rn <= 2"), None),
    "filtered_first": (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY item ORDER BY price DESC) "
        "AS rn FROM Bid WHERE bidder = 'x') WHERE rn <= 2",
        None,
    ),
    "other_key": (
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY item, bidder ORDER BY price) "
        "AS rn, COUNT(*) OVER (PARTITION BY item, bidder) AS c FROM Bid) WHERE rn <= 1",
        None,
    ),
    "expression_order": (_ranked("ROW_NUMBER", "price * -1", "rn <= 2"), None),
    "subquery_bound": (
        _ranked("ROW_NUMBER", "price DESC", "rn <= 2 AND price >= (SELECT AVG(price) FROM Bid)"),
        None,
    ),
}


@pytest.mark.parametrize("name", list(KEPT))
def test_which_queries_keep_only_first_rows(tables, name: str) -> None:
    text, kept = KEPT[name]
    plan = sql(text, tables=tables).plan
    first = first_rows(plan)
    assert (first and (first.n, first.order)) == kept
    keep = compile_sql(plan, fast=False).keep
    assert (keep is None) == (kept is None)
    if keep is not None:  # the order's columns named by the reducer's inputs
        assert [c.startswith("__t0_") for c, _ in keep.order] == [True] * len(kept[1])


@pytest.mark.parametrize("name", list(KEPT))
def test_table_view_is_the_bounded_query(tables, name: str) -> None:
    text = KEPT[name][0]
    query = sql(text, tables=tables)
    run = query.run(None)
    dropped = query.dead_letters()
    for clock in PTIMES:
        as_of = millis(DAY, clock)
        expected = bounded(text, tables, as_of, dropped)
        assert_same_rows(
            rows(run.table(as_of)), rows(expected), ordered=False, what=f"{name} @ {clock}"
        )


def test_state_keeps_the_first_rows_only(tables) -> None:
    """A key's pane (its state) holds its two highest prices, the prices tied with
    the second and the NULL prices (``RANK() ... <= 2``): not every row of the key."""
    from headwater.model.reducer import Reducer
    from headwater.sql.execute.local import union_rows
    from headwater.sql.maintain.groups import EVENT_TIME, KEY

    compiled = compile_sql(sql(KEPT["rank_ties"][0], tables=tables).plan, fast=False)
    union = union_rows(compiled)
    union = union[union[EVENT_TIME].notna()]
    reducer = Reducer(compiled.strategy, compiled.aggregations, compiled.keep)
    values = union[list(compiled.aggregations)]
    panes = reducer.step(union[KEY].to_numpy(), union[EVENT_TIME].to_numpy(), values).panes
    price = dict(zip(compiled.layouts[0].columns, compiled.layouts[0].union, strict=True))["price"]
    held = dict(zip(panes["key"], panes[price], strict=True))
    arrived = union.groupby(KEY)[price].agg(list)
    assert set(held) == set(arrived.index)
    for key, prices in arrived.items():
        known = [p for p in prices if p == p and p is not None]
        kept = [p for p in known if sum(q > p for q in known) < 2]
        expected = len(prices) - len(known) + len(kept)
        assert len(held[key]) == expected, key
    assert sum(map(len, held.values())) < len(union)


@pytest.mark.spark
def test_spark_changelog_equals_local(spark, tables) -> None:
    """On Spark, the shards' reducers keep the first rows too, with the same changes."""
    from headwater.sql.execute.spark import SparkSqlQuery

    text = KEPT["top2_two_columns"][0]
    spark_run = SparkSqlQuery(text, tables, name="top2", spark=spark).run(None)
    local = sql(text, tables=tables).run(None)
    assert rows(changelog_order(spark_run.changelog)) == rows(changelog_order(local.changelog))
