"""The stateless path on Spark streams (headwater/sql/execute/stateless_spark.py):
a query whose operators take each row on its own runs as Spark's own projection,
and its changelog and dead letters equal the general path's (the shard operator)
on the same live file stream, micro-batch by micro-batch: rows out of order, two
rows of one event time in one batch and a third in a later one (``ver``), a late
row, a malformed line and a NULL event time; a run stopped in the middle and
resumed from its checkpoint gives the same changelog."""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.io.arrival import in_arrival_order
from headwater.io.end_of_input import InputEndedError
from headwater.model.watermarks import BoundedOutOfOrderness
from headwater.sql.execute.spark import SparkSqlQuery
from headwater.sql.plan.catalog import RAW_RECORD, SOURCE_FILE, Table
from headwater.sql.plan.stateless import why_not

#: One CSV file per micro-batch, in arrival order (watermark: 5 minutes).
FILES = [
    ["2020-04-15 08:07:00,2,A", "2020-04-15 08:07:00,3,B"],
    ["2020-04-15 08:05:00,4,C", "2020-04-15 08:07:00,5,A", "not a time,x,Z"],
    ["2020-04-15 08:30:00,1,G"],  # moves the watermark to 08:25 for the next batch
    ["2020-04-15 08:02:00,9,H", "2020-04-15 08:29:00,7,I", ",6,N"],  # H late; N no time
]
QUERY = "SELECT bidtime, price * 2 AS p, lower(item) AS item FROM Bid WHERE price > 1"


def _write(directory, files) -> str:
    os.makedirs(directory, exist_ok=True)
    paths = []
    for i, lines in enumerate(files):
        path = os.path.join(directory, f"part-{i:03d}.csv")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("bidtime,price,item\n" + "\n".join(lines) + "\n")
        paths.append(path)
    in_arrival_order(paths)
    return str(directory)


def _stream(spark, directory) -> Table:
    """A permissive CSV file stream, as a script's source (spark_source) reads one."""
    df = (
        spark.readStream.schema(
            f"bidtime TIMESTAMP, price BIGINT, item STRING, {RAW_RECORD} STRING"
        )
        .option("header", "true")
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", RAW_RECORD)
        .option("maxFilesPerTrigger", 1)
        .csv(directory)
        .selectExpr("*", f"_metadata.file_path AS {SOURCE_FILE}")
    )
    return Table(
        "Bid",
        spark=df,
        permissive=True,
        event_time="bidtime",
        watermark=BoundedOutOfOrderness(300_000),
        types={"bidtime": "TIMESTAMP", "price": "BIGINT", "item": "VARCHAR"},
    )


def _run(
    spark, directory, checkpoint, end_of_input=None, fast_path=True, text=QUERY, functions=()
) -> tuple[list, list]:
    """The query over the files there (availableNow): its changelog and dead letters,
    each batch's rows tagged with the batch id."""
    changes, letters = [], []
    tables = {"Bid": _stream(spark, directory)}
    query = SparkSqlQuery(text, tables, functions=list(functions), spark=spark, fast_path=fast_path)
    run = query.start(
        checkpoint_location=str(checkpoint),
        sink=lambda df, i: changes.append(df.toPandas().assign(batch=i)),
        dead_letter_sink=lambda df, i: letters.append(df.toPandas().assign(batch=i)),
        trigger={"availableNow": True},
        end_of_input=end_of_input,
    )
    run.awaitTermination()
    return changes, letters


def _ptimes(checkpoint) -> dict[int, pd.Timestamp]:
    """Each batch's processing time, from the offset log."""
    import json

    out = {}
    for name in os.listdir(os.path.join(checkpoint, "offsets")):
        if name.isdigit():
            with open(os.path.join(checkpoint, "offsets", name), encoding="utf-8") as fh:
                meta = json.loads(fh.read().splitlines()[1])
            out[int(name)] = pd.Timestamp(meta["batchTimestampMs"], unit="ms")
    return out


def _log(parts: list, checkpoint) -> list[tuple]:
    """The changelog's rows without ptime (a wall-clock time of each run), after
    checking every row's ptime is its batch's processing time."""
    log = pd.concat(parts, ignore_index=True)
    ptimes = _ptimes(checkpoint)
    assert (pd.to_datetime(log["ptime"]).dt.tz_localize(None) == log["batch"].map(ptimes)).all()
    keep = [c for c in log.columns if c != "ptime"]
    return sorted(tuple(str(v) for v in row) for row in log[keep].itertuples(index=False))


