"""EMIT: when a query's result is materialized, as triggers of the model.

Every EMIT form is a trigger on the query's event-time groups (windows); the
rendering (a table view, or the changelog with ``EMIT STREAM``) is separate:
both come from the same changelog of the groups' results.

=========================================  =============================================
EMIT                                       trigger per event-time group
=========================================  =============================================
(none), ``STREAM``                         ``Repeatedly(AfterCount(1))``: every change
``AFTER WATERMARK``                        ``AfterWatermark(late=AfterCount(1))``
``AFTER DELAY d``                          ``Repeatedly(AfterProcessingTime(d))``
``AFTER DELAY d AND AFTER WATERMARK``      ``AfterWatermark(early=AfterProcessingTime(d),
                                           late=AfterProcessingTime(d))``
=========================================  =============================================

Accumulation is accumulating: a group's result is recomputed from everything
it holds, and the changelog is its difference from what was materialized last.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from headwater.model.triggers import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    Repeatedly,
    Trigger,
)


@dataclass(frozen=True)
class Materialization:
    """The EMIT clause of a query: the rendering and the trigger."""

    stream: bool = False
    after_watermark: bool = False
    delay: int | None = None

    @classmethod
    def of(cls, emit) -> Materialization:
        """From the parsed ``Emit`` node (``None``: no EMIT clause)."""
        if emit is None:
            return cls()
        return cls(
            stream=bool(emit.args.get("stream")),
            after_watermark=bool(emit.args.get("watermark")),
            delay=emit.args.get("delay"),
        )

    def trigger(self) -> Trigger:
        if self.after_watermark and self.delay:
            return AfterWatermark(early=self._delayed(), late=self._delayed())
        if self.after_watermark:
            return AfterWatermark(late=AfterCount(1))
        if self.delay:
            return Repeatedly(self._delayed())
        return Repeatedly(AfterCount(1))

    def retention(self) -> int:
        """How long (ms) past its allowed lateness a group's state is kept. Under
        ``AFTER DELAY`` alone a group's last change also waits for the delay (a
        group materializes at most once per delay), so the group is kept ``delay``
        longer; input arriving then is late all the same (a dead letter)."""
        return self.delay if self.delay and not self.after_watermark else 0

    def _delayed(self) -> AfterProcessingTime:
        return AfterProcessingTime(timedelta(milliseconds=self.delay or 0))

    def describe(self) -> str:
        after = []
        if self.delay:
            after.append(f"AFTER DELAY {self.delay} ms")
        if self.after_watermark:
            after.append("AFTER WATERMARK")
        words = (["STREAM"] if self.stream else []) + ([" AND ".join(after)] if after else [])
        return "EMIT " + " ".join(words) if words else "(no EMIT: a table view)"
