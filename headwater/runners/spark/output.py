"""The streaming runner's output: one DataFrame of panes and dead letters.

Column ``kind`` is ``'pane'`` or ``'dropped'``::

    kind, <key columns>, window_start, window_end, <aggregations> | values,
    timestamp, pane_index, nonspeculative_index, timing, is_first, is_last,
    is_retraction, dropped STRUCT<reason, elements, <input columns>>

For a dropped element ``timestamp`` is its event time and the pane columns are
null; ``elements`` is 1, or with combiner lifting the number of elements of
the dropped partial aggregate (whose columns are then ``sum_<col>``,
``min_<col>``, ``max_<col>``, ``count_<col>``). :func:`panes` and
:func:`dead_letters` split it (or one of its micro-batches) into the pane and
dead-letter schemas of :mod:`headwater.model.schema`; :func:`observe_counts`
adds named metrics (panes, dropped elements) to the query progress.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from headwater.model.schema import PANE_COLUMNS, PANE_METADATA
from headwater.model.types import INT64, TIMESTAMP
from headwater.runners.spark.types import millis_to_timestamp, to_spark
from headwater.runners.spark.worker import (
    DROP,
    KEY,
    OUT,
    SHARD_NO,
    SHARD_SLACK,
    SHARD_WM,
    STEP_TIME,
)

#: The operator's pane metadata: times in epoch ms (decoded to timestamps after).
PANE_FIELDS = tuple(
    T.StructField(f.name, to_spark(INT64 if f.type == TIMESTAMP else f.type)) for f in PANE_METADATA
)


def decode(
    result: DataFrame,
    keys: Sequence[str],
    key_fields: Sequence[T.StructField],
    raw_key: bool,
    aggregations: Sequence[str],
    input_cols: Sequence[str],
    timestamps: str,
    transformed: Sequence[str] = (),
    per_shard: bool = False,
) -> DataFrame:
    """The operator's rows as the runner's output: keys, times and dead letters
    decoded; a pane transform's columns (``transformed``) last, still prefixed
    (a query may name a column ``window_start`` or ``timestamp``): :func:`changes`
    reads them by their own names. With a watermark each shard derives
    (``per_shard``), then ``processing_time`` and ``shard_watermark``
    (:data:`PER_SHARD_COLUMNS`)."""
    if raw_key:
        key_cols = [F.col(KEY).alias(keys[0])]
    else:
        struct_type = T.StructType([T.StructField(f.name, f.dataType) for f in key_fields])
        parsed = F.from_json(F.col(KEY), struct_type)
        key_cols = [parsed.getField(k).alias(k) for k in keys]

    def ts(name: str) -> Column:
        if timestamps == "timestamp":
            return millis_to_timestamp(F.col(name)).alias(name)
        return F.col(name)

    dropped = F.when(
        F.col("kind") == "dropped",
        F.struct(
            F.col("reason").alias("reason"),
            F.col(DROP + "elements").alias("elements"),
            *[F.col(DROP + c).alias(c) for c in input_cols],
        ),
    ).alias("dropped")
    return result.select(
        F.col("kind"),
        *key_cols,
        ts("window_start"),
        ts("window_end"),
        *[F.col(name) for name in aggregations],
        ts("timestamp"),
        *[F.col(n) for n in PANE_COLUMNS[1:]],
        dropped,
        *[_out(name) for name in transformed],
        *(_per_shard_columns() if per_shard else []),
    )


#: The output columns of a plan whose watermark each shard derives (K-slack):
#: ``processing_time`` (epoch ms) of the step that made the row, and on rows of
#: kind ``'watermark'`` (one per shard and step) ``shard_watermark``, a struct of
#: the shard's index, its watermark after the step and the slack ``K`` (ms).
PER_SHARD_COLUMNS = ("processing_time", "shard_watermark")


def _per_shard_columns() -> list[Column]:
    trace = F.struct(
        F.col(SHARD_NO).alias("shard"),
        F.col(SHARD_WM).alias("watermark"),
        F.col(SHARD_SLACK).alias("slack"),
    )
    return [
        F.col(STEP_TIME).alias(PER_SHARD_COLUMNS[0]),
        F.when(F.col("kind") == "watermark", trace).alias(PER_SHARD_COLUMNS[1]),
    ]


def _out(name: str) -> Column:
    """The output column of ``name``, quoted: a result column may be named by its
    expression (``avg(Q.final)``), whose dot Spark would read as a struct field."""
    return F.col("`" + (OUT + name).replace("`", "``") + "`")


def changes(df: DataFrame, columns: Sequence[str]) -> DataFrame:
    """The rows of a pane transform (kind ``'change'``): its ``columns``."""
    return df.where(F.col("kind") == "change").select(*[_out(c).alias(c) for c in columns])


def panes(df: DataFrame) -> DataFrame:
    """The pane rows of the runner's output (or of one of its micro-batches)."""
    return df.where(F.col("kind") == "pane").drop("kind", "dropped", PER_SHARD_COLUMNS[1])


def watermark_trace(df: DataFrame) -> DataFrame:
    """A shard-derived watermark's steps (``shard``, ``processing_time``, ``watermark``,
    ``slack``): one row per shard and step with rows, from the runner's output."""
    trace = F.col(PER_SHARD_COLUMNS[1])
    return df.where(F.col("kind") == "watermark").select(
        trace.getField("shard").alias("shard"),
        F.col(PER_SHARD_COLUMNS[0]),
        trace.getField("watermark").alias("watermark"),
        trace.getField("slack").alias("slack"),
    )


def dead_letters(df: DataFrame) -> DataFrame:
    """The dropped elements: key columns, window, ``event_time``, reason,
    ``elements`` (1; with combiner lifting the number of elements of the
    partial aggregate) and the input columns the aggregations read (lifted:
    the partial aggregates, named ``sum_<col>``, ``max_<col>``...); with a
    shard-derived watermark also ``processing_time`` (the step the element arrived in)."""
    meta = {"kind", "dropped", "window_start", "window_end", *PANE_COLUMNS}
    last = df.columns.index("dropped")
    dropped_fields = df.schema["dropped"].dataType.fieldNames()
    data_cols = [c for c in df.columns[:last] if c not in meta]
    # key columns come first in the output; aggregation outputs follow the window
    key_cols = data_cols[: df.columns.index("window_start") - 1]
    return df.where(F.col("kind") == "dropped").select(
        *key_cols,
        "window_start",
        "window_end",
        F.col("timestamp").alias("event_time"),
        *[F.col("dropped").getField(f).alias(f) for f in dropped_fields],
        *[c for c in PER_SHARD_COLUMNS[:1] if c in df.columns],
    )


def observe_counts(df: DataFrame, name: str = "headwater") -> DataFrame:
    """``df`` with named metrics ``panes`` and ``dropped`` (elements dropped as
    late or closed), reported in ``StreamingQueryProgress.observedMetrics``."""
    return df.observe(
        name,
        F.count(F.when(F.col("kind") == "pane", 1)).alias("panes"),
        F.coalesce(F.sum(F.col("dropped.elements")), F.lit(0)).alias("dropped"),
    )


__all__ = [
    "PER_SHARD_COLUMNS",
    "changes",
    "decode",
    "dead_letters",
    "observe_counts",
    "panes",
    "watermark_trace",
]
