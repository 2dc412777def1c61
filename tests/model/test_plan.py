"""The logical plan: validated once, against the input's schema, with one error type."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.model import types
from headwater.model.combiners import Count, Sum
from headwater.model.plan import Capabilities, PlanError, Schema, build_plan
from headwater.model.schema import PANE_COLUMNS
from headwater.model.strategy import WindowingStrategy
from headwater.model.watermarks import (
    BoundedOutOfOrderness,
    Perfect,
    Punctuated,
    watermark_strategy,
)

SCHEMA = Schema.of(
    {"team": types.STRING, "ts": types.TIMESTAMP, "score": types.INT64, "name": types.STRING}
)


def plan(**overrides):
    args = dict(
        keys=("team",),
        event_time="ts",
        windowing=WindowingStrategy.of(hw.FixedWindows(60)),
        aggregations={"total": (Sum(), "score"), "n": (Count(), None)},
        bounded=True,
    )
    args.update(overrides)
    return build_plan(SCHEMA, **args)


def test_plan_holds_every_part_and_derives_the_output_schema():
    p = plan(bounded=False, watermark=BoundedOutOfOrderness(5000))
    assert p.keys == ("team",) and p.event_time_type == types.TIMESTAMP
    assert [(a.name, a.output_type) for a in p.aggregations] == [
        ("total", types.INT64),
        ("n", types.INT64),
    ]
    names = [f.name for f in p.pane_fields()]
    assert names == ["team", "window_start", "window_end", "total", "n", *PANE_COLUMNS]
    assert [f.name for f in p.dead_letter_fields()][-1] == "score"
    with pytest.raises(AttributeError):
        p.keys = ("other",)  # immutable


@pytest.mark.parametrize(
    "overrides, names",
    [
        ({"keys": ("tem",)}, ["'tem'", "columns"]),
        ({"event_time": "time"}, ["'time'"]),
        ({"event_time": "name"}, ["'name'", "string", "timestamp", "epoch milliseconds"]),
        ({"aggregations": {"s": (Sum(), "name")}}, ["'s'", "'name'", "string", "Sum"]),
        ({"aggregations": {"s": (Sum(), "nope")}}, ["'nope'"]),
        ({"aggregations": {"timing": (Count(), None)}}, ["'timing'", "reserved"]),
        ({"aggregations": {}}, ["at least one aggregation"]),
        ({"bounded": False}, ["watermark", "'10 seconds'"]),
        ({"bounded": False, "watermark": Punctuated("wm")}, ["watermark column 'wm'"]),
        ({"bounded": False, "watermark": Punctuated("name")}, ["'name' has type string"]),
        ({"on_null_event_time": "drop"}, ["on_null_event_time", "'dead_letter'", "'error'"]),
    ],
)
def test_every_problem_is_one_error_type_naming_the_column_and_the_fix(overrides, names):
    with pytest.raises(PlanError) as err:
        plan(**overrides)
    for name in names:
        assert name in str(err.value), str(err.value)


def test_runner_capabilities_refuse_an_unsupported_combination_at_build_time():
    streaming = Capabilities("Spark streaming", (BoundedOutOfOrderness, Punctuated), True)
    with pytest.raises(PlanError, match="cannot execute the watermark strategy perfect"):
        plan(bounded=False, watermark=Perfect(), capabilities=streaming)

    class Opaque(hw.CombineFn):
        output = types.OBJECT

        def create_accumulator(self):
            return None

    with pytest.raises(PlanError, match="Python object"):
        plan(aggregations={"o": (Opaque(), "score")}, capabilities=streaming)


def test_fluent_api_validates_when_the_pipeline_is_built_not_when_it_runs():
    df = pd.DataFrame({"team": ["a"], "ts": ["12:00"], "score": [1]})
    with pytest.raises(PlanError, match="'ts' has type string"):
        hw.from_pandas(df, "ts")
    df = pd.DataFrame({"team": ["a"], "ts": pd.to_datetime(["2026-01-01"]), "s": ["x"]})
    with pytest.raises(PlanError, match="cannot take column 's' of type string"):
        hw.from_pandas(df, "ts").window(hw.FixedWindows(60)).agg(total=hw.sum("s"))
    with pytest.raises(PlanError, match="'tem'"):
        hw.from_pandas(df, "ts").window(hw.FixedWindows(60)).group_by("tem").agg(n=hw.count())


def test_watermark_strategies_from_what_users_write():
    assert watermark_strategy("10 seconds") == BoundedOutOfOrderness(10_000)
    assert watermark_strategy("punctuated") == Punctuated()
    assert watermark_strategy("perfect") == Perfect()
    assert watermark_strategy(None) is None
    with pytest.raises(ValueError, match="cannot read watermark"):
        watermark_strategy("soon")


def test_bounded_out_of_orderness_and_perfect_arrival_watermarks():
    batch_max = np.array([10_000, 5_000, 30_000])
    got = BoundedOutOfOrderness(1_000).arrival_watermarks(batch_max)
    assert got.tolist()[1:] == [9_000, 9_000]  # from earlier batches only, never back
    batch_min = np.array([8_000, 2_000, 20_000])
    assert Perfect().arrival_watermarks(batch_min).tolist() == [1_999, 1_999, 19_999]


def test_perfect_watermark_replay_drops_nothing():
    df = pd.DataFrame(
        {"ts": [1_000, 25_000, 3_000, 40_000], "v": [1, 2, 3, 4], "arr": [0, 1, 2, 3]}
    )
    result = (
        hw.from_pandas(df, "ts", arrival_time="arr", watermark="perfect")
        .window(hw.FixedWindows(10))
        .agg(s=hw.sum("v"))
    )
    panes = result.to_pandas()
    assert result.dead_letter_count() == 0
    assert sorted(zip(panes.window_start, panes.s, strict=True)) == [
        (0, 4),
        (20_000, 2),
        (40_000, 4),
    ]
    # With a bounded out-of-orderness of 0 the out-of-order 3 is late.
    late = (
        hw.from_pandas(df, "ts", arrival_time="arr", watermark=0)
        .window(hw.FixedWindows(10))
        .agg(s=hw.sum("v"))
    )
    assert late.dead_letters()["v"].tolist() == [3]