def _letters(parts: list) -> list[tuple]:
    log = pd.concat(parts, ignore_index=True)
    return sorted(tuple(str(v) for v in row) for row in log.itertuples(index=False))


@pytest.mark.spark
def test_stateless_path_equals_the_shard_operator(spark, tmp_path):
    data = _write(tmp_path / "bids", FILES)
    fast, fast_letters = _run(spark, data, tmp_path / "fast")
    slow, slow_letters = _run(spark, data, tmp_path / "slow", fast_path=False)
    assert _log(fast, tmp_path / "fast") == _log(slow, tmp_path / "slow")
    assert _letters(fast_letters) == _letters(slow_letters)
    letters = pd.concat(fast_letters, ignore_index=True)
    assert sorted(letters["reason"]) == ["late", "malformed", "null_event_time"]
    log = pd.concat(fast, ignore_index=True)
    # two rows of 08:07 in the first batch, a third in the second: versions 0, 1, 2
    assert sorted(log[log["item"].isin(["a", "b"])]["ver"]) == [0, 1, 2]
    assert [c for c in log.columns if c != "batch"] == [
        "bidtime",
        "p",
        "item",
        "undo",
        "ptime",
        "ver",
    ]
    assert [str(t) for t in fast[0].dtypes] == [str(t) for t in slow[0].dtypes]


def _parquet_stream(spark, directory, files) -> Table:
    """``files`` (CSV lines of FILES' form, every line well formed) as Parquet files
    in arrival order, and the stream of them (not permissive: Parquet has no
    malformed line)."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for i, lines in enumerate(files):
        rows = [line.split(",") for line in lines]
        frame = pd.DataFrame(rows, columns=["bidtime", "price", "item"])
        stamps = pd.to_datetime(frame["bidtime"]).astype("datetime64[us]")  # Spark's unit
        frame = frame.assign(bidtime=stamps, price=frame["price"].astype("int64"))
        paths.append(os.path.join(directory, f"part-{i:03d}.parquet"))
        frame.to_parquet(paths[-1], index=False)
    in_arrival_order(paths)
    df = spark.readStream.schema("bidtime TIMESTAMP, price BIGINT, item STRING")
    df = df.option("maxFilesPerTrigger", 1).parquet(str(directory))
    types = {"bidtime": "TIMESTAMP", "price": "BIGINT", "item": "VARCHAR"}
    return Table(
        "Bid", spark=df, event_time="bidtime", watermark=BoundedOutOfOrderness(300_000), types=types
    )


def _read_schema(plan: str) -> str:
    """The columns the micro-batch's file scan reads (its ``ReadSchema``)."""
    found = re.search(r"ReadSchema: struct<([^>]*)>", plan)
    assert found is not None, plan
    return found.group(1)


@hw.sql.function("BIGINT", ["VARCHAR"])
def vowels(text):
    """The vowels of each text (NULL for NULL): a pandas function, called batched."""
    return text.str.count("[aeiouAEIOU]").astype("Int64")


@hw.sql.function("BIGINT", ["VARCHAR"])
def refuses_g(text):
    if (text == "G").any():
        raise ValueError("no G")
    return text.str.len()


#: QUERY with a Python function in its projection and its filter.
CALLING = "SELECT bidtime, vowels(item) + price AS p, item FROM Bid WHERE vowels(item) >= 0"


