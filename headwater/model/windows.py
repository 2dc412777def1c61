"""Where in event time: window functions (assign, and merge for merging ones).

Windows are half-open intervals ``[start, end)`` of int64 milliseconds, kept as
parallel ``start``/``end`` arrays, never as objects: a whole bundle is assigned
at once. A merging window function rewrites the set of live windows of each key
(sessions union overlapping intervals; other functions may split or shrink).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwater.model.time import GLOBAL_WINDOW_END, MIN_TIMESTAMP, to_millis

Assignment = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(row, start, end)``: input row ``row[i]`` lands in window ``[start[i], end[i])``."""


class WindowFn:
    """Base of window functions. Subclass and implement :meth:`assign`.

    A merging function (``is_merging = True``) also implements :meth:`merge`.
    """

    is_merging: bool = False

    def assign(self, timestamps: np.ndarray) -> Assignment:
        """Windows of every timestamp of a batch (vectorized)."""
        raise NotImplementedError

    def merge(
        self, keys: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The window each live window becomes, per key.

        ``keys`` are int codes. Returns ``(start, end)`` arrays aligned with the
        input: windows of one key that map to the same result are merged into
        it. A result may be larger (sessions) or smaller (validity windows)
        than its inputs; a window that maps to itself is unchanged.
        """
        return starts, ends

    def output_time(self, starts: np.ndarray, ends: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Output timestamp of elements for ``EARLIEST_TRANSFORMED``; identity by default."""
        return ts


@dataclass(frozen=True)
class GlobalWindows(WindowFn):
    """One window holding all of time; it closes only at the end of input."""

    def assign(self, timestamps: np.ndarray) -> Assignment:
        n = len(timestamps)
        return (
            np.arange(n),
            np.full(n, MIN_TIMESTAMP, dtype=np.int64),
            np.full(n, GLOBAL_WINDOW_END, dtype=np.int64),
        )


@dataclass(frozen=True, init=False)
class FixedWindows(WindowFn):
    """Tumbling windows ``[offset + k*size, offset + (k+1)*size)``."""

    size: int
    offset: int

    def __init__(self, size, offset=0) -> None:
        object.__setattr__(self, "size", to_millis(size))
        object.__setattr__(self, "offset", to_millis(offset) % max(to_millis(size), 1))
        if self.size <= 0:
            raise ValueError(f"FixedWindows size must be positive, got {size!r}")

    def assign(self, timestamps: np.ndarray) -> Assignment:
        ts = np.asarray(timestamps, dtype=np.int64)
        start = ts - np.mod(ts - self.offset, self.size)
        return np.arange(len(ts)), start, start + self.size


@dataclass(frozen=True, init=False)
class SlidingWindows(WindowFn):
    """Hopping windows of ``size`` starting every ``period``; an element lands in
    ``ceil(size / period)`` of them."""

    size: int
    period: int
    offset: int

    def __init__(self, size, period, offset=0) -> None:
        object.__setattr__(self, "size", to_millis(size))
        object.__setattr__(self, "period", to_millis(period))
        object.__setattr__(self, "offset", to_millis(offset) % max(to_millis(period), 1))
        if self.size <= 0 or self.period <= 0:
            raise ValueError(
                f"SlidingWindows needs positive size and period, got {size!r}, {period!r}"
            )

    def assign(self, timestamps: np.ndarray) -> Assignment:
        ts = np.asarray(timestamps, dtype=np.int64)
        last = ts - np.mod(ts - self.offset, self.period)
        k = -(-self.size // self.period)
        starts = last[:, None] - np.arange(k, dtype=np.int64)[None, :] * self.period
        inside = starts + self.size > ts[:, None]
        rows = np.broadcast_to(np.arange(len(ts))[:, None], starts.shape)[inside]
        start = starts[inside]
        return rows, start, start + self.size


@dataclass(frozen=True, init=False)
class CumulativeWindows(WindowFn):
    """Flink's cumulating windows: in each period ``[p, p + size)`` (``p`` aligned
    to ``size`` and ``offset``), the windows ``[p, p + step)``, ``[p, p + 2*step)``
    ... ``[p, p + size)``, one per step, all starting at ``p``. An element lands in
    every window of its period that ends after it, so an early window of a period
    is complete (and fires) before the later ones. ``step`` must divide ``size``.
    """

    step: int
    size: int
    offset: int

    def __init__(self, step, size, offset=0) -> None:
        object.__setattr__(self, "step", to_millis(step))
        object.__setattr__(self, "size", to_millis(size))
        object.__setattr__(self, "offset", to_millis(offset) % max(to_millis(size), 1))
        if self.step <= 0 or self.size <= 0:
            raise ValueError(
                f"CumulativeWindows needs positive step and size, got {step!r}, {size!r}"
            )
        if self.size % self.step:
            raise ValueError(
                f"CumulativeWindows' step ({self.step} ms) must divide its size "
                f"({self.size} ms): the last window of a period is the whole period"
            )

    def assign(self, timestamps: np.ndarray) -> Assignment:
        ts = np.asarray(timestamps, dtype=np.int64)
        start = ts - np.mod(ts - self.offset, self.size)
        first_end = ts - np.mod(ts - self.offset, self.step) + self.step
        # Windows per element: its own step's end up to the period's end (a
        # repeat, not a dense (elements x steps) matrix: a day of 1 s steps is fine).
        counts = (start + self.size - first_end) // self.step + 1
        rows = np.repeat(np.arange(len(ts)), counts)
        nth = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        return rows, start[rows], first_end[rows] + nth * self.step


def _sorted_by_key_start(keys, starts, ends):
    order = np.lexsort((ends, starts, keys))
    return order, keys[order], starts[order], ends[order]


@dataclass(frozen=True, init=False)
class Sessions(WindowFn):
    """Session windows: each element opens ``[t, t + gap)``; overlapping windows
    of a key merge into their union.

    ``merge_touching``: whether windows that only touch (``[a, b)`` and
    ``[b, c)``, a row exactly one gap after the last) merge too. Beam keeps them
    apart (the default); Flink and Spark merge them, and SQL's ``SESSION`` does
    as they do, so that a query means what it means there."""

    gap: int
    merge_touching: bool = False
    is_merging = True

    def __init__(self, gap, merge_touching: bool = False) -> None:
        object.__setattr__(self, "gap", to_millis(gap))
        object.__setattr__(self, "merge_touching", bool(merge_touching))
        if self.gap <= 0:
            raise ValueError(f"Sessions gap must be positive, got {gap!r}")

    def assign(self, timestamps: np.ndarray) -> Assignment:
        ts = np.asarray(timestamps, dtype=np.int64)
        return np.arange(len(ts)), ts.copy(), ts + self.gap

    def merge(self, keys, starts, ends):
        return merge_overlapping(keys, starts, ends, touching=self.merge_touching)


def merge_overlapping(
    keys: np.ndarray, starts: np.ndarray, ends: np.ndarray, touching: bool = False
):
    """Interval union per key: one sort plus a running maximum (vectorized).

    Windows merge when they overlap (``start < running end``); touching windows
    ``[a, b)`` and ``[b, c)`` stay apart, as in Beam, unless ``touching``
    (``start <= running end``, as in Flink's and Spark's sessions).
    """
    n = len(keys)
    if n == 0:
        return starts, ends
    order, k, s, e = _sorted_by_key_start(keys, starts, ends)
    new_key = np.r_[True, k[1:] != k[:-1]]
    # Running max of end within each key: cummax over (key offset + end) keeps keys apart.
    key_run = np.cumsum(new_key) - 1
    run_end = pd.Series(e).groupby(key_run).cummax().to_numpy()
    starts_group = new_key.copy()
    apart = s[1:] > run_end[:-1] if touching else s[1:] >= run_end[:-1]
    starts_group[1:] |= apart
    group = np.cumsum(starts_group) - 1
    g_start = np.minimum.reduceat(s, np.flatnonzero(starts_group))
    g_end = np.maximum.reduceat(e, np.flatnonzero(starts_group))
    out_s = np.empty(n, dtype=np.int64)
    out_e = np.empty(n, dtype=np.int64)
    out_s[order] = g_start[group]
    out_e[order] = g_end[group]
    return out_s, out_e


@dataclass(frozen=True)
class ValidityWindows(WindowFn):
    """Each element is valid from its timestamp until the key's next element.

    A merging function whose results are *smaller* than its inputs: a new
    element splits the window it falls into. Useful for "value as of time t"
    (slowly changing dimensions).
    """

    is_merging = True

    def assign(self, timestamps: np.ndarray) -> Assignment:
        ts = np.asarray(timestamps, dtype=np.int64)
        return np.arange(len(ts)), ts.copy(), np.full(len(ts), GLOBAL_WINDOW_END, dtype=np.int64)

    def merge(self, keys, starts, ends):
        n = len(keys)
        if n == 0:
            return starts, ends
        order, k, s, _ = _sorted_by_key_start(keys, starts, ends)
        # Windows sharing a start merge; a window ends where the key's next one begins.
        group_start = np.r_[True, (k[1:] != k[:-1]) | (s[1:] != s[:-1])]
        gid = np.cumsum(group_start) - 1
        first = np.flatnonzero(group_start)
        g_key, g_start = k[first], s[first]
        g_end = np.r_[
            np.where(g_key[1:] == g_key[:-1], g_start[1:], GLOBAL_WINDOW_END), GLOBAL_WINDOW_END
        ]
        out_s = np.empty(n, dtype=np.int64)
        out_e = np.empty(n, dtype=np.int64)
        out_s[order] = s
        out_e[order] = g_end[gid]
        return out_s, out_e


@dataclass(frozen=True)
class CalendarWindows(WindowFn):
    """Calendar days, months or years in a time zone (DST-correct).

    ``CalendarWindows("day", tz="Europe/Berlin")`` gives windows from local
    midnight to local midnight, 23 or 25 hours long on DST changes.
    """

    unit: str = "day"
    tz: str = "UTC"
    every: int = 1

    _UNITS = ("day", "month", "year")

    def __post_init__(self) -> None:
        if self.unit not in self._UNITS:
            raise ValueError(
                f"CalendarWindows unit must be one of {self._UNITS}, got {self.unit!r}"
            )
        if self.every < 1:
            raise ValueError("CalendarWindows every must be >= 1")
        try:
            pd.Timestamp(0).tz_localize(self.tz)
        except (LookupError, TypeError, ValueError):  # pytz's unknown zone is a KeyError
            raise ValueError(
                f"CalendarWindows tz must be a time zone such as 'UTC' or 'Europe/Berlin', "
                f"got {self.tz!r}"
            ) from None

    def assign(self, timestamps: np.ndarray) -> Assignment:
        ts = np.asarray(timestamps, dtype=np.int64)
        local = pd.to_datetime(ts, unit="ms", utc=True).tz_convert(self.tz).tz_localize(None)
        naive = local.to_numpy()
        if self.unit == "day":
            days = naive.astype("datetime64[D]").astype(np.int64)
            first = days - np.mod(days, self.every)
            start = first.astype("datetime64[D]")
            end = (first + self.every).astype("datetime64[D]")
        else:
            months = naive.astype("datetime64[M]").astype(np.int64)
            step = self.every * (12 if self.unit == "year" else 1)
            first = months - np.mod(months, step)
            start = first.astype("datetime64[M]")
            end = (first + step).astype("datetime64[M]")
        return np.arange(len(ts)), self._to_utc(start), self._to_utc(end)

    def _to_utc(self, naive: np.ndarray) -> np.ndarray:
        idx = pd.DatetimeIndex(naive.astype("datetime64[ns]")).tz_localize(
            self.tz, ambiguous=True, nonexistent="shift_forward"
        )
        return (idx.asi8 // 1_000_000).astype(np.int64)
