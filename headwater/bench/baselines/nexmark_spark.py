"""Spark's own Structured Streaming for the NEXMark queries: the Spark baseline.

Each query written by hand with Spark's DataFrame API over the Parquet file streams of
the generator (person, auction, bid), with Flink's meaning (the final table of the
query over all the events), and run availableNow. A query whose result only appends
runs in append mode; an aggregate without an event-time window in complete mode (its
last micro-batch is the final table). A query Spark's streaming cannot express, or that
is not written yet, has its reason in :data:`NATIVE_MISSING`.

The event-time windowed queries (q5, q7, q8, q11) read their streams with Flink's
watermark (4 s) and chain stateful operators in append mode, whose rows come out only
once the watermark passes their window. Spark has no end of input for such a query (an
availableNow run stops with the last windows still open), so those queries also read an
end-of-stream marker per table (:func:`write_end_of_stream`): one row, in a file read
after every other, whose event time passes every window; it is filtered out right after
the watermark, so it only moves the watermark and closes the windows.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TABLES = ("person", "auction", "bid")
_BID = ["auction", "bidder", "price", "dateTime", "extra"]
_HOT = ("apple", "google", "facebook", "baidu")
#: Flink's watermark of the NEXMark sources (ddl.sql): the event time less 4 s.
WATERMARK_DELAY = "4 seconds"
#: The end-of-stream marker's event time: past every window of the queries.
END_OF_STREAM = dt.datetime(9999, 1, 1)
#: The marker of table t is the one file of DIR/t-end/ (read with DIR/t).
END_SUFFIX = "-end"

#: The queries written (their expressions need a running SparkSession to build).
WRITTEN = (
    "q0",
    "q1",
    "q2",
    "q3",
    "q5",
    "q7",
    "q8",
    "q10",
    "q11",
    "q14",
    "q17",
    "q20",
    "q23",
    "q21",
    "q22",
)
#: Why Spark's own streaming query is not given for a query.
NATIVE_MISSING = {
    "q4": "not expressible: an aggregate of an aggregate without event-time windows "
    "(Spark chains streaming aggregations only on event-time windows, in append mode)",
    "q6": "not expressible: Spark streaming has no OVER windows (non-time-based windows)",
    "q9": "not expressible: Spark streaming has no ROW_NUMBER over a stream",
    "q12": "not expressible: Spark streaming has no processing-time windows",
    "q13": "not expressible: Spark streaming has no processing-time temporal join",
    "q15": "not expressible: Spark streaming has no COUNT(DISTINCT) (approximate only)",
    "q16": "not expressible: Spark streaming has no COUNT(DISTINCT) (approximate only)",
    "q18": "not expressible: Spark streaming has no ROW_NUMBER over a stream",
    "q19": "not expressible: Spark streaming has no ROW_NUMBER over a stream",
}


@dataclass(frozen=True)
class NativeQuery:
    """A query as Spark's DataFrames: the plan over the streams and its output mode."""

    plan: Callable[[dict[str, Any]], Any]
    mode: str = "append"
    #: reads its streams with Flink's watermark and the end-of-stream markers
    windowed: bool = False


def _rank_counts(F) -> list[Any]:
    price = F.col("price")
    bands = [price < 10_000, (price >= 10_000) & (price < 1_000_000), price >= 1_000_000]
    return [F.count(F.when(b, 1)).alias(f"rank{i}_bids") for i, b in enumerate(bands, 1)]


def native_queries(F) -> dict[str, NativeQuery]:
    """The hand-written queries (``F``: pyspark.sql.functions, imported by the caller)."""
    return {**_stateless_and_joins(F), **windowed_queries(F), **regular_joins(F)}