@pytest.mark.spark
def test_a_python_function_runs_on_the_stateless_path(spark, tmp_path):
    """A query of rows on their own that calls a Python function takes the stateless
    path on Spark streams (the function a ``pandas_udf`` in the batch's statement), and
    its changelog and dead letters equal the shard operator's; a function that raises
    fails the query, naming the function."""
    data = _write(tmp_path / "bids", FILES)
    fast, fast_letters = _run(spark, data, tmp_path / "fast", text=CALLING, functions=[vowels])
    assert list((tmp_path / "fast").glob("headwater-stateless"))  # the stateless path's
    slow, slow_letters = _run(
        spark, data, tmp_path / "slow", fast_path=False, text=CALLING, functions=[vowels]
    )
    assert not list((tmp_path / "slow").glob("headwater-stateless"))
    assert _log(fast, tmp_path / "fast") == _log(slow, tmp_path / "slow")
    assert _letters(fast_letters) == _letters(slow_letters)
    log = pd.concat(fast, ignore_index=True)
    assert sorted(log["p"]) == [1, 3, 3, 4, 6, 8]  # G 1, A 2+1, B 3, C 4, A 5+1, I 7+1
    failing = CALLING.replace("vowels", "refuses_g")
    with pytest.raises(Exception, match="function 'refuses_g' raised ValueError: no G"):
        _run(spark, data, tmp_path / "failing", text=failing, functions=[refuses_g])


@pytest.mark.spark
@pytest.mark.parametrize("source", ["parquet", "permissive csv"])
def test_without_a_dead_letter_sink_a_batch_reads_only_the_querys_columns(
    spark, tmp_path, capsys, source
):
    """With no dead-letter sink, a Parquet stream is cut to the columns the query
    reads before Spark materializes the micro-batch (``price`` is not read from the
    files), and the changelog is the one a run with a dead-letter sink (every column
    carried) gives. A permissive CSV stream is not cut: Spark's reader finds a line
    malformed only in a column it reads, so the line malformed only in ``price``
    (``Q``) would be a row of the changelog."""
    wellformed = [[row for row in rows if row[0].isdigit() and ",x," not in row] for rows in FILES]
    text = "SELECT bidtime, lower(item) AS item FROM Bid"

    def stream() -> Table:
        if source == "parquet":
            return _parquet_stream(spark, tmp_path / "parquet", wellformed)
        return _stream(spark, _write(tmp_path / "csv", [*FILES, ["2020-04-15 08:31:00,x,Q"]]))

    def run(name: str, letters: bool):
        changes: list = []
        query = SparkSqlQuery(text, {"Bid": stream()}, spark=spark)
        started = query.start(
            checkpoint_location=str(tmp_path / name),
            sink=lambda df, i: changes.append(df.toPandas().assign(batch=i)),
            dead_letter_sink=(lambda df, i: df.count()) if letters else None,
            trigger={"availableNow": True},
            end_of_input="never",
        )
        started.awaitTermination()
        capsys.readouterr()
        started.explain()
        return changes, _read_schema(capsys.readouterr().out)

    cut, read = run("cut", letters=False)
    whole, read_whole = run("whole", letters=True)
    assert _log(cut, tmp_path / "cut") == _log(whole, tmp_path / "whole")
    items = set(pd.concat(cut, ignore_index=True)["item"])
    assert "q" not in items and "g" in items
    assert "bidtime" in read and "item" in read and "price" in read_whole
    assert ("price" in read) == (source != "parquet")


def _micro_batch_plan(spark, data, checkpoint, capsys, fast_path: bool) -> str:
    """The physical plan of the query's last micro-batch over the files there."""
    query = SparkSqlQuery(QUERY, {"Bid": _stream(spark, data)}, spark=spark, fast_path=fast_path)
    run = query.start(
        checkpoint_location=str(checkpoint),
        sink=lambda df, i: df.count(),
        trigger={"availableNow": True},
        end_of_input="never",
    )
    run.awaitTermination()
    capsys.readouterr()
    run.explain()
    return capsys.readouterr().out


@pytest.mark.spark
def test_stateless_plan_has_no_state(spark, tmp_path, capsys):
    data = _write(tmp_path / "bids", FILES[:1])
    plan = _micro_batch_plan(spark, data, tmp_path / "cp", capsys, fast_path=True)
    assert "EventTimeWatermark" in plan and "ReadSchema" in plan  # the micro-batch's plan
    assert "TransformWithState" not in plan and "transformWithState" not in plan
    old = _micro_batch_plan(spark, data, tmp_path / "old", capsys, fast_path=False)
    assert "TransformWithState" in old  # the check can fail


