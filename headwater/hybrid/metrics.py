"""What the experiment measures, per method (docs/hybrid.md, "Metrics").

All times are processing times in ms on the stream's clock (``arrival``); a
result's error is relative to the exact result of its window (the query's
bounded plan over the whole stream), a window with no stream result counting
as 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from headwater.hybrid.hpm import AppliedCorrection, StreamRun
from headwater.hybrid.pipeline import Query


@dataclass(frozen=True)
class MethodMetrics:
    """One method's numbers in ``metrics.json`` (seconds, fractions)."""

    avg_buffer_s: float
    avg_latency_s: float
    stream_violation_rate: float
    final_max_rel_error: float
    corrected_windows: int | None = None
    correction_delay_s: float | None = None
    corrections: int | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def window_keys(q: Query) -> list[str]:
    return [q.key, "window_start", "window_end"]


def relative_errors(values: pd.DataFrame, truth: pd.DataFrame, q: Query) -> np.ndarray:
    """|value - exact| / |exact| for every window of ``truth`` (a missing value is 0)."""
    keys = window_keys(q)
    merged = truth[[*keys, q.output]].merge(
        values[[*keys, q.output]].rename(columns={q.output: "__v"}), on=keys, how="left"
    )
    exact = merged[q.output].to_numpy(np.float64)
    got = merged["__v"].fillna(0).to_numpy(np.float64)
    return np.abs(got - exact) / np.maximum(np.abs(exact), np.finfo(float).tiny)


def final_values(run: StreamRun, corrections: list[AppliedCorrection], q: Query) -> pd.DataFrame:
    """The stream's values with every correction applied (the last one per window wins)."""
    keys = window_keys(q)
    rows = [run.panes[[*keys, q.output]]] + [c.rows[[*keys, q.output]] for c in corrections]
    return pd.concat(rows, ignore_index=True).drop_duplicates(keys, keep="last")


def stream_metrics(run: StreamRun, truth: pd.DataFrame, q: Query, eps: float) -> dict:
    """Buffer, latency and violation rate of a stream run (shared by AQ-K-slack and HPM)."""
    buffers = [r.trace.slack.mean() for r in run.shards if len(r.trace.slack)]
    latency = run.panes["time"].to_numpy() - run.panes["window_end"].to_numpy()
    errors = relative_errors(run.panes, truth, q)
    return {
        "avg_buffer_s": float(np.mean(buffers)) / 1000,
        "avg_latency_s": float(latency.mean()) / 1000,
        "stream_violation_rate": float((errors >= eps).mean()),
    }


def correction_metrics(corrections: list[AppliedCorrection], q: Query) -> dict:
    """How many windows the corrections changed, and how long a late tuple waited
    (from its arrival to the correction of its window), on average over windows."""
    keys = window_keys(q)
    waits, changed = [], set()
    for c in corrections:
        first = c.late.groupby(keys)["time"].min().reset_index()
        fixed = first.merge(c.rows[keys], on=keys)
        waits.append(c.time - fixed["time"].to_numpy())
        changed.update(map(tuple, c.rows[keys].to_numpy().tolist()))
    wait = np.concatenate(waits) if waits else np.zeros(0)
    return {
        "corrected_windows": len(changed),
        "correction_delay_s": float(wait.mean()) / 1000 if len(wait) else 0.0,
        "corrections": len(corrections),
    }


def accuracy_over_time(
    run: StreamRun, corrections: list[AppliedCorrection], truth: pd.DataFrame, q: Query, times
) -> np.ndarray:
    """At each processing time: the fraction of the results emitted so far that are exact
    (the corrections applied by then included)."""
    out = []
    for t in times:
        emitted = run.panes[run.panes["time"] <= t]
        if not len(emitted):
            out.append(np.nan)
            continue
        done = [c for c in corrections if c.time <= t]
        current = final_values(StreamRun(emitted, run.dead_letters, run.shards), done, q)
        current = current.merge(emitted[window_keys(q)], on=window_keys(q))
        seen = truth.merge(emitted[window_keys(q)], on=window_keys(q))
        out.append(float((relative_errors(current, seen, q) == 0).mean()))
    return np.asarray(out)
