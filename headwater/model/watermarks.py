"""Where the watermark comes from: watermark strategies, held by the plan.

A watermark is a monotone function of processing time that says "no element
with an event time before this is expected any more". The strategy says how
it is derived; each runner declares which strategies it executes (a registry
keyed by class, see ``headwater.runners``), so a new strategy (the hybrid
model's quality-driven buffer) is a new class here plus one registry entry per
runner, never a new code path inside a runner.

* :class:`BoundedOutOfOrderness`: the largest event time seen so far minus a
  fixed delay (Spark's ``withWatermark``). The watermark a micro-batch's rows
  are judged against is computed from the *earlier* micro-batches, as Spark
  does.
* :class:`Punctuated`: the source carries the watermark with its data (a
  column, or watermark events in a replay file).
* :class:`Perfect`: the source knows its input completely. A bounded input is
  the common case (the watermark jumps to the end of time after all rows); a
  replay of a recorded frame gets the oracle watermark (the smallest event
  time still to arrive), so no element is ever late.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from headwater.model.time import MAX_TIMESTAMP, MIN_TIMESTAMP, to_millis


class WatermarkStrategy:
    """Base of watermark strategies."""

    def describe(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class BoundedOutOfOrderness(WatermarkStrategy):
    """Watermark = the largest event time seen in earlier micro-batches minus ``delay`` (ms)."""

    delay: int

    def __post_init__(self) -> None:
        if self.delay < 0:
            raise ValueError(f"a watermark delay cannot be negative, got {self.delay} ms")

    def arrival_watermarks(self, batch_max: np.ndarray) -> np.ndarray:
        """Watermark in force at the arrival of each of a sequence of micro-batches,
        given each batch's largest event time (vectorized: a running maximum)."""
        seen = np.maximum.accumulate(np.asarray(batch_max, dtype=np.int64))
        out = np.full(len(seen), MIN_TIMESTAMP, dtype=np.int64)
        out[1:] = seen[:-1] - self.delay
        return out

    def describe(self) -> str:
        return f"bounded out-of-orderness of {self.delay} ms"


@dataclass(frozen=True)
class Punctuated(WatermarkStrategy):
    """The source carries the watermark: column ``column`` (epoch ms, the watermark
    after the row's micro-batch), or watermark events of a replay."""

    column: str = "watermark_ms"

    def describe(self) -> str:
        return f"punctuated (column {self.column!r})"


@dataclass(frozen=True)
class Perfect(WatermarkStrategy):
    """The source knows its whole input: no element is ever late."""

    def arrival_watermarks(self, batch_min: np.ndarray) -> np.ndarray:
        """The oracle watermark at each batch's arrival: the smallest event time of
        that batch and of every later one (a suffix minimum, so monotone)."""
        mins = np.asarray(batch_min, dtype=np.int64)
        if not len(mins):
            return mins
        return np.minimum.accumulate(mins[::-1])[::-1] - 1

    def describe(self) -> str:
        return "perfect"


def watermark_strategy(spec: Any) -> WatermarkStrategy | None:
    """A strategy from what users write: a strategy, ``"punctuated"``,
    ``"perfect"``, or a duration (``"10 seconds"``, seconds as a number, a
    ``timedelta``) for bounded out-of-orderness. ``None`` stays ``None``
    (the front end picks the default for its kind of input)."""
    if spec is None or isinstance(spec, WatermarkStrategy):
        return spec
    if isinstance(spec, str):
        word = spec.strip().lower()
        if word == "punctuated":
            return Punctuated()
        if word == "perfect":
            return Perfect()
    try:
        delay = to_millis(spec)
    except (TypeError, ValueError):
        raise ValueError(
            f"cannot read watermark {spec!r}: give a delay such as '10 seconds' (bounded "
            "out-of-orderness), 'punctuated' (a watermark_ms column) or 'perfect'"
        ) from None
    if delay < 0:
        raise ValueError(
            f"the watermark delay {spec!r} is negative: a watermark ahead of the rows "
            "would make on-time rows late"
        )
    return BoundedOutOfOrderness(delay)


#: The watermark after the whole of a bounded input.
END_OF_INPUT = MAX_TIMESTAMP
