"""Property: the Spark streaming runner emits exactly the local runner's panes.

For random, seeded configurations (window function, trigger, accumulation mode,
allowed lateness, timestamp combiner, aggregations) and random timelines
(bundles over string keys with on-time, late and too-late elements, watermark
and processing-time advances), every step's panes and dropped elements must be
the same on the deterministic local runner and on the Spark streaming runner
(one micro-batch per step, ``run_timeline``); with combiner lifting the panes
must still be the same and the dead letters must account for every dropped
element. The local runner is the reference (it is checked against the rules of
docs/semantics.md elsewhere), so any difference is a bug of the Spark runner: its
sharding, packing, state round trips, timers or lifting.

Reproduce one case: ``pytest "tests/test_spark_properties.py::<test>[seed<n>]"``
(``HEADWATER_PROPERTY_SEED`` / ``HEADWATER_PROPERTY_COUNT`` choose the seeds).
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from headwater.model.combiners import Count, Max, Mean, Min, Sum
from headwater.model.panes import PANE_COLUMNS
from headwater.model.reducer import Aggregations, Emission
from headwater.model.steps import Bundle, ClockAdvance, MicroBatch, Step, WatermarkAdvance
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MAX_TIMESTAMP
from headwater.model.triggers import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Default,
    Never,
    OrFinally,
    Repeatedly,
    Trigger,
)
from headwater.model.windows import (
    FixedWindows,
    GlobalWindows,
    Sessions,
    SlidingWindows,
    WindowFn,
)
from headwater.runners.local import LocalRunner
from headwater.runners.spark.streaming import lifting
from headwater.runners.spark.timeline import run_timeline

#: First seed; the seeds are BASE_SEED, BASE_SEED + 1, ...
BASE_SEED = int(os.environ.get("HEADWATER_PROPERTY_SEED", "1056"))
#: Seeds of the plain comparison: each costs 10-20 s of Spark on 2 cores (~1 s a step).
N_SEEDS = int(os.environ.get("HEADWATER_PROPERTY_COUNT", "10"))
#: Seeds of the lifted comparison (configurations drawn liftable).
N_LIFTED = max(1, N_SEEDS // 3)
SEEDS = [BASE_SEED + i for i in range(N_SEEDS)]
LIFTED_SEEDS = [BASE_SEED + 100_000 + i for i in range(N_LIFTED)]

#: The Spark runner needs one key type: strings only (some awkward ones).
KEYS = ["a", "b", "10", "key c", "ü"]
#: Schema of the timeline's input as the Spark runner sees it (for ``lifting``).
SCHEMA = StructType([StructField("value", LongType())])
MODES = ("discarding", "accumulating", "retracting")


# ------------------------------------------------------------------ generator


@dataclass(frozen=True)
class Case:
    """One drawn configuration and timeline."""

    seed: int
    window_kind: str
    trigger_kind: str
    strategy: WindowingStrategy
    aggregations: Aggregations | None
    steps: list[Step]

    def describe(self) -> str:
        aggs = None
        if self.aggregations is not None:
            aggs = {n: f"{type(fn).__name__}({col})" for n, (fn, col) in self.aggregations.items()}
        return (
            f"seed={self.seed} window={self.window_kind} trigger={self.trigger_kind}\n"
            f"  strategy={self.strategy}\n  aggregations={aggs}"
        )


def _window(rng: random.Random, liftable: bool) -> tuple[str, WindowFn]:
    kinds = ["fixed", "fixed_offset", "sliding", "global"] + ([] if liftable else ["sessions"] * 2)
    kind = rng.choice(kinds)
    if kind == "fixed":
        return kind, FixedWindows(rng.choice([5, 10]))
    if kind == "fixed_offset":
        return kind, FixedWindows(10, rng.randint(1, 9))
    if kind == "sliding":
        size, period = rng.choice([(10, 5), (10, 3), (6, 4), (9, 3)])
        return kind, SlidingWindows(size, period, rng.choice([0, 1, 2]))
    if kind == "sessions":
        return kind, Sessions(rng.choice([2, 3, 5]))
    return kind, GlobalWindows()


def _processing_time(rng: random.Random) -> AfterProcessingTime:
    if rng.random() < 0.6:
        return AfterProcessingTime(rng.choice([0, 0, 1, 2, 3, 5]))
    return AfterProcessingTime(period=rng.randint(2, 6), offset=rng.randint(-3, 3))


def _leaf(rng: random.Random, counts: bool) -> Trigger:
    """An element-count or processing-time sub-trigger."""
    if counts and rng.random() < 0.5:
        return AfterCount(rng.randint(1, 3))
    return _processing_time(rng)


def _triggers(counts: bool) -> dict[str, Callable[[random.Random], Trigger]]:
    """Trigger kinds; without ``counts`` none contains an AfterCount (liftable)."""

    def leaf(rng: random.Random) -> Trigger:
        return _leaf(rng, counts)

    kinds: dict[str, Callable[[random.Random], Trigger]] = {
        "default": lambda rng: Default(),
        "watermark": lambda rng: AfterWatermark(),
        "watermark_early": lambda rng: AfterWatermark(early=leaf(rng)),
        "watermark_late": lambda rng: AfterWatermark(late=leaf(rng)),
        "watermark_early_late": lambda rng: AfterWatermark(early=leaf(rng), late=leaf(rng)),
        "repeat_processing_time": lambda rng: Repeatedly(_processing_time(rng)),
        "each": lambda rng: AfterEach(leaf(rng), AfterWatermark()),
        "repeat_any": lambda rng: Repeatedly(AfterAny(leaf(rng), leaf(rng))),
        "any_watermark": lambda rng: AfterAny(Repeatedly(leaf(rng)), AfterWatermark()),
        "repeat_all": lambda rng: Repeatedly(AfterAll(leaf(rng), _processing_time(rng))),
        "or_finally": lambda rng: OrFinally(Repeatedly(leaf(rng)), AfterWatermark()),
        "never": lambda rng: Never(),
    }
    if counts:
        kinds |= {
            "repeat_count": lambda rng: Repeatedly(AfterCount(rng.randint(1, 3))),
            "count": lambda rng: AfterCount(rng.randint(1, 3)),
            "or_finally_count": lambda rng: OrFinally(
                Repeatedly(_processing_time(rng)), AfterCount(rng.randint(2, 4))
            ),
            "each_counts": lambda rng: AfterEach(
                AfterCount(rng.randint(1, 2)), Repeatedly(AfterCount(rng.randint(2, 3)))
            ),
        }
    return kinds


TRIGGERS = _triggers(counts=True)
LIFTABLE_TRIGGERS = _triggers(counts=False)


def _aggregations(rng: random.Random, liftable: bool) -> Aggregations | None:
    if not liftable and rng.random() < 0.2:
        return None  # panes carry the collected ``values``
    pool: list[tuple[str, Any]] = [
        ("total", (Sum(), "value")),
        ("n", (Count(), None)),
        ("n_values", (Count(), "value")),
        ("lo", (Min(), "value")),
        ("hi", (Max(), "value")),
        ("avg", (Mean(), "value")),
    ]
    return dict(rng.sample(pool, rng.randint(1, 4)))


def _bundle(rng: random.Random, keys: list[str], wm: int) -> Bundle:
    m = rng.randint(1, 8)
    ts = [wm + rng.randint(-25_000, 20_000) for _ in range(m)]
    if rng.random() < 0.5:  # whole seconds: ties with window bounds and watermarks
        ts = [t - t % 1000 for t in ts]
    return Bundle(
        [rng.choice(keys) for _ in range(m)], ts, [rng.randint(-20, 100) for _ in range(m)]
    )


def _timeline(rng: random.Random, keys: list[str]) -> list[Step]:
    """Bundles around the watermark (some behind it), watermark and clock advances, and
    micro-batches that carry rows, a watermark and a clock advance together."""
    steps: list[Step] = []
    wm = now = 0
    for _ in range(rng.randint(11, 15)):
        r = rng.random()
        if r < 0.45:
            steps.append(_bundle(rng, keys, wm))
        elif r < 0.65:
            wm += rng.choice([0, 1000, 3000, 5000, 8000, 12_000])
            steps.append(WatermarkAdvance(wm))
        elif r < 0.8:
            # Sometimes the clock does not move: a clock step still fires due timers.
            now += rng.choice([0, 0, 1000, 2000, 3000, 6000]) + rng.choice([0, 0, 500])
            steps.append(ClockAdvance(now))
        else:
            rows = _bundle(rng, keys, wm) if rng.random() < 0.8 else None
            new_wm = wm + rng.choice([0, 3000, 8000, 12_000, 20_000])
            clock = rng.random() < 0.6
            if clock:
                now += rng.choice([0, 1000, 3000, 6000])
            steps.append(
                MicroBatch(
                    rows,
                    watermark=new_wm if new_wm > wm or rng.random() < 0.5 else None,
                    now=now if clock else None,
                    fire_timers=clock,
                )
            )
            wm = new_wm
    steps.append(WatermarkAdvance(MAX_TIMESTAMP))
    return steps


def draw_case(seed: int, liftable: bool = False) -> Case:
    """The configuration and timeline of ``seed`` (``liftable``: drawn for lifting)."""
    rng = random.Random(seed)
    window_kind, window_fn = _window(rng, liftable)
    triggers = LIFTABLE_TRIGGERS if liftable else TRIGGERS
    # Consecutive seeds take turns through the trigger kinds (parameters are random).
    trigger_kind = sorted(triggers)[seed % len(triggers)]
    trigger = triggers[trigger_kind](rng)
    mode = rng.choice(MODES)
    lateness = rng.choice([0, 0, 3, 5, 10, 20, 30])
    combiner = (
        "end_of_window"
        if liftable
        else rng.choice(["end_of_window", "end_of_window", "earliest", "latest"])
    )
    strategy = WindowingStrategy.of(window_fn, trigger, mode, lateness, combiner)
    aggregations = _aggregations(rng, liftable)
    keys = KEYS[: rng.randint(3, len(KEYS))]
    return Case(seed, window_kind, trigger_kind, strategy, aggregations, _timeline(rng, keys))


# ----------------------------------------------------------------- comparison


def _norm(v: Any) -> Any:
    """A representation-independent value: lists as sorted tuples, exact numbers."""
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(sorted((_norm(x) for x in v), key=repr))
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return None
        return int(f) if f.is_integer() else round(f, 9)
    return v


def _rows(df: pd.DataFrame, cols: list[str]) -> list[tuple]:
    if not len(df):
        return []
    missing = [c for c in cols if c not in df.columns]
    assert not missing, f"missing columns {missing} in {list(df.columns)}"
    return sorted(
        (tuple(_norm(v) for v in row) for row in df[cols].itertuples(index=False)), key=repr
    )


def _diff(got: list[tuple], want: list[tuple]) -> str:
    g, w = Counter(got), Counter(want)
    extra, missing = sorted(g - w, key=repr), sorted(w - g, key=repr)
    return f"    spark only: {extra}\n    local only: {missing}"


def pane_cols(aggregations: Aggregations | None) -> list[str]:
    names = list(aggregations) if aggregations is not None else ["values"]
    return ["key", "window_start", "window_end", *names, *PANE_COLUMNS]


DROP_COLS = ["key", "timestamp", "window_start", "window_end", "reason"]
#: A lifted dead letter stands for the dropped elements of one key, window and reason.
DROP_GROUP = ["key", "window_start", "window_end", "reason"]


def _combine(acc: dict[str, Any], name: str, v: Any) -> None:
    """Fold ``v`` into the partial ``name`` (``sum_value``, ``min_value``, ...)."""
    if v is None:
        return
    how = name.split("_", 1)[0]
    if name not in acc:
        acc[name] = v
    elif how in ("sum", "count"):
        acc[name] += v
    else:
        acc[name] = min(acc[name], v) if how == "min" else max(acc[name], v)


def _lifted_drops(df: pd.DataFrame, partials: list[str]) -> dict[tuple, dict[str, Any]]:
    """Spark's lifted dead letters, combined per (key, window, reason)."""
    out: dict[tuple, dict[str, Any]] = {}
    for r in df.to_dict("records") if len(df) else []:
        acc = out.setdefault(tuple(_norm(r[c]) for c in DROP_GROUP), {"elements": 0})
        acc["elements"] += int(r["elements"])
        for c in partials:
            _combine(acc, c, _norm(r[c]))
    return out


