"""One evaluation per step (headwater/sql/maintain/batch.py) against one per group.

The general path evaluates all groups that fire in a step by one DuckDB query
over their rows together (every stream row tagged with its group's id). For
the queries of the SQL suites (the surface, the EMIT modes, the paper's) and
shapes written for the rewrite (DISTINCT, INTERSECT/EXCEPT, outer joins of two
streams, correlated scalar subqueries, window functions without PARTITION BY,
CTEs, SELECT *, hopping and session windows), the batched result of many
groups equals each group's own evaluation put together: the same rows as
multisets, and the same columns and types. The groups are drawn at random
from random tables with NULLs in every column, duplicated rows, groups where
one stream is empty and a group where both are.

Queries the rewrite cannot batch exactly say why, run per group, and still
give the bounded query's result.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, rows
from test_bounded_random import random_table
from test_emit_modes import SHAPES, tumble
from test_paper import STREAM_CASES, query_of
from test_sql_surface import ITEMS, QUERIES
from test_sql_surface import tables as surface_tables

from headwater.sql import sql
from headwater.sql.execute.local import SqlPlan, compile_sql, run_stream, union_rows
from headwater.sql.maintain.batch import BatchQuery, plan_batch
from headwater.sql.maintain.groups import SOURCE
from headwater.sql.plan.catalog import PTIME, Table

BID, ASK = tumble("Bid", "bidtime"), tumble("Ask", "asktime")
HOP = (
    "Hop(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), dur => INTERVAL '10' MINUTE, "
    "hopsize => INTERVAL '5' MINUTE)"
)
SESSION = (
    "Session(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), gap => INTERVAL '5' MINUTE, "
    "keys => DESCRIPTOR(item))"
)
SAME = "A.wstart = B.wstart AND A.wend = B.wend"
#: Shapes written for the rewrite: each clause it tags with the group id.
OWN = {
    "distinct": f"SELECT DISTINCT wstart, wend, item FROM {BID}",
    "intersect": f"SELECT wstart, wend, item FROM {BID} INTERSECT SELECT wstart, wend, item "
    f"FROM {ASK}",
    "except_all": f"SELECT wstart, wend, item FROM {BID} EXCEPT ALL SELECT wstart, wend, item "
    f"FROM {ASK}",
    "union": f"SELECT wstart, wend, item FROM {BID} UNION SELECT wstart, wend, item FROM {ASK}",
    "full_join": f"SELECT B.wstart, A.wend, B.item, B.price, A.price AS ask FROM {BID} B "
    f"FULL JOIN {ASK} A ON {SAME} AND A.item = B.item",
    "right_join": f"SELECT A.wstart, A.item, B.price, A.price AS ask FROM {BID} B "
    f"RIGHT JOIN {ASK} A ON {SAME} AND A.item = B.item",
    "comma_join": f"SELECT B.wstart, B.item, A.item AS other FROM {BID} B, {ASK} A "
    f"WHERE {SAME} AND B.price < A.price",
    "using_join": f"SELECT wstart, wend, item, B.price, A.price AS ask FROM {BID} B "
    f"JOIN {ASK} A USING (wstart, wend, item)",
    "scalar_subquery": f"SELECT B.wstart, B.wend, B.item, B.price FROM {BID} B WHERE "
    f"B.price >= (SELECT AVG(A.price) FROM {ASK} A WHERE {SAME} GROUP BY A.wstart, A.wend)",
    "count_subquery": f"SELECT B.wstart, B.item FROM {BID} B WHERE 1 < (SELECT COUNT(*) "
    f"FROM {ASK} A WHERE {SAME} AND A.item = B.item GROUP BY A.wstart, A.wend)",
    "cte_scalar": f"WITH a AS (SELECT wstart, wend, price FROM {ASK}) SELECT B.wstart, B.item, "
    f"B.price FROM {BID} B WHERE B.price >= (SELECT AVG(a.price) FROM a WHERE a.wend = B.wend)",
    "correlated_limit": f"SELECT B.wstart, B.item, (SELECT A.price FROM {ASK} A WHERE {SAME} "
    "ORDER BY A.price DESC NULLS LAST, A.item LIMIT 1) AS best FROM " + BID + " B",
    "window_no_partition": "SELECT wstart, wend, item, price, COUNT(*) OVER () AS n, "
    f"RANK() OVER (ORDER BY price) AS r FROM {BID}",
    "cte": f"WITH w AS (SELECT wstart, wend, item, SUM(price) AS s FROM {BID} "
    "GROUP BY wstart, wend, item) SELECT a.wstart, a.item, a.s, b.item AS other "
    "FROM w a JOIN w b ON a.wstart = b.wstart AND a.s < b.s",
    "star": f"SELECT * FROM {BID} WHERE price > 3",
    "star_join": f"SELECT B.*, A.asktime FROM {BID} B JOIN {ASK} A ON {SAME}",
    "hop": f"SELECT wstart, wend, item, COUNT(*) AS n FROM {HOP} GROUP BY wstart, wend, item",
    "session": f"SELECT wstart, wend, item, SUM(price) AS total FROM {SESSION} "
    "GROUP BY wstart, wend, item",
    "dimension_left": f"SELECT B.wstart, B.item, I.category FROM {BID} B "
    "LEFT JOIN Item I ON B.item = I.item",
    "having": f"SELECT wstart, item, COUNT(*) AS n FROM {BID} GROUP BY wstart, wend, item "
    "HAVING COUNT(*) > 1",
}
#: Shapes evaluated per group, and the words of why.
PER_GROUP = {
    "global_aggregate": (
        f"WITH w AS (SELECT wstart, wend, MAX(price) AS hi FROM {BID} GROUP BY wstart, wend) "
        "SELECT MAX(hi) AS top FROM w",
        "aggregate without GROUP BY",
    ),
    "limit": (
        f"SELECT wstart, item FROM (SELECT wstart, item FROM {BID} ORDER BY price LIMIT 2) t",
        "LIMIT",
    ),
    "bounded_preserved": (
        f"SELECT I.item, B.price FROM Item I LEFT JOIN {BID} B ON B.item = I.item",
        "keeps a bounded relation",
    ),
    "bounded_branch": (
        f"SELECT item FROM {BID} UNION ALL SELECT item FROM Item",
        "bounded one",
    ),
}


def _relational(case: dict) -> str:
    """A paper case's query without its EMIT clause (which batching does not see)."""
    return re.sub(r"\s*EMIT\b.*", "", query_of(case), flags=re.S | re.I).rstrip("; \n")


