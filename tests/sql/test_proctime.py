"""PROCTIME() and lookup joins (headwater.sql.plan.proctime), against DuckDB.

A random replay (rows out of order in event time, arriving over a minute in
steps of a few seconds). A row's PROCTIME() is the processing time of the step
that delivers it, so the bounded query over the rows arrived by a processing
time ``t``, each with its arrival time as ``p_time``, is what the streaming
table view as of ``t`` must equal, at several ``t``. Every other use of
PROCTIME() or FOR SYSTEM_TIME AS OF is refused before it runs, positioned.
"""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pandas as pd
import pytest
from sql_helpers import assert_same_rows, rows

from headwater.model.watermarks import BoundedOutOfOrderness
from headwater.sql import read_replay, sql
from headwater.sql.errors import SqlError

T0 = 1_700_000_000_000  # epoch ms, a multiple of 10 s
SUB = "(SELECT *, PROCTIME() AS p_time FROM s)"


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """``(tables, rows)``: the stream ``s`` (k, v, ts) as a replay, a bounded table
    ``d`` (k, name), and the replayed rows with their arrival ``ptime`` (ms)."""
    rng = np.random.default_rng(16)
    n = 60
    ptime = T0 + np.sort(rng.integers(0, 10, n)) * 4_000 + 1_000  # steps 4 s apart
    data = pd.DataFrame(
        {
            "k": rng.integers(0, 5, n),
            "v": rng.integers(1, 100, n),
            "ts": ptime - rng.integers(0, 30_000, n),  # up to 30 s late in event time
            "ptime": ptime,
        }
    )
    path = tmp_path_factory.mktemp("proctime") / "s.jsonl"
    lines = []
    for row in data.itertuples(index=False):
        ts = pd.Timestamp(int(row.ts), unit="ms").isoformat()
        record = {"k": int(row.k), "v": int(row.v), "ts": ts}
        lines.append({"ptime": int(row.ptime), "row": record})
        lines.append({"ptime": int(row.ptime), "watermark": int(row.ptime) - 30_000})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    side = pd.DataFrame({"k": [0, 1, 2, 3], "name": ["zero", "one", "two", "three"]})
    tables = {"s": read_replay(path, "s", "ts"), "d": side}
    return tables, data


def bounded(query: str, data: pd.DataFrame, as_of: int, side: pd.DataFrame) -> pd.DataFrame:
    """``query`` in DuckDB over the rows arrived by ``as_of`` (``B``, with their
    arrival time as ``p_time``), the bounded table ``d`` and the processing-time
    clock (``clock.t``: ``as_of``, infinity at the end of input)."""
    end = as_of >= data["ptime"].max()
    arrived = data[data["ptime"] <= as_of]
    b = arrived.assign(
        ts=pd.to_datetime(arrived["ts"], unit="ms"),
        p_time=pd.to_datetime(arrived["ptime"], unit="ms"),
    ).drop(columns=["ptime"])
    with duckdb.connect() as con:
        con.register("B", b)
        con.register("d", side)
        t = "'infinity'::TIMESTAMP" if end else f"epoch_ms({as_of})"
        con.execute(f"CREATE TABLE clock AS SELECT {t} AS t")
        return con.execute(query).df()


