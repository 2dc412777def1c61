"""The NEXMark queries that run locally, on Spark: each query's changelog
through the Spark streaming runner (the replay, micro-batch by micro-batch)
equals the local runner's. One SparkSession, a small stream (a few hundred
events, a few micro-batches), every query started at once (spark_runs)."""

from __future__ import annotations

import pytest
from sql_helpers import changelog_order, result, rows, spark_runs
from test_nexmark_queries import (
    DIVERGES,
    NAMES,
    QUERIES,
    REFUSED,
    insert_query,
    write_side_input,
)

from headwater.nexmark import NexmarkConfig, generate
from headwater.nexmark.output import write
from headwater.sql import sql

#: A few hundred events over ~1.5 s of event time, replayed in steps of 2 s: two or
#: three micro-batches per query.
CONFIG = NexmarkConfig(events=300, seed=2, first_event_rate=200, out_of_order_ms=1000)
#: Every query that runs locally (equal to the bounded query, or only by AVG's type).
RUNS = [n for n in NAMES if n not in REFUSED]


@pytest.fixture(scope="module")
def nexmark_spark_runs(spark, tmp_path_factory) -> dict:
    from headwater.sql.execute.spark import SparkSqlQuery

    data = tmp_path_factory.mktemp("nexmark_spark")
    write(generate(CONFIG), data, ["replay"], step_ms=2000)
    write_side_input(data)
    queries = {n: insert_query(n, data) for n in RUNS}

    def job(name):
        query, tables, functions = queries[name]
        return lambda: SparkSqlQuery(query, tables, name, functions, spark=spark).run(None)

    runs = spark_runs(spark, {n: job(n) for n in RUNS}, workers=4)
    return {n: (runs[n], queries[n]) for n in RUNS}


@pytest.mark.spark
@pytest.mark.parametrize("name", RUNS)
def test_spark_changelog_equals_local(nexmark_spark_runs, name: str) -> None:
    runs, (query, tables, functions) = nexmark_spark_runs, nexmark_spark_runs[name][1]
    spark_run = result({name: runs[name][0]}, name)
    local = sql(query, tables, functions=functions).run(None)
    # q2 keeps the auctions whose id is a multiple of 123: none of this stream's ~20
    if name != "q2":
        assert len(local.changelog), f"{name}: no changes; the stream is too small"
    assert spark_run.columns == local.columns
    assert rows(changelog_order(spark_run.changelog)) == rows(changelog_order(local.changelog))


def test_every_running_query_is_checked_on_spark() -> None:
    assert set(RUNS) == set(NAMES) - set(REFUSED)
    assert set(DIVERGES) <= set(RUNS) and QUERIES.is_dir()
