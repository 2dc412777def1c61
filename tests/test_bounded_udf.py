"""User combiners and window functions on every runner.

Spark expressions cannot express a user ``CombineFn`` or ``WindowFn``: the
bounded plan then runs the model's own code in a grouped pandas UDF, and the
streaming runner runs it in the reducer as always, with output types inferred
from the combiner (no ``output_types`` declaration). Each must give the local
runner's panes.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd
import pytest
from pyspark import cloudpickle

import headwater.api as hw
from headwater.model import types as HT
from headwater.model.combiners import CombineFn, Sum
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MAX_TIMESTAMP
from headwater.model.windows import FixedWindows, WindowFn, merge_overlapping

pytestmark = pytest.mark.spark

# Spark's Python workers cannot import this test module: ship its classes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class SecondLargest(CombineFn):
    """Scalar methods only (the base class's slow path); None below two values."""

    name = "second"

    def create_accumulator(self):
        return []

    def add_input(self, acc, value):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return acc
        return sorted([*acc, int(value)], reverse=True)[:2]

    def merge_accumulators(self, accs):
        return sorted((v for a in accs for v in a), reverse=True)[:2]

    def extract_output(self, acc):
        return acc[1] if len(acc) > 1 else None


class Joined(CombineFn):
    """Scalar methods, declared output: the sorted values joined by '+'."""

    output = HT.STRING

    def create_accumulator(self):
        return []

    def add_input(self, acc, value):
        return [*acc, str(value)]

    def merge_accumulators(self, accs):
        return [v for a in accs for v in a]

    def extract_output(self, acc):
        return "+".join(sorted(acc))


class SumOfSquares(CombineFn):
    """Vectorized methods (output type inferred: float64)."""

    name = "ss"

    def create(self, n):
        return {"ss": np.zeros(n)}

    def add(self, values, groups, n):
        v = np.asarray(values, dtype=np.float64)
        return {"ss": np.bincount(groups, weights=v * v, minlength=n)}

    def merge(self, acc, groups, n):
        return {"ss": np.bincount(groups, weights=acc["ss"], minlength=n)}

    def extract(self, acc):
        return acc["ss"]


class MergingFixed(WindowFn):
    """Fixed windows of ``size`` ms; a key's neighbouring (touching) windows merge."""

    is_merging = True

    def __init__(self, size: int) -> None:
        self.size = size

    def assign(self, timestamps):
        return FixedWindows(self.size / 1000).assign(timestamps)

    def merge(self, keys, starts, ends):
        s, e = merge_overlapping(keys, starts, ends + 1)  # touching ones overlap by 1 ms
        return s, e - 1

    def __repr__(self) -> str:
        return f"MergingFixed({self.size})"


class EvenOnly(FixedWindows):
    """Fixed windows that drop elements at odd seconds (no window: dead letters)."""

    def assign(self, timestamps):
        rows, starts, ends = super().assign(timestamps)
        keep = (np.asarray(timestamps)[rows] // 1000) % 2 == 0
        return rows[keep], starts[keep], ends[keep]


ROWS = [  # team, ts (ms), score
    ("a", 1_000, 5),
    ("a", 4_000, 9),
    ("a", 12_000, 2),
    ("a", 31_000, 7),
    ("a", 36_000, 1),
    ("b", 2_000, 3),
    ("b", 22_000, 8),
    ("b", 24_000, 6),
    ("b", 25_000, 4),
]
AGGS = ("second", "joined", "ss", "total")
PANE = ("timestamp", "pane_index", "nonspeculative_index", "timing", "is_first", "is_last")


def _aggs():
    return dict(
        second=(SecondLargest(), "score"),
        joined=(Joined(), "score"),
        ss=(SumOfSquares(), "score"),
        total=hw.sum("score"),
    )


def _norm(v):
    if v is None or (isinstance(v, (float, np.floating)) and math.isnan(v)):
        return None
    if isinstance(v, (np.generic,)):
        v = v.item()
    if isinstance(v, pd.Timestamp):
        return v.value // 1_000_000
    return round(v, 6) if isinstance(v, float) else v


def _panes(frame: pd.DataFrame, key: str = "team") -> list[tuple]:
    cols = [key, "window_start", "window_end", *AGGS, *PANE]
    return sorted(tuple(_norm(r[c]) for c in cols) for r in frame.to_dict("records"))


def _local(wf, timestamp_combiner="end_of_window"):
    pdf = pd.DataFrame(ROWS, columns=["team", "ts", "score"])
    return (
        hw.from_pandas(pdf, "ts")
        .window(wf, timestamp_combiner=timestamp_combiner)
        .group_by("team")
        .agg(**_aggs())
    )


def _bounded(spark, wf, timestamp_combiner="end_of_window"):
    df = spark.createDataFrame(ROWS, "team string, ts long, score long")
    return (
        hw.from_spark(df, "ts")
        .window(wf, timestamp_combiner=timestamp_combiner)
        .group_by("team")
        .agg(**_aggs())
    )


def _streaming(spark, wf, timestamp_combiner="end_of_window"):
    from headwater.model.steps import Bundle, WatermarkAdvance
    from headwater.runners.spark.timeline import run_timeline

    aggregations = {
        "second": (SecondLargest(), "value"),
        "joined": (Joined(), "value"),
        "ss": (SumOfSquares(), "value"),
        "total": (Sum(), "value"),
    }
    steps = [
        Bundle([r[0] for r in ROWS], [r[1] for r in ROWS], [r[2] for r in ROWS]),
        WatermarkAdvance(MAX_TIMESTAMP),
    ]
    strategy = WindowingStrategy.of(wf, timestamp_combiner=timestamp_combiner)
    emissions = run_timeline(strategy, aggregations, steps, spark=spark)
    return pd.concat([e.panes for e in emissions if len(e.panes)], ignore_index=True)


@pytest.mark.parametrize(
    "wf, tc",
    [
        (hw.FixedWindows(10), "end_of_window"),  # native windows, user combiners
        (MergingFixed(10_000), "earliest"),  # user merging window function
    ],
    ids=["fixed", "merging"],
)
def test_user_combiners_and_windows_agree_on_every_runner(spark, wf, tc):
    want = _panes(_local(wf, tc).to_pandas())
    assert len(want) >= 4
    bounded = _bounded(spark, wf, tc).to_spark()
    types = {f.name: f.dataType.simpleString() for f in bounded.schema.fields}
    # Output types: inferred (second: bigint, ss: double) or declared (joined: string).
    assert [types[a] for a in AGGS] == ["bigint", "string", "double", "bigint"]
    assert _panes(bounded.toPandas()) == want
    assert _panes(_streaming(spark, wf, tc), key="key") == want


def test_merging_window_fn_merges_neighbours():
    got = _local(MergingFixed(10_000)).to_pandas()
    windows = sorted(zip(got.team, got.window_start, got.window_end, strict=True))
    assert windows == [
        ("a", 0, 20_000),  # [0, 10) and [10, 20) touch: merged
        ("a", 30_000, 40_000),
        ("b", 0, 10_000),
        ("b", 20_000, 30_000),
    ]


def test_native_plans_have_no_python_udf(spark):
    def plan(result) -> str:
        return result.to_spark()._jdf.queryExecution().executedPlan().toString()

    df = spark.createDataFrame(ROWS, "team string, ts long, score long")
    native = hw.from_spark(df, "ts").window(hw.FixedWindows(10)).agg(total=hw.sum("score"))
    assert "FlatMapGroupsInPandas" not in plan(native)
    assert "FlatMapGroupsInPandas" in plan(_bounded(spark, hw.FixedWindows(10)))


def test_fallback_dead_letters(spark):
    df = spark.createDataFrame([*ROWS, ("a", None, 100)], "team string, ts long, score long")
    result = (
        hw.from_spark(df, "ts")
        .window(EvenOnly(10))
        .group_by("team")
        .agg(second=(SecondLargest(), "score"), n=hw.count())
    )
    letters = sorted(
        ((r.team, r.event_time, r.reason) for r in result.dead_letters().collect()), key=repr
    )
    assert letters == [
        ("a", 1_000, "no_window"),
        ("a", 31_000, "no_window"),
        ("a", None, "null_event_time"),
        ("b", 25_000, "no_window"),
    ], letters
    got = {(r.team, r.window_start): (r.second, r.n) for r in result.to_spark().collect()}
    assert got == {
        ("a", 0): (None, 1),
        ("a", 10_000): (None, 1),
        ("a", 30_000): (None, 1),
        ("b", 0): (None, 1),
        ("b", 20_000): (6, 2),
    }


def test_undeclarable_output_is_a_clear_error(spark):
    class Opaque(CombineFn):
        def create_accumulator(self):
            return None

        def add_input(self, acc, value):
            return object()

        def merge_accumulators(self, accs):
            return accs[0]

        def extract_output(self, acc):
            return acc

    df = spark.createDataFrame(ROWS, "team string, ts long, score long")
    # PlanError (a ValueError) at plan time, or the runner's TypeError: both ask for
    # a declared output type.
    with pytest.raises((TypeError, ValueError), match="(?i)declare"):
        hw.from_spark(df, "ts").window(hw.FixedWindows(10)).agg(o=(Opaque(), "score")).to_spark()