def _stateless_and_joins(F) -> dict[str, NativeQuery]:
    """q0-q3, q10, q14, q17, q21, q22."""
    euro = (F.lit(0.908) * F.col("price")).cast("decimal(23,3)")
    hour = F.hour("dateTime")
    day = F.date_format("dateTime", "yyyy-MM-dd")
    parts = F.split("url", "/")
    extracted = F.regexp_extract("url", "(&|^)channel_id=([^&]*)", 2)
    # Flink's REGEXP_EXTRACT is NULL when the pattern does not match; Spark's is ''.
    channel_id = F.when(F.col("url").rlike("(&|^)channel_id="), extracted)
    hot = F.lower("channel").isin(*_HOT)
    return {
        "q0": NativeQuery(lambda s: s["bid"].select(*_BID)),
        "q1": NativeQuery(
            lambda s: s["bid"].select("auction", "bidder", euro.alias("price"), *_BID[3:])
        ),
        "q2": NativeQuery(
            lambda s: s["bid"].where(F.col("auction") % 123 == 0).select("auction", "price")
        ),
        "q3": NativeQuery(
            lambda s: (
                s["auction"]
                .where(F.col("category") == 10)
                .join(
                    s["person"].where(F.col("state").isin("OR", "ID", "CA")),
                    F.col("seller") == s["person"]["id"],
                )
                .select("name", "city", "state", s["auction"]["id"])
            )
        ),
        "q10": NativeQuery(
            lambda s: s["bid"].select(
                *_BID,
                day.alias("dt"),
                F.date_format("dateTime", "HH:mm").alias("hm"),
            )
        ),
        "q14": NativeQuery(
            lambda s: (
                s["bid"]
                .where((euro > 1_000_000) & (euro < 50_000_000))
                .select(
                    "auction",
                    "bidder",
                    euro.alias("price"),
                    F.when((hour >= 8) & (hour <= 18), "dayTime")
                    .when((hour <= 6) | (hour >= 20), "nightTime")
                    .otherwise("otherTime")
                    .alias("bidTimeType"),
                    "dateTime",
                    "extra",
                    # count_char(extra, 'c'): the nexmark jar's Java UDF, as an expression
                    (F.length("extra") - F.length(F.regexp_replace("extra", "c", ""))).alias(
                        "c_counts"
                    ),
                )
            )
        ),
        "q17": NativeQuery(
            lambda s: (
                s["bid"]
                .groupBy("auction", day.alias("day"))
                .agg(
                    F.count(F.lit(1)).alias("total_bids"),
                    *_rank_counts(F),
                    F.min("price").alias("min_price"),
                    F.max("price").alias("max_price"),
                    # Flink's AVG of a BIGINT is a BIGINT (truncated)
                    F.avg("price").cast("bigint").alias("avg_price"),
                    F.sum("price").alias("sum_price"),
                )
            ),
            mode="complete",
        ),
        "q21": NativeQuery(
            lambda s: (
                s["bid"]
                .where(channel_id.isNotNull() | hot)
                .select(
                    "auction",
                    "bidder",
                    "price",
                    "channel",
                    F.when(F.lower("channel") == "apple", "0")
                    .when(F.lower("channel") == "google", "1")
                    .when(F.lower("channel") == "facebook", "2")
                    .when(F.lower("channel") == "baidu", "3")
                    .otherwise(channel_id)
                    .alias("channel_id"),
                )
            )
        ),
        "q22": NativeQuery(
            lambda s: s["bid"].select(
                "auction",
                "bidder",
                "price",
                "channel",
                *(F.try_element_at(parts, F.lit(i + 1)).alias(f"dir{i - 2}") for i in (3, 4, 5)),
            )
        ),
    }


def windowed_queries(F) -> dict[str, NativeQuery]:
    """The queries over event-time windows (append mode, chained stateful operators)."""
    return {
        "q5": NativeQuery(lambda s: _hot_items(s["bid"], F), windowed=True),
        "q7": NativeQuery(lambda s: _highest_bids(s["bid"], F), windowed=True),
        "q8": NativeQuery(lambda s: _new_users(s["person"], s["auction"], F), windowed=True),
        "q11": NativeQuery(
            lambda s: (
                s["bid"]
                .groupBy("bidder", F.session_window("dateTime", "10 seconds").alias("session"))
                .agg(F.count(F.lit(1)).alias("bid_count"))
                .select("bidder", "bid_count", "session.start", "session.end")
            ),
            windowed=True,
        ),
    }


