"""Steps: what happens to a pipeline's state at one point of processing time.

Every runner drives the core by the same steps and through :func:`apply_step`
alone, so the order of the parts of a step (docs/semantics.md, "one step") is
written once, here and in :meth:`Reducer.step`:

1. the watermark in force at the rows' arrival is applied (``arrival_watermark``:
   an engine-computed watermark such as Spark's, which predates the batch),
   firing what it makes due;
2. the rows are added; lateness is judged against the watermark at that moment;
3. the watermark advances to ``watermark`` (a source's punctuation that comes
   with the rows);
4. triggers are evaluated once for every window the rows touched or the
   watermark made due, and windows past end + allowed lateness are collected;
5. if ``fire_timers``, processing time advances to ``now`` and the
   processing-time timers due by then fire, earliest first.

A transcript's ``input``, ``watermark`` and ``clock`` events are the one-part
steps :class:`Bundle`, :class:`WatermarkAdvance` and :class:`ClockAdvance`; a Spark micro-batch,
a replay line group with one processing time, or a transcript ``step`` event is
a :class:`MicroBatch` that carries any of them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headwater.model.watermarks import END_OF_INPUT

if TYPE_CHECKING:
    from headwater.model.reducer import Emission, Reducer


@dataclass(frozen=True)
class Bundle:
    """Elements arriving together (one bundle): keys, event times (ms), values.

    ``values`` is a DataFrame or a mapping of input columns, or one sequence
    (the column ``value``), or ``None``.
    """

    keys: Any
    timestamps: Any
    values: Any = None

    def __len__(self) -> int:
        return len(self.timestamps)


@dataclass(frozen=True)
class WatermarkAdvance:
    """The input watermark advances to ``watermark`` (ms); due event-time timers fire."""

    watermark: int


@dataclass(frozen=True)
class ClockAdvance:
    """Processing time advances to ``now`` (ms); due processing-time timers fire."""

    now: int


@dataclass(frozen=True)
class MicroBatch:
    """Several parts of a step at one processing time (see the module docstring)."""

    rows: Bundle | None = None
    watermark: int | None = None
    now: int | None = None
    fire_timers: bool = True
    arrival_watermark: int | None = None


Step = Bundle | WatermarkAdvance | ClockAdvance | MicroBatch


def end_of_input(now: int | None = None) -> MicroBatch:
    """The last step of a bounded input (docs/semantics.md, "End of input"): the
    watermark goes to the end of time, so every pending window fires and is
    collected, and no processing-time timer is left waiting."""
    return MicroBatch(watermark=END_OF_INPUT, now=now)


def as_micro_batch(step: Step) -> MicroBatch:
    """Every step as the general form: a one-part step is a micro-batch with one part."""
    if isinstance(step, MicroBatch):
        return step
    if isinstance(step, Bundle):
        return MicroBatch(rows=step, fire_timers=False)
    if isinstance(step, WatermarkAdvance):
        return MicroBatch(watermark=step.watermark, fire_timers=False)
    if isinstance(step, ClockAdvance):
        return MicroBatch(now=step.now, fire_timers=True)
    raise TypeError(f"not a step: {step!r}")


def apply_step(reducer: Reducer, step: Step) -> Emission:
    """Apply one step to the per-key state of ``reducer``; the panes and drops it made."""
    from headwater.model.reducer import Emission

    batch = as_micro_batch(step)
    parts = []
    if batch.arrival_watermark is not None and batch.arrival_watermark > reducer.watermark:
        parts.append(reducer.step(watermark=batch.arrival_watermark, now=batch.now, clock=False))
    rows = batch.rows
    parts.append(
        reducer.step(
            None if rows is None else rows.keys,
            None if rows is None else rows.timestamps,
            None if rows is None else rows.values,
            watermark=batch.watermark,
            now=batch.now,
            clock=batch.fire_timers,
        )
    )
    return parts[0] if len(parts) == 1 else Emission.concat(parts)