@pytest.mark.spark
def test_restart_from_checkpoint_numbers_as_one_run(spark, tmp_path):
    whole = _write(tmp_path / "whole", FILES)
    once, once_letters = _run(spark, whole, tmp_path / "once")
    parts = tmp_path / "parts"
    _write(parts, FILES[:2])
    first, first_letters = _run(spark, str(parts), tmp_path / "twice", end_of_input=False)
    _write(parts, FILES)  # the same two files, then two more
    in_arrival_order([os.path.join(parts, f"part-{i:03d}.csv") for i in range(len(FILES))])
    second, second_letters = _run(spark, str(parts), tmp_path / "twice")
    assert _log(first + second, tmp_path / "twice") == _log(once, tmp_path / "once")
    assert len(_letters(first_letters + second_letters)) == len(_letters(once_letters))
    with pytest.raises(InputEndedError):  # the run ended its input: every row would be late
        _run(spark, whole, tmp_path / "once")


BIDS = pd.DataFrame({"bidtime": pd.to_datetime(["2020-04-15 08:07"]), "price": [2], "item": ["A"]})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("SELECT bidtime, price FROM Bid WHERE price > 1", None),
        ("SELECT * FROM Bid", None),
        ("SELECT item, COUNT(*) AS n FROM Bid GROUP BY item", "an operator combines rows"),
        ("SELECT bidtime, price FROM Bid EMIT AFTER WATERMARK", "its changes wait"),
        (
            "SELECT wstart, price FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime),"
            " dur => INTERVAL '10' MINUTE)",
            "windowing table function",
        ),
        ("SELECT B.* FROM Bid B", "qualified *"),
    ],
)
def test_which_queries_take_the_stateless_path(text, reason):
    stream = hw.from_pandas(
        BIDS, event_time="bidtime", arrival_time="bidtime", watermark="1 minute"
    )
    query = hw.sql(text, {"Bid": stream})
    found = why_not(query.plan)
    assert found is None if reason is None else reason in (found or "")
    explained = query.explain()
    if reason is None:
        assert "on Spark streams: stateless: Spark's own projection" in explained
    else:
        assert f"because {found}" in explained
    switched_off = hw.sql(text, {"Bid": stream}, fast_path=False).explain()
    assert (
        "shard operator (transformWithStateInPandas, state store) because the fast paths"
        " were switched off for this query" in switched_off
    )


#: NEXMark queries that take the stateless path, over the functions the Spark SQL
#: translation must give DuckDB's values for (DECIMAL, DATE_FORMAT, REGEXP_EXTRACT,
#: SPLIT_INDEX).
NEXMARK = ["q1", "q10", "q21", "q22"]


def _sink_table(sink, name: str) -> list[tuple]:
    import duckdb

    with duckdb.connect(str(sink)) as con:
        frame = con.execute(f"SELECT * FROM nexmark_{name}").df()
    # the row hash and the batch that wrote it depend on the runner's micro-batches
    frame = frame.drop(columns=["__row", "batch_id"])
    for column in frame.columns:  # Spark's timestamps reach the sink in UTC, the replay's naive
        if isinstance(frame[column].dtype, pd.DatetimeTZDtype):
            frame[column] = frame[column].dt.tz_convert(None)
    return sorted(tuple(str(v) for v in row) for row in frame.itertuples(index=False))


@pytest.mark.spark
def test_nexmark_row_queries_on_file_streams_equal_the_local_runner(spark, tmp_path):
    """Each query's table through the stateless path over the generator's Parquet file
    streams (a few micro-batches) equals the local runner's over the replay."""
    from headwater.bench import nexmark as bench
    from headwater.sql.script import run_script

    args = bench.parse_args(["--events", "600", "--events-per-file", "150", "--runner", "spark"])
    _, data = bench.prepare(args, tmp_path, ["headwater"])
    local = bench.parse_args(["--events", "600", "--runner", "local"])
    for name in NEXMARK:
        text = bench.script(name, args, data, tmp_path / f"{name}-spark.duckdb")
        list(run_script(text, runner="spark", checkpoint=str(tmp_path / f"cp-{name}")))
        assert list((tmp_path / f"cp-{name}").glob("*/headwater-stateless")), name  # its path
        mine = _sink_table(tmp_path / f"{name}-spark.duckdb", name)
        text = bench.script(name, local, data, tmp_path / f"{name}-local.duckdb")
        list(run_script(text, runner="local"))
        assert mine == _sink_table(tmp_path / f"{name}-local.duckdb", name), name
        assert len(mine) > 10, name