#: ROW_NUMBER ordered to the last column it outputs: ties only between equal rows.
TOP2 = SHAPES["top2"].replace("ORDER BY price DESC)", "ORDER BY price DESC, item)")
ALL = {
    **{f"surface_{k}": v for k, v in QUERIES.items()},
    **{f"emit_{k}": v for k, v in SHAPES.items() if k != "top2"},
    "emit_top2": TOP2,
    # the paper's queries, each once (its cases differ in EMIT and as-of only)
    **{f"paper_{c['name']}": q for q, c in {_relational(c): c for c in STREAM_CASES}.items()},
    **OWN,
}
SEEDS = range(2)


def tables(seed: int) -> dict:
    """Random Bid and Ask streams (NULLs in every column) and the Item table."""
    rng = np.random.default_rng(seed)
    out = {"Item": ITEMS}
    for name, column in (("Bid", "bidtime"), ("Ask", "asktime")):
        frame = random_table(rng, column, 60)
        frame[PTIME] = np.arange(len(frame), dtype=np.int64)
        out[name] = Table(name=name, frame=frame, event_time=column)
    return out


def panes(plan: SqlPlan, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fired groups of random rows: the model's panes (a list of values per union
    column) and their group columns. Rows repeat within and across groups; a
    group may hold one stream's rows only, and one holds none."""
    union = union_rows(plan)
    union = union[~np.isnan(union["__et"].to_numpy(np.float64))].reset_index(drop=True)
    source = union[SOURCE].to_numpy()
    columns = [c for c in union.columns if c in plan.aggregations]
    starts = np.datetime64("2024-01-01T10:00", "ms").astype(np.int64) + 600_000 * np.arange(6)
    records: dict[str, list] = {c: [] for c in ["key", "window_start", "window_end", *columns]}
    for g in range(12):
        start = int(rng.choice(starts))
        end = start + 600_000
        inside = (union["__et"] >= start).to_numpy() & (union["__et"] < end).to_numpy()
        pool = np.flatnonzero(inside if rng.random() < 0.8 else np.ones(len(union), bool))
        only = rng.integers(-2, 2)  # < 0: every stream; else only that one
        if only >= 0:
            pool = pool[source[pool] == only]
        size = 0 if g == 0 or not len(pool) else int(rng.integers(1, 15))
        pick = rng.choice(pool, size=size, replace=True) if size else np.zeros(0, np.int64)
        records["key"].append(str(g))
        records["window_start"].append(start)
        records["window_end"].append(end)
        for column in columns:
            records[column].append(list(union[column].to_numpy()[pick]))
    frame = pd.DataFrame(records)
    fired = pd.DataFrame(
        {"__gk": frame["key"], "__gs": frame["window_start"], "__ge": frame["window_end"]}
    )
    return frame.assign(is_retraction=False), fired