def _local_drops(df: pd.DataFrame, partials: list[str]) -> dict[tuple, dict[str, Any]]:
    """The local runner's dropped elements as the partials of lifted dead letters."""
    out: dict[tuple, dict[str, Any]] = {}
    for r in df.to_dict("records") if len(df) else []:
        acc = out.setdefault(tuple(_norm(r[c]) for c in DROP_GROUP), {"elements": 0})
        acc["elements"] += 1
        v = _norm(r["value"])
        for c in partials:
            _combine(acc, c, int(v is not None) if c.startswith("count_") else v)
    return out


def _where(case: Case, i: int, what: str) -> str:
    return f"{what} differ at step {i} ({case.steps[i]})\n{case.describe()}"


def compare(case: Case, got: list[Emission], want: list[Emission], lifted: bool) -> None:
    assert len(got) == len(want) == len(case.steps), case.describe()
    cols = pane_cols(case.aggregations)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        gp, wp = _rows(g.panes, cols), _rows(w.panes, cols)
        assert gp == wp, f"{_where(case, i, 'panes')}\n  columns {cols}\n{_diff(gp, wp)}"
        if lifted:
            # A lifted dead letter is a partial aggregate of ``elements`` elements.
            n = int(g.dropped["elements"].sum()) if len(g.dropped) else 0
            assert n == len(w.dropped), (
                f"{_where(case, i, 'dropped counts')}\n  spark {n}, local {len(w.dropped)}"
            )
            plan = lifting(case.strategy, case.aggregations or {}, SCHEMA)
            assert plan is not None
            partials = [p.column for p in plan.partials]
            gd, wd = _lifted_drops(g.dropped, partials), _local_drops(w.dropped, partials)
            assert gd == wd, f"{_where(case, i, 'lifted dropped elements')}\n  {gd=}\n  {wd=}"
        else:
            dcols = DROP_COLS + (["value"] if "value" in g.dropped.columns else [])
            gd, wd = _rows(g.dropped, dcols), _rows(w.dropped, dcols)
            assert gd == wd, f"{_where(case, i, 'dropped elements')}\n{_diff(gd, wd)}"