def regular_joins(F) -> dict[str, NativeQuery]:
    """q20 and q23: joins of streams with no time bound (every row stays in state)."""
    return {
        "q20": NativeQuery(lambda s: _bids_of_category(s["bid"], s["auction"], F)),
        "q23": NativeQuery(lambda s: _bids_of_sellers(s["bid"], s["person"], s["auction"], F)),
    }


def _hot_items(bid, F):
    """q5: the auctions with the most bids of each 10 s hop window (every 2 s)."""
    counts = bid.groupBy(F.window("dateTime", "10 seconds", "2 seconds"), "auction").agg(
        F.count(F.lit(1)).alias("num")
    )
    most = counts.groupBy("window").agg(F.max("num").alias("maxn"))
    c, m = counts.alias("C"), most.alias("M")
    on = (F.col("C.window") == F.col("M.window")) & (F.col("C.num") >= F.col("M.maxn"))
    return c.join(m, on).select("C.auction", "C.num")


def _highest_bids(bid, F):
    """q7: the bids at the highest price of their 10 s tumbling window (Flink's BETWEEN:
    from the window's end less 10 s to its end, both included)."""
    highest = bid.groupBy(F.window("dateTime", "10 seconds")).agg(F.max("price").alias("maxprice"))
    # window_time (the window's end less 1 µs) carries the watermark to the join
    end = F.window_time("window") + F.expr("INTERVAL 1 MICROSECOND")
    b, h = bid.alias("B"), highest.select(end.alias("wend"), "maxprice").alias("H")
    t = F.col("B.dateTime")
    on = (
        (F.col("B.price") == F.col("H.maxprice"))
        & (t >= F.col("H.wend") - F.expr("INTERVAL 10 SECONDS"))
        & (t <= F.col("H.wend"))
    )
    return b.join(h, on).select("B.auction", "B.price", "B.bidder", "B.dateTime", "B.extra")


def _new_users(person, auction, F):
    """q8: the people who opened an auction in the 10 s tumbling window they registered in."""
    ten = F.window("dateTime", "10 seconds")
    p = person.groupBy(ten, F.col("id").alias("seller"), "name").count().drop("count")
    a = auction.groupBy(ten, "seller").count().drop("count")
    return p.join(a, ["window", "seller"]).select(
        F.col("seller").alias("id"), "name", F.col("window.start").alias("stime")
    )


def _bids_of_category(bid, auction, F):
    """q20: each bid with its auction's columns, auctions of category 10 (a regular join,
    no watermark: Flink's meaning keeps every row in state, as q3 does)."""
    b = bid.alias("B")
    a = auction.where(F.col("category") == 10).alias("A")
    columns = ["auction", "bidder", "price", "channel", "url"]
    return b.join(a, F.col("B.auction") == F.col("A.id")).select(
        *(F.col(f"B.{c}") for c in columns),
        F.col("B.dateTime").alias("bid_dateTime"),
        F.col("B.extra").alias("bid_extra"),
        *(F.col(f"A.{c}") for c in ("itemName", "description", "initialBid", "reserve")),
        F.col("A.dateTime").alias("auction_dateTime"),
        *(F.col(f"A.{c}") for c in ("expires", "seller", "category")),
        F.col("A.extra").alias("auction_extra"),
    )


def _bids_of_sellers(bid, person, auction, F):
    """q23: each bid of a person who also sells, with the person and each of their
    auctions (two regular joins, no watermark: every row stays in state, as in Flink)."""
    b, p, a = bid.alias("B"), person.alias("P"), auction.alias("A")
    person_columns = ("name", "emailAddress", "creditCard", "city", "state")
    auction_columns = ("itemName", "description", "initialBid", "reserve")
    return (
        b.join(p, F.col("P.id") == F.col("B.bidder"))
        .join(a, F.col("A.seller") == F.col("B.bidder"))
        .select(
            *(F.col(f"B.{c}") for c in ("bidder", "price", "channel", "url")),
            F.col("B.extra").alias("bid_extra"),
            F.col("P.id").alias("person_id"),
            *(F.col(f"P.{c}") for c in person_columns),
            F.col("P.extra").alias("person_extra"),
            *(F.col(f"A.{c}") for c in auction_columns),
            F.col("A.dateTime").alias("auction_dateTime"),
            *(F.col(f"A.{c}") for c in ("expires", "seller", "category")),
            F.col("A.extra").alias("auction_extra"),
        )
    )


