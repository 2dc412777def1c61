"""The deterministic local runner: drives the core from a test stream or a frame.

Processing time is virtual: it moves only when the stream says so. Every step
is applied in order through :func:`headwater.model.steps.apply_step`, so a run
is a pure function of its input: tests and replays are exact.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from headwater.model.plan import (
    Capabilities,
    NullEventTime,
    PlanError,
    WindowedAggregationPlan,
    null_event_time_error,
)
from headwater.model.reducer import Aggregations, Emission, Reducer
from headwater.model.schema import DropReason
from headwater.model.slack import FixedSlack, MaxDelaySlack, QualityDriven, slack_trace
from headwater.model.steps import (
    Bundle,
    ClockAdvance,
    MicroBatch,
    Step,
    WatermarkAdvance,
    apply_step,
    end_of_input,
)
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MAX_TIMESTAMP, to_millis
from headwater.model.watermarks import (
    BoundedOutOfOrderness,
    Perfect,
    Punctuated,
    WatermarkStrategy,
)

__all__ = ["CAPABILITIES", "LocalRunner", "TestStream", "run_frame"]


@dataclass
class TestStream:
    """A scripted timeline of bundles, watermark and processing-time advances.

    Times are event-time milliseconds; ``advance_*`` accept durations too
    (``"2 minutes"``, seconds as numbers).
    """

    __test__ = False  # not a pytest test class
    steps: list[Step] = field(default_factory=list)

    def add_elements(self, elements, *, key=None) -> TestStream:
        """Add a bundle: ``(key, timestamp_ms, value)`` tuples, or a DataFrame
        with ``key``, ``timestamp`` and value columns."""
        if isinstance(elements, pd.DataFrame):
            values = elements.drop(columns=["key", "timestamp"])
            self.steps.append(Bundle(list(elements["key"]), list(elements["timestamp"]), values))
            return self
        rows = [e if isinstance(e, tuple) else (key, e, e) for e in elements]
        self.steps.append(
            Bundle([r[0] for r in rows], [int(r[1]) for r in rows], [r[2] for r in rows])
        )
        return self

    def advance_watermark_to(self, watermark) -> TestStream:
        self.steps.append(WatermarkAdvance(int(watermark)))
        return self

    def advance_watermark_to_infinity(self) -> TestStream:
        return self.advance_watermark_to(MAX_TIMESTAMP)

    def advance_processing_time(self, delta) -> TestStream:
        now = max([s.now for s in self.steps if isinstance(s, ClockAdvance)], default=0)
        self.steps.append(ClockAdvance(now + to_millis(delta)))
        return self


class LocalRunner:
    """Runs a windowed aggregation over a test stream in this process."""

    def run_steps(
        self, strategy: WindowingStrategy, aggregations: Aggregations | None, steps: list[Step]
    ) -> list[Emission]:
        """The emission of every step, in order."""
        reducer = Reducer(strategy, aggregations)
        return [apply_step(reducer, step) for step in steps]

    def run(
        self,
        stream: TestStream,
        strategy: WindowingStrategy,
        aggregations: Aggregations | None = None,
    ) -> Emission:
        """All panes (with a ``step`` column) and all dropped elements."""
        emissions = self.run_steps(strategy, aggregations, stream.steps)
        for i, em in enumerate(emissions):
            em.panes["step"] = i
            em.dropped["step"] = i
        return Emission.concat(emissions)


# ------------------------------------------------------------------ frames

#: How this runner derives the watermark of a replayed frame, per strategy class:
#: ``f(strategy, frame, event_times, batches) -> [(arrival watermark, watermark after)]``.
WatermarkFn = Callable[
    [WatermarkStrategy, pd.DataFrame, np.ndarray, list[np.ndarray]],
    list[tuple[int | None, int | None]],
]


def _bounded_watermarks(strategy, frame, ts, batches):
    wms = strategy.arrival_watermarks(np.array([ts[b].max() for b in batches]))
    return [(None if i == 0 else int(w), None) for i, w in enumerate(wms)]


def _perfect_watermarks(strategy, frame, ts, batches):
    wms = strategy.arrival_watermarks(np.array([ts[b].min() for b in batches]))
    return [(int(w), None) for w in wms]


def _punctuated_watermarks(strategy, frame, ts, batches):
    column = frame[strategy.column]
    out = []
    for b in batches:
        w = pd.to_numeric(column.iloc[b]).max()
        out.append((None, None if pd.isna(w) else int(w)))
    return out


def _slack_watermarks(strategy, frame, ts, batches):
    """K-slack: the frame is one shard; its watermark moves after each batch."""
    return [(None, int(w)) for w in slack_trace(strategy, ts, batches).watermarks]


WATERMARKS: dict[type[WatermarkStrategy], WatermarkFn] = {
    BoundedOutOfOrderness: _bounded_watermarks,
    Perfect: _perfect_watermarks,
    Punctuated: _punctuated_watermarks,
    FixedSlack: _slack_watermarks,
    MaxDelaySlack: _slack_watermarks,
    QualityDriven: _slack_watermarks,
}

#: What the local runner executes: every window function and combiner (it runs
#: the core itself), and the watermark strategies of :data:`WATERMARKS`.
CAPABILITIES = Capabilities("local", watermarks=tuple(WATERMARKS))


def run_frame(
    df: pd.DataFrame, plan: WindowedAggregationPlan, *, arrival_time: str | None = None
) -> Emission:
    """Run ``plan`` over a pandas DataFrame in this process.

    Without ``arrival_time`` the frame is a complete (bounded) input: one step
    with the watermark at the end of time, as the Spark batch runner does. With
    it, rows are replayed in micro-batches of equal arrival (processing) time,
    each one :class:`MicroBatch` whose arrival watermark comes from the plan's
    watermark strategy, then a last step at the end of input (+inf).
    Returned panes and dead letters carry the key columns and a ``step``.
    """
    event_time = plan.event_time
    column = df[event_time]
    is_datetime = pd.api.types.is_datetime64_any_dtype(column)
    ts_all, null = _millis(column)
    if null.any() and plan.on_null_event_time == NullEventTime.ERROR:
        raise null_event_time_error(event_time, int(null.sum()))
    keys = list(plan.keys)
    if keys:
        key_codes = _key_codes(df, keys)
        key_table = df[keys].groupby(key_codes).first()
    else:
        key_codes, key_table = np.zeros(len(df), dtype=np.int64), None
    values = df.drop(columns=keys)  # keys travel as codes; restored below
    valid = np.flatnonzero(~null)
    ts = ts_all[valid]
    reducer = Reducer(plan.windowing, plan.core_aggregations)
    if arrival_time is None:
        steps: list[Step] = [
            MicroBatch(Bundle(key_codes[valid], ts, values.iloc[valid]), watermark=MAX_TIMESTAMP)
        ]
    else:
        steps = _replay_steps(df, plan, arrival_time, valid, ts, key_codes, values)
    emissions = [apply_step(reducer, step) for step in steps]
    for i, em in enumerate(emissions):
        em.panes["step"] = i
        em.dropped["step"] = i
    out = Emission.concat(emissions)
    dropped = out.dropped.rename(columns={"timestamp": "event_time"})
    if null.any():
        letters = _null_letters(values, key_codes, null)
        parts = [f for f in (dropped, letters) if len(f)]
        dropped = _in_input_types(pd.concat(parts, ignore_index=True), values)
    dropped["elements"] = np.ones(len(dropped), dtype=np.int64)
    out = Emission(_with_keys(out.panes, key_table), _with_keys(dropped, key_table))
    if is_datetime:
        tz = column.dt.tz
        for frame in (out.panes, out.dropped):
            for col in ("window_start", "window_end", "timestamp", "event_time"):
                if col in frame:
                    frame[col] = _to_datetime(frame[col], tz)
    return out


def _key_codes(df: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Each row's key group; PlanError naming the key column whose values cannot be
    grouped (lists, dicts: unhashable), instead of pandas' TypeError."""
    try:
        return df.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    except TypeError:
        for key in keys:
            for value in df[key]:
                try:
                    hash(value)
                except TypeError:
                    raise PlanError(
                        f"key column {key!r} holds {type(value).__name__} values, "
                        "which cannot be grouped",
                        argument=key,
                        found=repr(value),
                        fix=f"Group by hashable values, e.g. df[{key!r}].map(tuple) or .map(str)",
                    ) from None
        raise


