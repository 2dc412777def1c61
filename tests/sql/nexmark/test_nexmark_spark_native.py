"""Spark's own Structured Streaming NEXMark queries (headwater/bench/baselines/nexmark_spark.py),
the Spark baseline of ``headwater bench nexmark``: each hand-written query, run
availableNow over the Parquet file streams of a small generated stream (several files:
several micro-batches), must give the final table of Flink's query, i.e. the bounded
query in DuckDB of test_nexmark_queries.py (REFERENCE, written with Flink's meaning)."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from pyspark.sql import functions as F
from sql_helpers import assert_same_rows, rows
from test_nexmark_queries import REFERENCE, reference

from headwater.bench.baselines import nexmark_spark
from headwater.nexmark import NexmarkConfig, generate
from headwater.nexmark.output import write

CONFIG = NexmarkConfig(events=2000, seed=2, first_event_rate=200, out_of_order_ms=2000)
#: q14's count_char (the nexmark jar's Java UDF) in DuckDB; its reference is here
#: because headwater refuses q14 (CREATE FUNCTION).
_EURO = "CAST(0.908 * price AS DECIMAL(23, 3))"
_HOUR = 'hour("dateTime")'
REFERENCE_HERE = {
    "q14": f"""SELECT auction, bidder, {_EURO},
        CASE WHEN {_HOUR} >= 8 AND {_HOUR} <= 18 THEN 'dayTime'
             WHEN {_HOUR} <= 6 OR {_HOUR} >= 20 THEN 'nightTime' ELSE 'otherTime' END,
        "dateTime", extra, length(extra) - length(replace(extra, 'c', ''))
        FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000""",
}
NAMES = list(nexmark_spark.WRITTEN)


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    data = tmp_path_factory.mktemp("nexmark-native")
    events = generate(CONFIG)
    write(events, data, ["parquet"], events_per_file=700)
    return events, data


def final_table(spark, name: str, data, checkpoint) -> pd.DataFrame:
    """The query's result: the appended batches, or the last (complete) batch."""
    batches: list[pd.DataFrame] = []
    keep = batches.append
    mode = nexmark_spark.run(spark, name, data, checkpoint, lambda df: keep(df.toPandas()), 1)
    assert len(batches) > 1 or mode == "complete", "expected several micro-batches"
    if mode == "complete":
        return batches[-1]
    return pd.concat(batches, ignore_index=True)


@pytest.mark.spark
def test_every_native_query_has_a_reason_or_a_plan(spark):
    written = set(NAMES)
    assert set(nexmark_spark.native_queries(F)) == written
    assert written.isdisjoint(nexmark_spark.NATIVE_MISSING)
    assert written | set(nexmark_spark.NATIVE_MISSING) == {f"q{i}" for i in range(24)}
    assert written <= set(REFERENCE) | set(REFERENCE_HERE)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_native_query_equals_flinks_meaning(spark, stream, tmp_path, name):
    events, data = stream
    actual = final_table(spark, name, data, tmp_path / "checkpoint")
    if name in REFERENCE_HERE:
        with duckdb.connect() as con:
            for table, rows_ in events.tables.items():
                con.register(table, rows_)
            expected = con.execute(REFERENCE_HERE[name]).df()
    else:
        expected = reference(name, events)
    assert len(expected), f"{name}: the reference finds no rows; the data set is too small"
    assert_same_rows(rows(actual), rows(expected), ordered=False, what=name)
