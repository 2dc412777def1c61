"""Event and processing time: int64 epoch milliseconds, durations, sentinels.

Inside the core every timestamp is an int64 number of milliseconds since the
epoch (Spark's watermark and timer resolution). A window is the half-open
interval ``[start, end)``; its max timestamp is ``end - 1``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re

import numpy as np

#: Smallest representable timestamp (the start of the global window).
MIN_TIMESTAMP: int = -(2**62)
#: Largest representable timestamp: the watermark at the end of input.
MAX_TIMESTAMP: int = 2**62
#: End of the global window. Beam ends it one day before the end of time so that
#: the watermark reaching ``MAX_TIMESTAMP`` (end of input) is past it.
GLOBAL_WINDOW_END: int = MAX_TIMESTAMP - 86_400_000
#: "No timer set" in timer columns.
NO_TIMER: int = np.iinfo(np.int64).max


def past_end(end: np.ndarray, after: int) -> np.ndarray:
    """Each window end ``after`` ms later (a window's lateness horizon): the global
    window's end stays where it is, so that only the end of input passes it."""
    return np.where(end >= GLOBAL_WINDOW_END - after, GLOBAL_WINDOW_END, end + after)


_UNIT_MS = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1000,
    "sec": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
    "w": 604_800_000,
    "week": 604_800_000,
    "weeks": 604_800_000,
}
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")
_SQL_INTERVAL = re.compile(r"^\s*INTERVAL\s+'(-?\d+(?:\.\d+)?)'\s+([a-zA-Z]+)\s*$", re.I)


def to_millis(duration: float | int | str | _dt.timedelta | None) -> int:
    """A duration in milliseconds.

    Accepts seconds as a number, a ``timedelta``, ``"2 minutes"``, ``"500 ms"``
    or SQL's ``INTERVAL '2' MINUTE``. ``None`` means zero.
    """
    if duration is None:
        return 0
    if isinstance(duration, _dt.timedelta):
        return round(duration.total_seconds() * 1000)
    if isinstance(duration, bool):
        raise TypeError(f"not a duration: {duration!r}")
    if isinstance(duration, (int, float, np.integer, np.floating)):
        if math.isnan(duration):
            raise ValueError(f"cannot read duration {duration!r}: it is not a number")
        if math.isinf(duration):
            return MAX_TIMESTAMP if duration > 0 else MIN_TIMESTAMP
        return round(float(duration) * 1000)
    if isinstance(duration, str):
        match = _SQL_INTERVAL.match(duration) or _DURATION.match(duration)
        if match:
            unit = match.group(2).lower()
            if unit in _UNIT_MS:
                return round(float(match.group(1)) * _UNIT_MS[unit])
        raise ValueError(
            f"cannot read duration {duration!r}: use seconds, a timedelta, "
            "'2 minutes' or INTERVAL '2' MINUTE"
        )
    raise TypeError(f"not a duration: {duration!r}")


def seconds_to_millis(t: float) -> int:
    """A point in time given in seconds (``inf`` is the end of time)."""
    if math.isinf(t):
        return MAX_TIMESTAMP if t > 0 else MIN_TIMESTAMP
    return round(t * 1000)
