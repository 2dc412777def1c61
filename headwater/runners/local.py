"""The deterministic local runner: drives the core from a test stream.

Processing time is virtual: it moves only when the stream says so. Every step
(a bundle, a watermark advance, a clock advance) is applied in order, so a run
is a pure function of the stream: tests and replays are exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