@pytest.mark.spark
def test_versions_numbered_on_the_driver_equal_sparks_window(spark):
    """``numbered`` (ver on the collected batch) against the window it replaces:
    ties of event time ordered by every column, nulls and NaN last, the counts of
    earlier batches added, an event time with no earlier count from 0."""
    from decimal import Decimal

    import pyarrow as pa
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, LongType

    from headwater.sql.execute.stateless_spark import Versions, numbered, ranks_on_driver
    from headwater.sql.plan.stateless import EVENT_TIME

    schema = f"s STRING, x DOUBLE, d DECIMAL(10, 2), n BIGINT, {EVENT_TIME} BIGINT"
    data = [
        ("b", 1.0, Decimal("1.50"), 3, 10),
        ("a", None, Decimal("2.00"), 1, 10),
        (None, 0.5, None, 2, 10),
        ("a", float("nan"), Decimal("2.00"), None, 10),
        ("a", 2.0, Decimal("-1.00"), 5, 10),
        ("é", 1.0, Decimal("0.10"), 7, 20),
        ("z", 1.0, Decimal("0.10"), 6, 20),
        ("a", 1.0, Decimal("0.10"), None, 30),
        ("a", 1.0, Decimal("0.10"), 4, 30),
    ]
    df = spark.createDataFrame(data, schema)
    columns = ["s", "x", "d", "n"]
    assert ranks_on_driver([f.dataType for f in df.schema.fields])
    prior = Versions({10: 2, 30: 5, 40: 1})
    known = F.create_map(*[F.lit(v) for kv in prior.counts.items() for v in kv])
    order = [F.col(c).asc_nulls_last() for c in columns]
    rank = F.row_number().over(Window.partitionBy(EVENT_TIME).orderBy(*order)) - 1
    expected = df.select("*", (rank + F.coalesce(known[F.col(EVENT_TIME)], F.lit(0))).alias("ver"))
    table = df.toArrow()
    actual = table.append_column("ver", numbered(table, columns, prior))
    key = [*columns, EVENT_TIME, "ver"]

    def rows(t: pa.Table) -> list[tuple]:
        return sorted(tuple(repr(v) for v in r.values()) for r in t.select(key).to_pylist())

    assert rows(actual) == rows(expected.toArrow())
    assert sorted(actual["ver"].to_pylist()) == [0, 1, 2, 3, 4, 5, 5, 6, 6]
    assert not ranks_on_driver([LongType(), ArrayType(LongType())])  # Spark's window then


@pytest.mark.spark
def test_a_relation_sink_takes_the_batch_as_arrow(spark, tmp_path):
    """A sink that takes Arrow (``takes_arrow``: RelationSink) is given the collected
    changelog as is, and its table holds what the DataFrame given to another sink
    holds: every change's row once."""
    import pyarrow as pa

    from headwater.io.sinks.relation import RelationSink

    class Recording(RelationSink):
        given: list = []

        def write(self, batch, batch_id: int) -> bool:
            self.given.append(type(batch))
            return super().write(batch, batch_id)

    data = _write(tmp_path / "bids", FILES)
    table = Recording(str(tmp_path / "out.duckdb"), table="bids")
    query = SparkSqlQuery(QUERY, {"Bid": _stream(spark, data)}, spark=spark)
    query.start(
        checkpoint_location=str(tmp_path / "cp"), sink=table, trigger={"availableNow": True}
    ).awaitTermination()
    changes, _ = _run(spark, data, tmp_path / "frames")
    log = pd.concat(changes, ignore_index=True)
    expected = log[["bidtime", "p", "item"]]
    assert Recording.given and set(Recording.given) == {pa.Table}
    assert len(expected) == 5  # A, B, C, A (08:07 twice), I: the check can fail

    def rows(frame: pd.DataFrame) -> list[tuple]:
        return sorted(tuple(str(v) for v in r) for r in frame.itertuples(index=False))

    read = table.read()
    read["bidtime"] = pd.to_datetime(read["bidtime"]).dt.tz_localize(None)
    expected = expected.assign(bidtime=pd.to_datetime(expected["bidtime"]).dt.tz_localize(None))
    assert rows(read) == rows(expected)


