"""The NEXMark queries that run locally, on a live Spark file stream: the DDL of
queries/ddl.sql with each source a directory of the generated Parquet files (in
arrival order, one file of each table per micro-batch: two, the fewest that
show rows arriving out of order across batches and late), each query run
``availableNow`` (its input ends: every window fires) into a changelog. The
final table (the changelog applied) must equal the bounded query in DuckDB
(test_nexmark_queries.py's REFERENCE, or OWN_MEANING where headwater differs
from Flink) over the generated rows less the rows the run dropped as late (its
dead letters). The events arrive up to 6 s out of order against a watermark of
4 s, so some are late (the row-by-row queries drop them). The queries' streams
run four at a time in the one SparkSession (spark_runs), with one shuffle
partition.

q12 windows the bids by processing time (PROCTIME(): a micro-batch's clock),
which the run alone knows: its reference is every bid counted once, by bidder,
each window 10 s long and on a multiple of 10 s (as tests/sql/test_proctime.py
checks a live stream); the replay test (test_nexmark_queries.py) checks its
windows exactly.
"""

from __future__ import annotations

import tempfile
import types
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, result, rows, spark_runs
from test_nexmark_queries import (
    DIVERGES,
    NAMES,
    REFUSED,
    assert_flinks_meaning,
    insert_query,
    reference,
    script,
    write_side_input,
)

from headwater.nexmark import NexmarkConfig, generate
from headwater.nexmark.output import write
from headwater.sql.parse.ddl import SourceDef
from headwater.sql.plan.catalog import Table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: 600 events over 6 s of event time, arriving up to 6 s late against the DDL's
#: watermark of 4 s: two Parquet files per table, one micro-batch each (the first
#: batch's watermark makes rows of the second late; test_the_stream_has_late_rows).
CONFIG = NexmarkConfig(events=600, seed=1, first_event_rate=100, out_of_order_ms=6000)
EVENTS_PER_FILE = 300
#: Every query that runs locally (equal to the bounded query, or only by AVG's type).
RUNS = [n for n in NAMES if n not in REFUSED]
#: Queries windowed by processing time: checked by what the run saw (the module's doc).
BY_PROCESSING_TIME = {"q12"}


def file_stream_script(name: str, data: Path) -> str:
    """The query's script with each replay source a directory of Parquet files."""
    text = script(name, data, data / "unused.duckdb")
    text = text.replace("'format' = 'replay'", "'format' = 'parquet'").replace(".jsonl'", "'")
    assert ".jsonl" not in text, f"{name}: a source the file stream does not replace"
    return text


def one_file_per_batch(spark):
    """A script's source on Spark (a directory: a file stream) reading one file
    per micro-batch, so that each batch is the next arrivals of every table."""
    from headwater.sql.execute.spark import spark_source

    def source(d: SourceDef) -> Table:
        table = spark_source(d, {"spark": spark})
        if table.spark is None:  # a file: q13's bounded side input
            return table
        reader = spark.readStream.schema(table.spark.schema).option("maxFilesPerTrigger", 1)
        return replace(table, spark=reader.parquet(d.options["path"]))

    return source


#: The changelog's columns that are not the query's.
CHANGE_COLUMNS = ("undo", "ptime", "ver")


def final_table(changelog: list[pd.DataFrame]) -> pd.DataFrame:
    """The table a changelog leaves: each row's additions less its retractions."""
    log = pd.concat(changelog, ignore_index=True)
    columns = [c for c in log.columns if c not in CHANGE_COLUMNS]
    net = log[columns].astype(object).where(log[columns].notna(), None)
    net = net.assign(__n=np.where(log["undo"].astype(bool), -1, 1))
    counts = net.groupby(columns, dropna=False, sort=False)["__n"].sum()
    assert (counts >= 0).all(), "a retraction of a row the changelog never added"
    kept = counts[counts > 0]
    table = kept.index.to_frame(index=False)
    return table.loc[table.index.repeat(kept.to_numpy())].reset_index(drop=True)


def not_dropped(events, letters: pd.DataFrame) -> types.SimpleNamespace:
    """The generated tables less the rows of ``letters`` (one row removed per dead
    letter, matched on the columns the letter holds), as ``reference`` reads them."""
    tables = {}
    with duckdb.connect() as con:
        for table, frame in events.tables.items():
            mine = letters[letters["table"] == table] if len(letters) else letters
            con.register("t", frame)
            if not len(mine):
                tables[table] = frame
                continue
            held = [c for c in frame.column_names if c in mine.columns]
            con.register("d", mine[held].reset_index(drop=True))
            cols = ", ".join(f'"{c}"' for c in held)
            on = " AND ".join(f'e."{c}" IS NOT DISTINCT FROM d."{c}"' for c in held)
            tables[table] = con.execute(
                f"""WITH e AS (SELECT *, row_number() OVER (PARTITION BY {cols}) AS __k FROM t),
                    d AS (SELECT {cols}, count(*) AS __n FROM d GROUP BY ALL)
                SELECT e.* EXCLUDE (__k) FROM e LEFT JOIN d ON {on}
                WHERE e.__k > coalesce(d.__n, 0)"""
            ).fetch_arrow_table()
            assert tables[table].num_rows == frame.num_rows - len(mine), (
                f"{table}: a dead letter that is no generated row"
            )
    return types.SimpleNamespace(tables=tables)


