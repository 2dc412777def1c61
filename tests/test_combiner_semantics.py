"""SQL null semantics of the combiners, the same on every runner, and their types.

A window whose values are all null: SUM, MIN, MAX and MEAN are NULL (NaN in a
pandas result, as ``toPandas()`` holds a nullable column's nulls), ``count(col)``
is 0 and ``count()`` counts the rows, on the local runner, bounded Spark and
streaming Spark (with and without combiner lifting).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import headwater.api as hw
from headwater.model import types as HT
from headwater.model.combiners import (
    ApproxDistinct,
    ApproxQuantiles,
    CombineFn,
    Count,
    Max,
    Mean,
    Min,
    Sum,
    ToList,
    TopK,
)
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MAX_TIMESTAMP
from headwater.model.windows import FixedWindows

AGGS = ("total", "n", "n_score", "lo", "hi", "avg")


def _aggs():
    return dict(
        total=hw.sum("score"),
        n=hw.count(),
        n_score=hw.count("score"),
        lo=hw.min("score"),
        hi=hw.max("score"),
        avg=hw.mean("score"),
    )


# team, ts (ms), score: window [0, 10 s) of "a" holds only nulls.
ROWS = [
    ("a", 1_000, None),
    ("a", 2_000, None),
    ("a", 12_000, 4),
    ("a", 13_000, None),
    ("b", 3_000, 5),
    ("b", 4_000, 7),
]
WANT = {
    ("a", 0, 10_000): (None, 2, 0, None, None, None),
    ("a", 10_000, 20_000): (4, 2, 1, 4, 4, 4.0),
    ("b", 0, 10_000): (12, 2, 2, 5, 7, 6.0),
}


def _norm(v):
    if v is None or v is pd.NA or (isinstance(v, (float, np.floating)) and math.isnan(v)):
        return None
    if isinstance(v, (np.integer, np.floating)):
        v = v.item()
    return round(v, 9) if isinstance(v, float) else v


def _panes(frame: pd.DataFrame, key: str = "team") -> dict:
    out = {}
    for rec in frame.to_dict("records"):
        w = (rec[key], int(rec["window_start"]), int(rec["window_end"]))
        assert w not in out
        out[w] = tuple(_norm(rec[a]) for a in AGGS)
    return out


# ------------------------------------------------------------------ the core
def test_local_runner_all_null_window():
    pdf = pd.DataFrame(ROWS, columns=["team", "ts", "score"])
    got = (
        hw.from_pandas(pdf, "ts")
        .window(hw.FixedWindows(10))
        .group_by("team")
        .agg(**_aggs())
        .to_pandas()
    )
    assert _panes(got) == WANT
    # The NULL of an integer column is NaN, which makes it float64: as toPandas().
    assert got["total"].dtype == np.float64 and got["n"].dtype == np.int64


def test_empty_accumulators_are_null_and_counts_zero():
    for fn in (Sum(), Mean(), Min(), Max()):
        assert np.isnan(np.asarray(fn.extract(fn.create(2)), dtype=float)).all(), fn
    for fn in (Count(), Count(skip_nulls=True)):
        assert fn.extract(fn.create(2)).tolist() == [0, 0]
    assert repr(hw.count("x").combine_fn) == "Count(skip_nulls=True)"
    assert hw.count().column is None and not hw.count().combine_fn.skip_nulls


def test_sum_subtract_restores_null():
    fn = Sum()
    acc = fn.add(np.array([3, 4]), np.array([0, 1]), 2)
    gone = fn.subtract(acc, fn.add(np.array([4]), np.array([1]), 2))
    out = fn.extract(gone)
    assert out[0] == 3 and np.isnan(out[1])


# ------------------------------------------------------------------- types
def test_builtin_types():
    dec = HT.decimal(12, 2)
    assert Sum().output_type(HT.INT64) == HT.INT64
    assert Sum().output_type(HT.FLOAT64) == HT.FLOAT64
    assert Sum().output_type(dec) == HT.decimal(22, 2)
    assert Sum().output_type(HT.decimal(33, 4)) == HT.decimal(38, 4)
    assert not Sum().accepts(HT.STRING) and not Sum().accepts(None)
    assert Mean().output_type(HT.INT64) == HT.FLOAT64 and Mean().accepts(dec)
    assert Min().output_type(HT.STRING) == HT.STRING and Max().accepts(HT.TIMESTAMP)
    assert not Min().accepts(HT.list_of(HT.INT64))
    assert Count().output_type(None) == HT.INT64 and Count().accepts(HT.OBJECT)
    assert ToList().output_type(HT.STRING) == HT.list_of(HT.STRING)
    assert TopK(2).output_type(HT.INT64) == HT.list_of(HT.INT64)
    assert ApproxDistinct().output_type(HT.STRING) == HT.INT64
    assert ApproxQuantiles().output_type(HT.INT64) == HT.list_of(HT.FLOAT64)
    assert not ApproxQuantiles().accepts(HT.STRING)
    with pytest.raises(TypeError, match="column 'name' of type string: it needs a numeric"):
        Sum().check_input(HT.STRING, "name")


class _Longest(CombineFn):
    """Scalar API only: the longest string."""

    def create_accumulator(self):
        return ""

    def add_input(self, acc, value):
        return max(acc, str(value), key=len)

    def merge_accumulators(self, accs):
        return max(accs, key=len)

    def extract_output(self, acc):
        return acc


class _Opaque(CombineFn):
    def create_accumulator(self):
        return None

    def add_input(self, acc, value):
        raise RuntimeError("no")


def test_user_combiner_output_types():
    assert _Longest().output_type(HT.STRING) == HT.STRING
    assert _Longest().output_type(HT.INT64) == HT.STRING
    declared = _Opaque()
    with pytest.raises(TypeError, match="declare it.*output = types.FLOAT64"):
        declared.output_type(HT.INT64)
    declared.output = HT.FLOAT64  # an instance attribute works too
    assert declared.output_type(HT.INT64) == HT.FLOAT64


def test_spark_type_mapping():
    from pyspark.sql import types as T

    from headwater.runners.spark.types import of_spark, to_spark

    for t in (
        HT.BOOLEAN,
        HT.INT64,
        HT.FLOAT64,
        HT.STRING,
        HT.BINARY,
        HT.DATE,
        HT.TIMESTAMP,
        HT.decimal(20, 3),
        HT.list_of(HT.list_of(HT.STRING)),
    ):
        assert of_spark(to_spark(t)) == t
    assert of_spark(T.IntegerType()) == HT.INT64 and of_spark(T.FloatType()) == HT.FLOAT64
    assert of_spark(T.MapType(T.StringType(), T.LongType())) == HT.OBJECT
    with pytest.raises(TypeError, match="declare"):
        to_spark(HT.OBJECT)


# ------------------------------------------------------------------- Spark
@pytest.mark.spark
def test_bounded_spark_all_null_window(spark):
    df = spark.createDataFrame(ROWS, "team string, ts long, score long")
    result = hw.from_spark(df, "ts").window(hw.FixedWindows(10)).group_by("team").agg(**_aggs())
    out = result.to_spark()
    types = {f.name: f.dataType.simpleString() for f in out.schema.fields}
    assert [types[a] for a in AGGS] == ["bigint", "bigint", "bigint", "bigint", "bigint", "double"]
    got = out.toPandas()
    assert _panes(got) == WANT
    local = (
        hw.from_pandas(pd.DataFrame(ROWS, columns=["team", "ts", "score"]), "ts")
        .window(hw.FixedWindows(10))
        .group_by("team")
        .agg(**_aggs())
        .to_pandas()
    )
    # to_pandas() compares equal across runners, dtypes included.
    cols = ["team", "window_start", "window_end", *AGGS]
    order = ["team", "window_start"]
    pd.testing.assert_frame_equal(
        got[cols].sort_values(order).reset_index(drop=True),
        local[cols].sort_values(order).reset_index(drop=True),
    )


@pytest.mark.spark
@pytest.mark.parametrize("lift", [False, True])
def test_streaming_spark_all_null_window(spark, lift):
    from headwater.runners.local import Bundle, WatermarkAdvance
    from headwater.runners.spark.streaming import lifting
    from headwater.runners.spark.timeline import run_timeline

    strategy = WindowingStrategy.of(FixedWindows(10))
    aggregations = {
        "total": (Sum(), "value"),
        "n": (Count(), None),
        "n_score": (Count(skip_nulls=True), "value"),
        "lo": (Min(), "value"),
        "hi": (Max(), "value"),
        "avg": (Mean(), "value"),
    }
    if lift:
        from pyspark.sql import types as T

        schema = T.StructType([T.StructField("value", T.DoubleType())])
        assert lifting(strategy, aggregations, schema) is not None
    steps = [
        Bundle([r[0] for r in ROWS], [r[1] for r in ROWS], [r[2] for r in ROWS]),
        WatermarkAdvance(MAX_TIMESTAMP),
    ]
    emissions = run_timeline(strategy, aggregations, steps, spark=spark, lift=lift)
    panes = pd.concat([e.panes for e in emissions if len(e.panes)], ignore_index=True)
    assert _panes(panes, key="key") == WANT