class _Discarding:
    """A sink that discards (``discards``: the stateless path hands it its changes
    uncollected, as to a blackhole), here recording what each batch id was given
    last."""

    discards = True

    def __init__(self) -> None:
        self.batches: dict[int, pd.DataFrame] = {}

    def __call__(self, df, batch_id: int) -> None:
        self.batches[batch_id] = df.toPandas().assign(batch=batch_id)


@pytest.mark.spark
def test_a_discarding_sink_gets_every_change_without_ver(spark, tmp_path):
    """A discarding sink (a blackhole) reads no column: it is handed each batch's
    changes uncollected and without ``ver`` (no window numbers them, no counts are
    kept) and ``ptime`` (the batch's constant), and they are the collected path's
    changelog less those, batch by batch.
    A later run from its checkpoint into a sink that reads ``ver`` is refused, with
    the checkpoint named: the changes before were never counted."""
    parts = tmp_path / "bids"
    data = _write(parts, FILES[:2])
    hole = _Discarding()
    query = SparkSqlQuery(QUERY, {"Bid": _stream(spark, data)}, spark=spark)
    query.start(
        checkpoint_location=str(tmp_path / "hole"),
        sink=hole,
        trigger={"availableNow": True},
        end_of_input=False,
    ).awaitTermination()
    collected, _ = _run(spark, data, tmp_path / "collected", end_of_input=False)
    assert len(hole.batches) == 2
    assert all("ver" not in b and "ptime" not in b for b in hole.batches.values())
    less_ver = [part.drop(columns="ver") for part in collected]
    discarded = pd.concat(list(hole.batches.values()), ignore_index=True)
    assert sorted(tuple(str(v) for v in row) for row in discarded.itertuples(index=False)) == (
        _log(less_ver, tmp_path / "collected")
    )
    _write(parts, FILES)
    in_arrival_order([os.path.join(parts, f"part-{i:03d}.csv") for i in range(len(FILES))])
    with pytest.raises(Exception, match="reads no `ver`") as refused:
        _run(spark, str(parts), tmp_path / "hole")
    assert str(tmp_path / "hole") in str(refused.value)


def test_a_batch_is_one_statement_over_its_view(spark):
    """``batch_sql``: the rows on time of the batch's view (not late by the watermark
    and the allowed lateness, a NULL event time left out), the stream's columns by
    their union names (timestamps from µs), the query over them by position, cast to
    the sink's types, with ``undo``; names with backticks and blanks quoted."""
    from pyspark.sql.types import LongType, TimestampType

    from headwater.sql.execute.stateless_spark import (
        BATCH_VIEW,
        StatelessQuery,
        batch_sql,
        sql_type,
    )

    types = [TimestampType(), LongType()]
    query = StatelessQuery(
        name="Bid t",
        text="SELECT `ts col`, `p``x` * 2, __hw_et FROM `Bid t` WHERE `p``x` > 4",
        view=[("ts col", "__t0_0", True), ("p`x", "__t0_1", False)],
        columns=["when", "p`x 2"],
        types=types,
        lateness=10,
        delay=0,
        permissive=False,
        sql_types=tuple(sql_type(spark, t) for t in types),
    )
    schema = "__src long, __t0_0 long, __t0_1 int, ts long"
    # the union's times in µs (one with a µs fraction), the event time ``ts`` in ms
    rows = [(0, 10**6, 5, 1_000), (0, 2_000_007, 6, 2_000), (0, 3 * 10**6, 7, None)]
    rows.append((0, 4 * 10**6, 3, 4_000))
    spark.createDataFrame(rows, schema).createOrReplaceTempView(BATCH_VIEW)
    late = spark.sql(batch_sql(query, 1_500, changelog=True)).toPandas()  # 1,000 + 1 + 10 <= 1,500
    assert list(late.columns) == ["when", "p`x 2", "undo", "__hw_et"]
    assert late.to_dict("records") == [
        {"when": pd.Timestamp(2_000_007, unit="us"), "p`x 2": 12, "undo": False, "__hw_et": 2_000}
    ]
    edge = spark.sql(batch_sql(query, 1_010)).collect()  # 1,000 + 1 + 10 > 1,010: on time
    assert sorted(r["__hw_et"] for r in edge) == [1_000, 2_000]
    discarded = spark.sql(batch_sql(query, 1_500, changelog=True, event_time=False))
    assert discarded.columns == ["when", "p`x 2", "undo"]
    on_time = spark.sql(batch_sql(query, None))
    assert on_time.schema["p`x 2"].dataType == LongType()  # cast from the query's int
    assert sorted(r["__hw_et"] for r in on_time.collect()) == [1_000, 2_000]