# ----------------------------------------------------------------------- tests


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_spark_runner_matches_local_runner(spark, seed: int) -> None:
    case = draw_case(seed)
    want = LocalRunner().run_steps(case.strategy, case.aggregations, case.steps)
    got = run_timeline(case.strategy, case.aggregations, case.steps, spark=spark)
    compare(case, got, want, lifted=False)
    assert sum(len(e.panes) for e in want) > 0, case.describe()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("seed", LIFTED_SEEDS, ids=lambda s: f"seed{s}")
def test_lifted_spark_runner_matches_local_runner(spark, seed: int) -> None:
    case = draw_case(seed, liftable=True)
    assert case.aggregations is not None
    assert lifting(case.strategy, case.aggregations, SCHEMA) is not None, case.describe()
    want = LocalRunner().run_steps(case.strategy, case.aggregations, case.steps)
    got = run_timeline(case.strategy, case.aggregations, case.steps, spark=spark, lift=True)
    compare(case, got, want, lifted=True)
    assert sum(len(e.panes) for e in want) > 0, case.describe()


@pytest.mark.spark
@pytest.mark.slow
def test_clock_step_that_does_not_move_fires_due_timers(spark) -> None:
    """A clock step fires the timers due by its time even if the clock did not move.

    The bundle at processing time 1 s sets a timer due at 1 s (a delay of 0) and,
    being an input step, fires nothing; the clock step to 1 s fires it (rule 7).
    """
    strategy = WindowingStrategy.of(FixedWindows(10), Repeatedly(AfterProcessingTime(0)))
    steps: list[Step] = [
        ClockAdvance(1000),
        Bundle(["a"], [1000], [5]),
        ClockAdvance(1000),
        WatermarkAdvance(MAX_TIMESTAMP),
    ]
    case = Case(-1, "fixed", "repeat_processing_time", strategy, {"total": (Sum(), "value")}, steps)
    want = LocalRunner().run_steps(case.strategy, case.aggregations, steps)
    assert want[2].panes[["total", "timing"]].values.tolist() == [[5, "EARLY"]]
    got = run_timeline(case.strategy, case.aggregations, steps, spark=spark)
    compare(case, got, want, lifted=False)


