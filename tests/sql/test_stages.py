"""Queries in stages (headwater/sql/plan/stages.py): an outer aggregate whose key
differs from its subquery's runs as two stages, stage 1 keyed by its own key,
stage 2 by the outer GROUP BY over stage 1's changelog. On random out-of-order
replays the staged run's table view equals the bounded query over the rows
arrived at every step, and its changelog equals the run as one group (less
the group columns and ``ver``, numbered per stage-2 group)."""

from __future__ import annotations

import dataclasses
import random

import duckdb
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, changelog_order, millis, rows, write_replay

from headwater.sql import read_replay, sql
from headwater.sql.execute.local import run_stream
from headwater.sql.plan.catalog import PTIME
from headwater.sql.plan.keys import KeyKind

DAY = "2024-01-01"
COLUMNS = ("ts", "k1", "k2", "v")
TYPES = {"k1": "VARCHAR", "k2": "VARCHAR", "v": "BIGINT"}
#: (query, whether its result names stage 2's key: then a group's rows are its own
#: and the changelog equals the one-group run's row for row)
QUERIES = {
    "avg of max": (
        "SELECT k2, AVG(m) AS a, COUNT(*) AS n FROM "
        "(SELECT k1, MAX(k2) AS k2, MAX(v) AS m FROM T GROUP BY k1) S GROUP BY k2",
        True,
    ),
    "latest of each": (
        "SELECT k2, MIN(t) AS t, MAX(m) AS m FROM "
        "(SELECT k1, MAX(k2) AS k2, MAX(ts) AS t, MAX(v) AS m FROM T GROUP BY k1) S GROUP BY k2",
        True,
    ),
    "count of groups": (
        "SELECT COUNT(*) AS n, SUM(s) AS total FROM (SELECT k1, SUM(v) AS s FROM T GROUP BY k1) S",
        True,
    ),
    "projected, key not shown": (
        "SELECT a + 1 AS b FROM (SELECT MIN(m) AS a FROM "
        "(SELECT k1, MAX(k2) AS k2, MAX(v) AS m FROM T GROUP BY k1) S GROUP BY S.k2 HAVING "
        "COUNT(*) > 0) P",
        False,
    ),
}
SEEDS = range(4)


def _steps(seed: int) -> list[tuple]:
    """Six steps of a few rows each, event times out of order, some k2 NULL."""
    rng = random.Random(seed)
    steps = []
    for i in range(6):
        batch = [
            (
                f"10:{rng.randrange(0, 30):02d}",
                rng.choice("abcde"),
                rng.choice(["x", "y", "z", None]),
                rng.randrange(0, 20),
            )
            for _ in range(rng.randrange(1, 5))
        ]
        steps.append((f"10:{30 + 2 * i:02d}", batch, None))
    return steps


@pytest.fixture(scope="module", params=SEEDS)
def replay(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("stages") / f"t{request.param}.jsonl"
    write_replay(path, DAY, _steps(request.param), "ts", COLUMNS)
    return {"T": read_replay(str(path), "T", "ts", TYPES)}


def _bounded(text: str, tables, as_of: int) -> list[tuple]:
    frame = tables["T"].frame
    con = duckdb.connect()
    con.register("T", frame[frame[PTIME] <= as_of].drop(columns=[PTIME]))
    return rows(con.sql(text).df())


def _log(changelog: pd.DataFrame) -> list[tuple]:
    """A changelog's rows without its group columns and versions, in a canonical order."""
    return sorted(rows(changelog.drop(columns=["__gk", "__gs", "__ge", "ver"])), key=repr)


@pytest.mark.parametrize("name", list(QUERIES))
def test_stages_equal_the_bounded_query_at_every_step(name, replay):
    text, shows_key = QUERIES[name]
    query = sql(text, replay)
    plan = query.plan
    assert [s.number for s in plan.stages] == [1, 2]
    staged = run_stream(plan)
    one_group = run_stream(dataclasses.replace(plan, stages=()))
    assert staged.columns == one_group.columns
    for as_of in sorted({*staged.changelog["ptime"], millis(DAY, "11:00")}):
        expected = _bounded(text, replay, int(as_of))
        assert_same_rows(rows(staged.table(int(as_of))), expected, False, f"{name} @ {as_of}")
        assert_same_rows(rows(one_group.table(int(as_of))), expected, False, f"one group {as_of}")
    if shows_key:
        assert _log(staged.changelog) == _log(one_group.changelog)


def test_explain_names_each_stage_its_key_and_state(replay):
    text = QUERIES["avg of max"][0]
    plan = sql(text, replay).plan
    first, second = plan.stages
    assert plan.key.kind is KeyKind.NONE
    assert first.key.kind is KeyKind.COLUMNS and [p.describe() for p in first.key.parts] == ["t.k1"]
    assert second.key.kind is KeyKind.COLUMNS and second.columns == ("k2",)
    explained = sql(text, replay).explain()
    assert "stage 1 over the streams, key t.k1: state grows with the distinct values" in explained
    assert "stage 2 over stage 1's changelog, key s.k2: state grows with" in explained
    none = sql(QUERIES["count of groups"][0], replay).plan.stages[1]
    assert none.key.kind is KeyKind.NONE


@pytest.mark.parametrize(
    "text",
    [
        # one key for both: already keyed by k2, no stages
        "SELECT k2, AVG(m) FROM (SELECT k1, k2, MAX(v) AS m FROM T GROUP BY k1, k2) S GROUP BY k2",
        # the outer query combines rows otherwise too (DISTINCT)
        "SELECT DISTINCT COUNT(*) FROM (SELECT k1, SUM(v) AS s FROM T GROUP BY k1) S GROUP BY s",
        # the subquery is one group itself
        "SELECT COUNT(*) FROM (SELECT SUM(v) AS s FROM T) S",
    ],
)
def test_queries_not_in_stages(text, replay):
    assert sql(text, replay).plan.stages == ()


@pytest.mark.spark
def test_spark_replay_in_stages_equals_local(spark, tmp_path):
    """On Spark a replay runs stage 1 on the streaming runner and stage 2 over its
    changelog: the changelog equals the local runner's, row for row."""
    from headwater.sql.execute.spark import SparkSqlQuery

    path = tmp_path / "t.jsonl"
    write_replay(path, DAY, _steps(1), "ts", COLUMNS)
    tables = {"T": read_replay(str(path), "T", "ts", TYPES)}
    text = QUERIES["avg of max"][0]
    on_spark = SparkSqlQuery(text, tables, spark=spark)
    assert "on Spark: stage 1 runs on the streaming runner" in on_spark.explain()
    spark_run = on_spark.run(None)
    local = sql(text, tables).run(None)
    assert len(local.changelog)
    assert spark_run.columns == local.columns
    assert rows(changelog_order(spark_run.changelog)) == rows(changelog_order(local.changelog))
