"""The deterministic local runner: drives the core from a test stream.

Processing time is virtual: it moves only when the stream says so. Every step
(a bundle, a watermark advance, a clock advance) is applied in order, so a run
is a pure function of the stream: tests and replays are exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from headwater.model.reducer import Aggregations, Emission, Reducer
from headwater.model.strategy import WindowingStrategy
from headwater.model.time import MAX_TIMESTAMP, to_millis


@dataclass(frozen=True)
class Bundle:
    """Elements arriving together: keys, event timestamps (ms) and values."""

    keys: list
    timestamps: list[int]
    values: pd.DataFrame | list | None = None


@dataclass(frozen=True)
class WatermarkAdvance:
    watermark: int


@dataclass(frozen=True)
class ClockAdvance:
    now: int


Step = Bundle | WatermarkAdvance | ClockAdvance


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


def apply_step(reducer: Reducer, step: Step) -> Emission:
    """Apply one step of a timeline to a reducer."""
    if isinstance(step, Bundle):
        return reducer.add_bundle(step.keys, step.timestamps, step.values)
    if isinstance(step, WatermarkAdvance):
        return reducer.advance_watermark(step.watermark)
    return reducer.advance_clock(step.now)


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


def run_frame(
    df: pd.DataFrame,
    *,
    key_cols: tuple[str, ...],
    event_time: str,
    strategy: WindowingStrategy,
    aggregations: Aggregations,
    arrival_time: str | None = None,
    watermark_delay: int | None = None,
) -> Emission:
    """Run a windowed aggregation over a pandas DataFrame in this process.

    Without ``arrival_time`` the frame is a complete (bounded) input: one step
    with the watermark at the end of time, as the Spark batch runner does. With
    it, rows are replayed in bundles of equal arrival (processing) time, one
    micro-batch each (TRANSCRIPTS.md rule 7); the watermark before a bundle is
    the largest event time of the earlier bundles minus ``watermark_delay``
    (Spark's bounded out-of-orderness), and the end of input is +inf.
    Returned panes and dropped rows carry the key columns and a ``step``.
    """
    if event_time not in df.columns:
        raise ValueError(f"no event-time column {event_time!r} (columns: {list(df.columns)})")
    is_datetime = pd.api.types.is_datetime64_any_dtype(df[event_time])
    ts = _millis(df[event_time])
    if ts.isna().any():
        raise ValueError(
            f"{int(ts.isna().sum())} rows have a null event time in column {event_time!r}"
        )
    ts = ts.to_numpy(np.int64)
    if key_cols:
        key_codes = df.groupby(list(key_cols), sort=False, dropna=False).ngroup().to_numpy()
        key_table = df[list(key_cols)].groupby(key_codes).first()
    else:
        key_codes, key_table = np.zeros(len(df), dtype=np.int64), None
    reducer = Reducer(strategy, aggregations)
    values = df.drop(columns=list(key_cols))  # keys travel as codes; restored below
    if arrival_time is None:
        emissions = [reducer.step(key_codes, ts, values, watermark=MAX_TIMESTAMP)]
    else:
        arrival = _millis(df[arrival_time]).to_numpy(np.int64)
        order = np.argsort(arrival, kind="stable")
        cuts = np.flatnonzero(np.r_[True, arrival[order][1:] != arrival[order][:-1]])
        emissions, seen = [], None
        for part in np.split(order, cuts[1:]):
            wm = None if seen is None or watermark_delay is None else seen - watermark_delay
            now = int(arrival[part[0]])
            # As in Spark, the batch's watermark comes from earlier batches: it is
            # advanced first, and the batch's rows are judged late against it.
            before = reducer.advance_watermark(wm, now) if wm is not None else None
            em = reducer.step(key_codes[part], ts[part], values.iloc[part], now=now)
            emissions.append(Emission.concat([before, em]) if before is not None else em)
            batch_max = int(ts[part].max())
            seen = batch_max if seen is None else max(seen, batch_max)
        emissions.append(reducer.step(watermark=MAX_TIMESTAMP, now=int(arrival.max())))
    for i, em in enumerate(emissions):
        em.panes["step"] = i
        em.dropped["step"] = i
    out = Emission.concat(emissions)
    out = Emission(_with_keys(out.panes, key_table), _with_keys(out.dropped, key_table))
    if is_datetime:
        for frame in (out.panes, out.dropped):
            for col in ("window_start", "window_end", "timestamp"):
                if col in frame:
                    frame[col] = _to_datetime(frame[col])
    return out


def _millis(col: pd.Series) -> pd.Series:
    if pd.api.types.is_datetime64_any_dtype(col):
        utc = col.dt.tz_convert("UTC") if col.dt.tz is not None else col
        out = pd.Series(utc.to_numpy().astype("datetime64[ms]").astype(np.int64), index=col.index)
        return out.where(col.notna())
    return pd.to_numeric(col)


def _to_datetime(col: pd.Series) -> pd.Series:
    values = pd.to_numeric(col, errors="coerce").to_numpy(np.float64)
    inside = (values > -(2**62) + 86_400_000) & (values < 2**62 - 2 * 86_400_000)
    return pd.Series(pd.to_datetime(np.where(inside, values, np.nan), unit="ms"), index=col.index)


def _with_keys(frame: pd.DataFrame, key_table: pd.DataFrame | None) -> pd.DataFrame:
    if "key" not in frame:
        return frame
    codes = frame.pop("key")
    if key_table is None or not len(frame):
        return frame
    keys = key_table.reindex(pd.to_numeric(codes).to_numpy()).reset_index(drop=True)
    return pd.concat([keys, frame.reset_index(drop=True)], axis=1)
