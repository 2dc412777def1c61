"""A windowing strategy: the Where, When and How of one grouping."""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.model.panes import Accumulation, TimestampCombiner
from headwater.model.time import to_millis
from headwater.model.triggers import Default, Trigger
from headwater.model.windows import GlobalWindows, WindowFn


@dataclass(frozen=True)
class WindowingStrategy:
    """Window function, trigger, accumulation mode, allowed lateness (ms) and
    output timestamp combiner of a grouping."""

    window_fn: WindowFn = field(default_factory=GlobalWindows)
    trigger: Trigger = field(default_factory=Default)
    accumulation: Accumulation = Accumulation.ACCUMULATING
    allowed_lateness: int = 0
    timestamp_combiner: TimestampCombiner = TimestampCombiner.END_OF_WINDOW
    #: how long (ms) a window's state is kept after its allowed lateness, so that
    #: a firing that waits (SQL's EMIT AFTER DELAY) still happens; input arriving
    #: in that time is late all the same
    retention: int = 0

    @classmethod
    def of(
        cls,
        window_fn: WindowFn | None = None,
        trigger: Trigger | None = None,
        accumulation: Accumulation | str = Accumulation.ACCUMULATING,
        allowed_lateness=0,
        timestamp_combiner: TimestampCombiner | str = TimestampCombiner.END_OF_WINDOW,
    ) -> WindowingStrategy:
        """Build a strategy from user-friendly values (strings, durations)."""
        return cls(
            window_fn=window_fn or GlobalWindows(),
            trigger=trigger or Default(),
            accumulation=Accumulation.of(accumulation),
            allowed_lateness=to_millis(allowed_lateness),
            timestamp_combiner=TimestampCombiner.of(timestamp_combiner),
        )