def _local(batch) -> pd.DataFrame:
    return batch if isinstance(batch, pd.DataFrame) else batch.toPandas()


@pytest.fixture(scope="module")
def file_stream_runs(spark, tmp_path_factory) -> dict:
    """query -> its run: (changelog batches, dead letters) or the exception
    it raised; and "events", "data": the generated events and their directory."""
    from headwater.sql.execute.spark import SparkSqlQuery

    data = tmp_path_factory.mktemp("nexmark_files")
    events = generate(CONFIG)
    # the replay files too: the reference reads bid.jsonl (q12's arrival times)
    write(events, data, ["parquet", "replay"], events_per_file=EVENTS_PER_FILE)
    write_side_input(data)
    source = one_file_per_batch(spark)

    def job(name):
        def run():
            text = file_stream_script(name, data)
            query, tables, functions = insert_query(name, data, text=text, source=source)
            run = SparkSqlQuery(query, tables, name, functions, spark=spark)
            changelog: list[pd.DataFrame] = []
            letters: list[pd.DataFrame] = []
            # a new checkpoint for each attempt: spark_runs runs a job again after a
            # transient failure, and a resumed run would miss the batches before it
            checkpoint = tempfile.mkdtemp(prefix=f"{name}-", dir=data)
            run.start(
                checkpoint_location=checkpoint,
                sink=lambda batch, _: changelog.append(_local(batch)),
                dead_letter_sink=lambda batch, _: letters.append(_local(batch)),
                trigger={"availableNow": True},
            ).awaitTermination()
            dropped = pd.concat(letters, ignore_index=True) if letters else pd.DataFrame()
            return changelog, dropped

        return run

    runs = spark_runs(spark, {n: job(n) for n in RUNS}, workers=4)
    return {**runs, "events": events, "data": data}


def _param(name: str):
    if name in DIVERGES:
        mark = pytest.mark.xfail(strict=True, raises=AssertionError, reason=DIVERGES[name])
        return pytest.param(name, marks=mark, id=name)
    return pytest.param(name, id=name)


@pytest.mark.parametrize("name", [_param(n) for n in RUNS])
def test_file_stream_equals_the_bounded_query(file_stream_runs, name: str) -> None:
    changelog, letters = result(file_stream_runs, name)
    events, data = file_stream_runs["events"], file_stream_runs["data"]
    assert len(changelog) > 1, f"{name}: expected several micro-batches"
    actual = final_table(changelog)
    arrived = not_dropped(events, letters)
    if name in BY_PROCESSING_TIME:
        check_processing_time_windows(actual, arrived)
        return
    expected = reference(name, arrived, data=data)
    if name != "q2":  # q2 keeps the auctions whose id is a multiple of 123: maybe none
        assert len(expected), f"{name}: the reference finds no rows; the data set is too small"
    assert_flinks_meaning(name, actual, expected, arrived)


def check_processing_time_windows(actual: pd.DataFrame, arrived) -> None:
    """q12 (bidder, bid_count, starttime, endtime): every bid not dropped counted
    once, for its bidder, in windows of 10 s on multiples of 10 s."""
    with duckdb.connect() as con:
        con.register("bid", arrived.tables["bid"])
        per_bidder = con.execute("SELECT bidder, count(*) FROM bid GROUP BY bidder").df()
    counted = actual.groupby("bidder", as_index=False)["bid_count"].sum()
    assert_same_rows(rows(counted), rows(per_bidder), ordered=False, what="q12 per bidder")
    start, end = pd.to_datetime(actual["starttime"]), pd.to_datetime(actual["endtime"])
    assert (end - start == pd.Timedelta(seconds=10)).all(), actual
    assert (start.astype("int64") % 10_000_000_000 == 0).all(), actual


def test_the_stream_has_late_rows(file_stream_runs) -> None:
    """The dead letters are part of the check: some query drops late rows."""
    dropped = [len(result(file_stream_runs, n)[1]) for n in RUNS if n not in DIVERGES]
    assert any(dropped), "no query dropped a row: the stream is not late enough"