def test_a_later_batch_compiles_no_code(spark, tmp_path):
    """Each batch's statement generates the code of the batch before it, though its
    watermark differs (a DECIMAL literal, passed to the code by reference): Spark
    compiles it once, not at every micro-batch (where an integral literal made
    every batch compile twice, tens of milliseconds of a small batch)."""
    from pyspark.sql.types import LongType

    from headwater.bench.latency import compilations
    from headwater.sql.execute.stateless_spark import (
        BATCH_VIEW,
        StatelessQuery,
        batch_sql,
        sql_type,
    )

    query = StatelessQuery(
        name="Bid",
        text="SELECT p * 3, __hw_et FROM Bid WHERE p % 2 = 1",
        view=[("p", "__t0_0", False)],
        columns=["p3"],
        types=[LongType()],
        lateness=0,
        delay=0,
        permissive=False,
        sql_types=(sql_type(spark, LongType()),),
    )
    seen = []
    for batch in range(4):  # each batch's rows in a file of its own, as a file stream's
        p = np.arange(40, dtype=np.int64)
        rows = pd.DataFrame({"__src": 0, "__t0_0": p, "ts": 1_000 * batch + p})
        rows.to_parquet(tmp_path / f"{batch}.parquet")
        spark.read.parquet(str(tmp_path / f"{batch}.parquet")).createOrReplaceTempView(BATCH_VIEW)
        before = compilations(spark)
        out = spark.sql(batch_sql(query, 1_000 * batch + 7, changelog=True))
        seen.append(sorted(r["p3"] for r in out.collect()))
        if batch:  # the first compiles the statement's code
            assert compilations(spark) == before, f"batch {batch} compiled code"
    # each batch the rows past its watermark (ts + 1 > watermark): p of 7..39, odd
    assert seen == [[3 * p for p in range(7, 40) if p % 2]] * 4


def test_ptime_is_added_to_the_collected_changes():
    """``with_ptime``: the batch's processing time after ``undo``, as Spark's
    ``toArrow`` gives a timestamp (microseconds, UTC, not null), in the schema too."""
    import pyarrow as pa
    from pyspark.sql.types import BooleanType, LongType, StructField, StructType

    from headwater.sql.execute.stateless_spark import with_ptime, with_ptime_field

    table = pa.table({"p": [1, 2], "undo": [False, False], "ver": [0, 1]})
    out = with_ptime(table, 1_700_000_000_123)
    assert out.column_names == ["p", "undo", "ptime", "ver"]
    assert out.schema.field("ptime") == pa.field("ptime", pa.timestamp("us", tz="UTC"), False)
    assert out["ptime"].to_pylist() == [pd.Timestamp(1_700_000_000_123, unit="ms", tz="UTC")] * 2
    fields = [StructField("p", LongType()), StructField("undo", BooleanType(), False)]
    schema = with_ptime_field(StructType([*fields, StructField("ver", LongType())]))
    assert [f.name for f in schema.fields] == ["p", "undo", "ptime", "ver"]
    assert not schema["ptime"].nullable


def test_columns_read_by_a_stateless_query():
    """``columns_read``: the stream's columns named anywhere in the query, ``*``
    spelled out, names matched without case."""
    from headwater.sql.plan.stateless import columns_read

    stream = hw.from_pandas(
        BIDS.assign(Extra=["x"]), event_time="bidtime", arrival_time="bidtime", watermark="1 minute"
    )

    def read(text: str) -> set[str]:
        return set(columns_read(hw.sql(text, {"Bid": stream}).plan))

    assert read("SELECT price * 2 AS p FROM Bid WHERE price > 1") == {"price"}
    assert read("SELECT upper(ITEM) FROM Bid WHERE EXTRA <> ''") == {"item", "Extra"}
    assert read("SELECT * FROM Bid") == {"bidtime", "price", "item", "Extra"}
    assert read("SELECT bidtime, price FROM Bid WHERE item IS NULL") == {"bidtime", "price", "item"}
