"""K-slack watermark strategies: the vectorized traces against a per-tuple reference,
the PD controller, and the routing of tuples through a real plan on the local runner."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.model.plan import PlanError
from headwater.model.quality import QualityRequirement
from headwater.model.slack import (
    FixedSlack,
    MaxDelaySlack,
    QualityDriven,
    SlackController,
    slack_trace,
)

REQ = QualityRequirement(0.05, 0.05, "sum", window_tuples=100, value_cv=0.8)


def _reference(ts, batches, slack_of):
    """Per tuple: t_max, the largest delay k; after each batch wm = max(wm, t_max - K)."""
    t_max, k, wm, out = None, 0, None, []
    for rows in batches:
        for t in ts[rows]:
            if t_max is not None:
                k = max(k, t_max - t)
            t_max = t if t_max is None else max(t_max, t)
        w = t_max - slack_of(k)
        wm = w if wm is None else max(wm, w)
        out.append(wm)
    return out


@pytest.mark.parametrize(
    ("strategy", "slack_of"), [(FixedSlack(30), lambda k: 30), (MaxDelaySlack(), lambda k: k)]
)
def test_traces_match_a_per_tuple_reference(strategy, slack_of):
    rng = np.random.default_rng(5)
    ts = np.arange(400) * 10 + rng.integers(0, 200, 400)
    batches = np.array_split(np.arange(400), 37)
    trace = slack_trace(strategy, ts, batches)
    assert list(trace.watermarks) == _reference(ts, batches, slack_of)


def test_pd_controller_formula():
    pd_ = SlackController(kp=0.2, kd=4.0, target=0.98, alpha0=0.5)
    pd_.update(1.0)  # err -0.02: 0.5 + 0.2 * -0.02 + 4 * (-0.02 - 0)
    assert pd_.alpha == pytest.approx(0.5 - 0.004 - 0.08)
    pd_.update(0.9)  # err 0.08: + 0.2 * 0.08 + 4 * (0.08 + 0.02)
    assert pd_.alpha == pytest.approx(0.416 + 0.016 + 0.4)
    pd_.update(0.0)
    assert pd_.alpha == 1.0  # kept in [0, 1]


def _late_stream():
    """Ticks every 10 ms; every 20th tuple arrives 400 ms late (a window misses it)."""
    ts = np.arange(3000) * 10
    arrival = ts + np.where(np.arange(3000) % 20 == 0, 400, 0)
    order = np.argsort(arrival, kind="stable")
    return ts[order], np.split(order, np.flatnonzero(np.diff(arrival[order]) > 0) + 1)


def test_quality_driven_shrinks_k_with_full_coverage_and_grows_it_when_windows_miss():
    ts = np.arange(3000) * 10
    order_full = [np.arange(i, min(i + 10, 3000)) for i in range(0, 3000, 10)]
    full = slack_trace(QualityDriven(REQ, 500, 100, alpha0=1.0), ts, order_full)
    assert full.alpha[-1] < 0.2 and np.all(np.diff(full.alpha) <= 1e-12)  # nothing late
    late_ts, batches = _late_stream()
    positions = [np.searchsorted(np.sort(late_ts), late_ts[b]) for b in batches]
    trace = slack_trace(QualityDriven(REQ, 500, 100, alpha0=0.0), np.sort(late_ts), positions)
    assert trace.coverage.min() < 0.98  # windows missed the late tuples at first
    assert trace.alpha.max() > 0.5  # so the controller raised K
    assert np.all(np.diff(trace.watermarks) >= 0)


def test_routing_buffer_window_dead_letter():
    """K = 100 ms, windows 200 ms sliding by 100 ms: a tuple behind the watermark still
    reaches the open window holding it; one behind every window is a dead letter."""
    rows = [  # (ts, arrival)
        (0, 0),
        (50, 0),
        (150, 100),
        (420, 200),  # watermark 420 - 100 = 320 after this
        (230, 300),  # behind the watermark, in the open window [200, 400) only
        (90, 300),  # behind every window holding it: [-100, 100) and [0, 200)
        (1000, 400),
    ]
    events = pd.DataFrame(rows, columns=["ts", "arrival"]).assign(k="a", v=1)
    agg = (
        hw.from_pandas(events, event_time="ts", arrival_time="arrival", watermark=FixedSlack(100))
        .window(hw.SlidingWindows(0.2, 0.1))
        .group_by("k")
        .agg(n=hw.sum("v"))
    )
    panes = agg.to_pandas().set_index("window_start")["n"]
    assert panes[200] == 1 and panes[100] == 1  # 230 counted in [200, 400) ...
    late = agg.dead_letters()
    got = sorted(zip(late.event_time, late.window_start, strict=True))
    assert got == [(90, -100), (90, 0), (230, 100)]


def test_a_runner_without_the_strategy_refuses_it():
    from headwater.model import combiners as C
    from headwater.model.plan import Capabilities, Schema, build_plan
    from headwater.model.strategy import WindowingStrategy
    from headwater.model.types import INT64

    with pytest.raises(PlanError, match="cannot execute the watermark strategy quality-driven"):
        build_plan(
            Schema.of({"k": INT64, "ts": INT64}),
            keys=("k",),
            event_time="ts",
            windowing=WindowingStrategy.of(hw.FixedWindows(1)),
            aggregations={"n": (C.Count(), None)},
            bounded=False,
            watermark=QualityDriven(REQ, 500, 100),
            capabilities=Capabilities("spark", watermarks=(FixedSlack,)),
        )