def _replay_steps(df, plan, arrival_time, valid, ts, key_codes, values) -> list[Step]:
    arrival = _millis(df[arrival_time])[0][valid]
    order = np.argsort(arrival, kind="stable")
    cuts = np.flatnonzero(np.r_[True, arrival[order][1:] != arrival[order][:-1]])
    batches = np.split(order, cuts[1:])
    frame = df.iloc[valid]
    watermarks = WATERMARKS[type(plan.watermark)](plan.watermark, frame, ts, batches)
    steps: list[Step] = []
    for part, (arrival_wm, after_wm) in zip(batches, watermarks, strict=True):
        rows = valid[part]
        steps.append(
            MicroBatch(
                Bundle(key_codes[rows], ts[part], values.iloc[rows]),
                watermark=after_wm,
                now=int(arrival[part[0]]),
                arrival_watermark=arrival_wm,
            )
        )
    last = int(arrival.max()) if len(arrival) else 0
    steps.append(end_of_input(now=last))
    return steps


def _in_input_types(letters: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """The dead letters' input columns in the input's types: joining frames in which
    a column is missing or empty turns integers into floats."""
    for column in values.columns:
        given = values[column].dtype
        if column in letters and letters[column].dtype != given and letters[column].notna().all():
            with contextlib.suppress(TypeError, ValueError):
                letters[column] = letters[column].astype(given)
    return letters


def _null_letters(values: pd.DataFrame, key_codes: np.ndarray, null: np.ndarray) -> pd.DataFrame:
    rows = np.flatnonzero(null)
    letters = pd.DataFrame(
        {
            "key": key_codes[rows],
            "event_time": np.full(len(rows), np.nan),
            "window_start": np.full(len(rows), np.nan),
            "window_end": np.full(len(rows), np.nan),
            "reason": DropReason.NULL_EVENT_TIME.value,
        }
    )
    inputs = values.iloc[rows].reset_index(drop=True)
    letters = pd.concat([letters, inputs.drop(columns=letters.columns, errors="ignore")], axis=1)
    letters["step"] = 0
    return letters


def _millis(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Event times as int64 epoch ms, and where they are null (tz-aware times are instants)."""
    null = col.isna().to_numpy()
    if pd.api.types.is_datetime64_any_dtype(col):
        utc = col.dt.tz_convert("UTC").dt.tz_localize(None) if col.dt.tz is not None else col
        ms = utc.to_numpy().astype("datetime64[ms]").astype(np.int64)
    else:
        ms = pd.to_numeric(col).to_numpy(dtype=np.int64, na_value=0)
    return ms, null


def _to_datetime(col: pd.Series, tz) -> pd.Series:
    values = pd.to_numeric(col, errors="coerce").to_numpy(np.float64)
    inside = (values > -(2**62) + 86_400_000) & (values < 2**62 - 2 * 86_400_000)
    out = pd.Series(pd.to_datetime(np.where(inside, values, np.nan), unit="ms"), index=col.index)
    return out.dt.tz_localize("UTC").dt.tz_convert(tz) if tz is not None else out


def _with_keys(frame: pd.DataFrame, key_table: pd.DataFrame | None) -> pd.DataFrame:
    if "key" not in frame:
        return frame
    codes = frame.pop("key")
    if key_table is None or not len(frame):
        return frame
    keys = key_table.reindex(pd.to_numeric(codes).to_numpy()).reset_index(drop=True)
    return pd.concat([keys, frame.reset_index(drop=True)], axis=1)
