"""The Gamma rule of the hybrid processing model: when the batch module corrects.

The stream module's dead letters (tuples behind every window that held them)
are registered in arrival order; once those registered since the last
correction span more than Gamma in event time, a correction is due
(docs/hybrid.md, "Corrections"). It lives in the model because every consumer
of dead letters applies it: the hybrid pipelines and SQL's
``'correction.archive'`` option.
"""

from __future__ import annotations

import numpy as np


def correction_points(arrival: np.ndarray, event_time: np.ndarray, gamma: int) -> list[int]:
    """Processing times at which the registered late tuples (in arrival order) first
    span more than ``gamma`` ms of event time since the last correction."""
    points: list[int] = []
    if not len(arrival):
        return points
    times, starts = np.unique(arrival, return_index=True)
    lows = np.minimum.reduceat(event_time, starts)
    highs = np.maximum.reduceat(event_time, starts)
    lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for t, low, high in zip(times, lows, highs, strict=True):
        lo, hi = min(lo, low), max(hi, high)
        if hi - lo > gamma:
            points.append(int(t))
            lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    return points