def test_generator_covers_the_space() -> None:
    """The seeds above exercise many configurations and every kind of output."""
    cases = [draw_case(s) for s in SEEDS]
    lifted = [draw_case(s, liftable=True) for s in LIFTED_SEEDS]
    cases += lifted
    windows = Counter(c.window_kind for c in cases)
    triggers = Counter(c.trigger_kind for c in cases)
    modes = Counter(c.strategy.accumulation.value for c in cases)
    timings: Counter = Counter()
    retractions = dropped = lifted_dropped = 0
    combined = sum(
        isinstance(step, MicroBatch)
        and step.rows is not None
        and step.watermark is not None
        and step.fire_timers
        for c in cases
        for step in c.steps
    )
    for i, c in enumerate(cases):
        for em in LocalRunner().run_steps(c.strategy, c.aggregations, c.steps):
            if len(em.panes):
                timings.update(em.panes["timing"])
                retractions += int(em.panes["is_retraction"].sum())
            dropped += len(em.dropped)
            lifted_dropped += len(em.dropped) if i >= len(SEEDS) else 0
    summary = (
        f"{windows=} {triggers=} {modes=} {timings=} {retractions=} {dropped=} {lifted_dropped=} "
        f"{combined=}"
    )
    # Micro-batches that carry rows, a watermark and a clock advance together.
    assert combined >= 3, summary
    assert len(windows) >= 3, summary
    assert len(triggers) >= 5, summary
    assert set(modes) == set(MODES), summary
    assert {"EARLY", "ON_TIME", "LATE"} <= set(timings), summary
    assert retractions > 0 and dropped > 0, summary
    # The lifted seeds really lift, and some of their elements are dropped.
    assert all(
        c.aggregations is not None and lifting(c.strategy, c.aggregations, SCHEMA) is not None
        for c in lifted
    ), summary
    assert lifted_dropped > 0, summary