def compiled(text: str, seed: int, batched: bool = True) -> tuple[SqlPlan, ...]:
    """The query's general-path plan, batched; and, when asked, per group."""
    query = sql(text, tables(seed)).plan
    modes = (True, False) if batched else (True,)
    plans = tuple(compile_sql(query, fast=False, batched=b) for b in modes)
    assert all(isinstance(p, SqlPlan) for p in plans)
    return plans


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", ALL)
def test_batched_equals_per_group(name: str, seed: int) -> None:
    batched, per_group = compiled(ALL[name], seed)
    assert isinstance(batched.maintainer.batch, BatchQuery), batched.maintainer.batch
    assert isinstance(per_group.maintainer.batch, str)
    fired_panes, fired = panes(batched, np.random.default_rng(seed))
    one = batched.maintainer.results(fired_panes, fired)
    each = per_group.maintainer.results(fired_panes, fired)
    assert list(one.columns) == list(each.columns)
    assert_same_rows(rows(one), rows(each), ordered=False, what=name)
    for column in one.columns:
        if len(one[column].dropna()) and len(each[column].dropna()):
            assert one[column].dtype == each[column].dtype, column


@pytest.fixture(scope="module")
def timelines(tmp_path_factory) -> dict:
    """The surface suite's streams: steps, watermarks, late rows."""
    return surface_tables.__wrapped__(tmp_path_factory)


@pytest.mark.parametrize("name", [n for n in ALL if n.startswith(("surface", "emit"))])
def test_a_run_batched_has_the_changelog_of_a_run_per_group(timelines, name: str) -> None:
    """Every step of a whole run: the same changelog, ``ver`` and all."""
    plan = sql(ALL[name], timelines).plan
    one, each = run_stream(plan), run_stream(plan, batched=False)
    assert len(one.changelog)
    pd.testing.assert_frame_equal(one.changelog, each.changelog, check_dtype=False)


@pytest.mark.parametrize("name", PER_GROUP)
def test_shapes_it_cannot_batch_say_why(name: str) -> None:
    text, why = PER_GROUP[name]
    (plan,) = compiled(text, 0, batched=False)
    assert isinstance(plan.maintainer.batch, str)
    assert why in plan.maintainer.batch
    explained = sql(text, tables(0)).explain()
    assert "evaluated per group" in explained and why in explained


def test_explain_says_the_general_path_batches() -> None:
    assert "batched, one DuckDB query per step" in sql(OWN["distinct"], tables(0)).explain()


def test_plan_batch_reads_no_data_and_keeps_bounded_tables_untagged() -> None:
    text = 'SELECT "s".x, t.y FROM "s" JOIN t ON "s".k = t.k'
    batch = plan_batch(text, ["s"])
    assert isinstance(batch, BatchQuery)
    assert "t.__gid" not in batch.text and '"s".__gid AS __gid' in batch.text
    assert plan_batch("SELECT 1 AS x FROM t", ["s"]) == (
        "its result does not come from a stream relation"
    )