#: (headwater's query, DuckDB's bounded query over B and d)
CASES = {
    "tumble": (
        f"""SELECT k, count(*) AS n, sum(v) AS total, window_start, window_end
        FROM TABLE(TUMBLE(TABLE {SUB}, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
        GROUP BY k, window_start, window_end""",
        """SELECT k, count(*), sum(v), time_bucket(INTERVAL 10 SECOND, p_time) AS ws,
            ws + INTERVAL 10 SECOND FROM B GROUP BY k, ws""",
    ),
    "tumble after watermark": (
        # a processing-time window fires when the clock passes its end, every
        # window at the end of input
        f"""SELECT k, count(*) AS n, window_start, window_end
        FROM TABLE(TUMBLE(TABLE {SUB}, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
        GROUP BY k, window_start, window_end EMIT AFTER WATERMARK""",
        """SELECT k, count(*), time_bucket(INTERVAL 10 SECOND, p_time) AS ws,
            ws + INTERVAL 10 SECOND AS we FROM B GROUP BY k, ws
            HAVING we <= (SELECT t FROM clock)""",
    ),
    "p_time itself": (
        f"SELECT k, v, p_time FROM {SUB} AS X WHERE v > 50",
        "SELECT k, v, p_time FROM B WHERE v > 50",
    ),
    "lookup join": (
        f"""SELECT B.k, B.v, B.ts, S.name FROM {SUB} AS B
        JOIN d FOR SYSTEM_TIME AS OF B.p_time AS S ON B.k = S.k""",
        "SELECT B.k, B.v, B.ts, S.name FROM B JOIN d AS S ON B.k = S.k",
    ),
    "left lookup join": (
        f"""SELECT B.k, B.v, S.name FROM {SUB} AS B
        LEFT JOIN d FOR SYSTEM_TIME AS OF B.p_time AS S ON B.k = S.k""",
        "SELECT B.k, B.v, S.name FROM B LEFT JOIN d AS S ON B.k = S.k",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_table_view_is_the_bounded_query_by_arrival(replay, case):
    tables, data = replay
    query, reference = CASES[case]
    run = sql(query, tables)
    steps = np.unique(data["ptime"])
    for as_of in (int(steps[len(steps) // 3]), int(steps[2 * len(steps) // 3]), int(steps[-1])):
        expected = bounded(reference, data, as_of, tables["d"])
        actual = run.to_pandas(as_of=as_of)
        assert len(expected) or as_of != steps[-1], f"{case}: the reference is empty"
        assert_same_rows(rows(actual), rows(expected), ordered=False, what=f"{case} @ {as_of}")
    assert not len(run.dead_letters()), "nothing is late in processing time"


REFUSED = {
    "PROCTIME() in a plain select": "SELECT k, PROCTIME() AS p FROM s",
    "PROCTIME() in WHERE": f"SELECT k FROM {SUB} AS B WHERE PROCTIME() > B.p_time",
    "PROCTIME() with a filter": "SELECT * FROM (SELECT *, PROCTIME() AS p FROM s WHERE v > 1)",
    "PROCTIME() of a bounded table": "SELECT * FROM (SELECT *, PROCTIME() AS p FROM d)",
    "AS OF an event time": f"""SELECT B.k FROM {SUB} AS B
        JOIN d FOR SYSTEM_TIME AS OF B.ts AS S ON B.k = S.k""",
    "AS OF against a stream": f"""SELECT B.k FROM {SUB} AS B
        JOIN s FOR SYSTEM_TIME AS OF B.p_time AS S ON B.k = S.k""",
    "a RIGHT lookup join": f"""SELECT B.k FROM {SUB} AS B
        RIGHT JOIN d FOR SYSTEM_TIME AS OF B.p_time AS S ON B.k = S.k""",
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_cannot_be_exact_is_refused_positioned(replay, case):
    with pytest.raises(SqlError) as info:
        sql(REFUSED[case], replay[0])
    assert info.value.line is not None and info.value.col is not None, str(info.value)
    assert info.value.hint, str(info.value)


# ------------------------------------------------------------------ a live Spark stream


def _local(batch) -> pd.DataFrame:
    return batch if isinstance(batch, pd.DataFrame) else batch.toPandas()


def _final_table(batches: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    """The table a changelog leaves: each row's additions less its retractions."""
    log = pd.concat(batches, ignore_index=True)
    sign = np.where(log["undo"].astype(bool), -1, 1)
    net = log[columns].assign(__n=sign).groupby(columns, dropna=False)["__n"].sum()
    return net[net > 0].reset_index()[columns]


@pytest.mark.spark
@pytest.mark.slow
def test_a_live_spark_stream_windows_by_the_time_its_micro_batch_reads_a_row(spark, tmp_path):
    """Three files, one micro-batch each: every row is counted once (nothing is late
    in processing time), in the window of its micro-batch's time."""
    from headwater.io.arrival import in_arrival_order
    from headwater.sql.execute.spark import SparkSqlQuery
    from headwater.sql.plan.catalog import Table

    files = tmp_path / "s"
    files.mkdir()
    data = pd.DataFrame({"k": [0, 1, 0, 1, 1, 0], "v": [1, 2, 3, 4, 5, 6]})
    paths = []
    for i in range(3):
        paths.append(str(files / f"part-{i}.parquet"))
        part = data.iloc[2 * i : 2 * i + 2].assign(ts=pd.Timestamp("2020-04-15 08:00"))
        part.to_parquet(paths[-1], coerce_timestamps="us")
    in_arrival_order(paths)
    stream = spark.readStream.schema("k BIGINT, v BIGINT, ts TIMESTAMP")
    df = stream.option("maxFilesPerTrigger", 1).parquet(str(files))
    table = Table("s", spark=df, event_time="ts", watermark=BoundedOutOfOrderness(0))
    query = f"""SELECT k, count(*) AS n, sum(v) AS total, min(p_time) AS lo,
            max(p_time) AS hi, window_start, window_end
        FROM TABLE(TUMBLE(TABLE {SUB}, DESCRIPTOR(p_time), INTERVAL '1' SECOND))
        GROUP BY k, window_start, window_end"""
    batches: list[pd.DataFrame] = []
    letters: list[pd.DataFrame] = []
    run = SparkSqlQuery(query, {"s": table}, spark=spark)
    run.write(
        lambda batch, _: batches.append(_local(batch)),
        dead_letter_sink=lambda batch, _: letters.append(_local(batch)),
        checkpoint=str(tmp_path / "checkpoint"),
    )
    final = _final_table(batches, ["k", "n", "total", "lo", "hi", "window_start", "window_end"])
    assert not any(len(b) for b in letters), "nothing is late in processing time"
    per_key = final.groupby("k")[["n", "total"]].sum()
    assert per_key.to_dict("index") == {0: {"n": 3, "total": 10}, 1: {"n": 3, "total": 11}}
    lo, hi = pd.to_datetime(final["lo"]), pd.to_datetime(final["hi"])
    start, end = pd.to_datetime(final["window_start"]), pd.to_datetime(final["window_end"])
    assert ((start <= lo) & (hi < end)).all(), final