def _marker_value(kind: pa.DataType) -> Any:
    """A marker's cell: never NULL, since a filter that does not read the event time
    (such as the ``IS NOT NULL`` Spark infers for a join key) runs below the watermark
    and would drop the marker before it moves the watermark."""
    if pa.types.is_timestamp(kind):
        return END_OF_STREAM
    return "" if pa.types.is_string(kind) else 0


def write_end_of_stream(data: Path) -> None:
    """Write each table's end-of-stream marker (``DIR/<table>-end/``), once: one row,
    its times :data:`END_OF_STREAM`, stamped after the table's files so that Spark's
    file source reads it last."""
    for table in TABLES:
        folder = data / f"{table}{END_SUFFIX}"
        if folder.exists():
            continue
        files = sorted((data / table).glob("*.parquet"))
        schema = pq.read_schema(files[0])
        columns = [pa.array([_marker_value(f.type)], type=f.type) for f in schema]
        folder.mkdir()
        path = folder / "part-00000.parquet"
        pq.write_table(pa.Table.from_arrays(columns, schema=schema), path)
        last = max(f.stat().st_mtime_ns for f in files) + 1_000_000
        os.utime(path, ns=(last, last))


def streams(
    spark, data: Path, files_per_batch: int | None = None, windowed: bool = False
) -> dict[str, Any]:
    """The three Parquet file streams (schemas read from the files written); all the
    files in one micro-batch, or ``files_per_batch`` of each table per micro-batch.
    ``windowed``: with the end-of-stream markers and Flink's watermark."""
    from pyspark.sql import functions as F

    out = {}
    for table in TABLES:
        path = str(data / table)
        reader = spark.readStream.schema(spark.read.parquet(path).schema)
        if files_per_batch:
            reader = reader.option("maxFilesPerTrigger", files_per_batch)
        if not windowed:
            out[table] = reader.parquet(path)
            continue
        stream = reader.parquet(f"{data}/{{{table},{table}{END_SUFFIX}}}")
        # a watermark needs a TIMESTAMP (the files' is a TIMESTAMP_NTZ; the session is UTC);
        # the marker only moves the watermark: the filter on the event time stays above it
        event_time = F.col("dateTime").cast("timestamp")
        out[table] = (
            stream.withColumn("dateTime", event_time)
            .withWatermark("dateTime", WATERMARK_DELAY)
            .where(F.col("dateTime") < F.lit(END_OF_STREAM))
        )
    return out


def run(
    spark,
    name: str,
    data: Path,
    checkpoint: Path,
    each_batch: Callable,
    files_per_batch: int | None = None,
) -> str | None:
    """Run the query to the end of the files (availableNow), ``each_batch(df)`` per
    micro-batch; its output mode, or None when no native query is written."""
    started = start(spark, name, data, checkpoint, each_batch, files_per_batch)
    if started is None:
        return None
    query, mode = started
    query.awaitTermination()
    return mode


def start(
    spark,
    name: str,
    data: Path,
    checkpoint: Path,
    each_batch: Callable,
    files_per_batch: int | None = None,
    trigger: dict[str, Any] | None = None,
) -> tuple[Any, str] | None:
    """Start the query, ``each_batch(df)`` per micro-batch: ``(the streaming query,
    its output mode)``, or None when no native query is written. With the default
    ``availableNow`` trigger the files end with the end-of-stream markers; with
    another (a long-running query, ``{}``: Spark's default) the windows close as
    the watermark passes them."""
    from pyspark.sql import functions as F

    if name not in WRITTEN:
        return None
    query = native_queries(F)[name]
    trigger = {"availableNow": True} if trigger is None else trigger
    if query.windowed and trigger.get("availableNow"):
        write_end_of_stream(data)
    writer = (
        query.plan(streams(spark, data, files_per_batch, query.windowed))
        .writeStream.outputMode(query.mode)
        .foreachBatch(lambda df, _: each_batch(df))
        .option("checkpointLocation", str(checkpoint))
    )
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start(), query.mode
