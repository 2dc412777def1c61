"""Spark's own Structured Streaming for the NEXMark queries: the Spark baseline.

Each query written by hand with Spark's DataFrame API over the Parquet file streams of
the generator (person, auction, bid), with Flink's meaning (the final table of the
query over all the events), and run availableNow. A query whose result only appends
runs in append mode; an aggregate without an event-time window in complete mode (its
last micro-batch is the final table). A query Spark's streaming cannot express, or that
is not written yet, has its reason in :data:`NATIVE_MISSING`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLES = ("person", "auction", "bid")
_BID = ["auction", "bidder", "price", "dateTime", "extra"]
_HOT = ("apple", "google", "facebook", "baidu")

#: The queries written (their expressions need a running SparkSession to build).
WRITTEN = ("q0", "q1", "q2", "q3", "q10", "q14", "q17", "q21", "q22")
#: Why Spark's own streaming query is not given for a query.
NATIVE_MISSING = {
    "q4": "not expressible: an aggregate of an aggregate without event-time windows "
    "(Spark chains streaming aggregations only on event-time windows, in append mode)",
    "q5": "not written: hop-window counts joined with their own per-window maximum "
    "(a join of two chained streaming aggregations)",
    "q6": "not expressible: Spark streaming has no OVER windows (non-time-based windows)",
    "q7": "not written: a join of the bids with a windowed aggregate of the same stream",
    "q8": "not written: a join of two windowed aggregates",
    "q9": "not expressible: Spark streaming has no ROW_NUMBER over a stream",
    "q11": "not written: session windows per bidder (Spark's session_window)",
    "q12": "not expressible: Spark streaming has no processing-time windows",
    "q13": "not expressible: Spark streaming has no processing-time temporal join",
    "q15": "not expressible: Spark streaming has no COUNT(DISTINCT) (approximate only)",
    "q16": "not expressible: Spark streaming has no COUNT(DISTINCT) (approximate only)",
    "q18": "not expressible: Spark streaming has no ROW_NUMBER over a stream",
    "q19": "not expressible: Spark streaming has no ROW_NUMBER over a stream",
    "q20": "not written: an interval join of bids with auctions",
    "q23": "not written: a join of the three streams",
}


@dataclass(frozen=True)
class NativeQuery:
    """A query as Spark's DataFrames: the plan over the streams and its output mode."""

    plan: Callable[[dict[str, Any]], Any]
    mode: str = "append"


def _rank_counts(F) -> list[Any]:
    price = F.col("price")
    bands = [price < 10_000, (price >= 10_000) & (price < 1_000_000), price >= 1_000_000]
    return [F.count(F.when(b, 1)).alias(f"rank{i}_bids") for i, b in enumerate(bands, 1)]


def native_queries(F) -> dict[str, NativeQuery]:
    """The hand-written queries (``F``: pyspark.sql.functions, imported by the caller)."""
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


def streams(spark, data: Path, files_per_batch: int | None = None) -> dict[str, Any]:
    """The three Parquet file streams (schemas read from the files written); all the
    files in one micro-batch, or ``files_per_batch`` of each table per micro-batch."""
    out = {}
    for table in TABLES:
        path = str(data / table)
        reader = spark.readStream.schema(spark.read.parquet(path).schema)
        if files_per_batch:
            reader = reader.option("maxFilesPerTrigger", files_per_batch)
        out[table] = reader.parquet(path)
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
    from pyspark.sql import functions as F

    if name not in WRITTEN:
        return None
    query = native_queries(F)[name]
    started = (
        query.plan(streams(spark, data, files_per_batch))
        .writeStream.outputMode(query.mode)
        .foreachBatch(lambda df, _: each_batch(df))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    started.awaitTermination()
    return query.mode
