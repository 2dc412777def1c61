"""When in processing time: triggers, evaluated column-wise.

A trigger is an immutable description (``AfterCount(2)``). Its state lives in
columns of the reducer's window table, one column per field of every node of
the trigger tree, named by the node's path (``"0/early/count"``). Every method
works on an array ``rows`` of window-table rows at once, so firing decisions
for a whole bundle cost a few numpy operations, not a loop per window.

Semantics follow Beam's trigger state machines (``apache_beam.transforms.
trigger``) and the rules of docs/semantics.md: counts add when windows merge, the
earliest pending processing-time timer wins, and a node that finishes stops its
parent (``AfterEach`` moves on, ``Repeatedly`` resets it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from headwater.model.time import MIN_TIMESTAMP, NO_TIMER, to_millis

Cols = dict[str, np.ndarray]
MergeOp = Literal["sum", "min", "max", "any", "all"]


@dataclass(frozen=True)
class Field:
    """One state column of a trigger node: dtype, empty value, merge rule."""

    dtype: type
    default: object
    merge: MergeOp


@dataclass
class Context:
    """What a trigger sees when evaluated for ``rows``.

    ``end`` holds the window ends of ``rows``. ``timer_horizon`` is the time
    of the processing-time timer being fired at a clock step, and
    ``MIN_TIMESTAMP`` at other steps: elements and watermarks fire no timers.
    """

    watermark: int
    now: int
    end: np.ndarray
    timer_horizon: int = MIN_TIMESTAMP
    count: np.ndarray | None = None  # elements added per row (on_element only)

    def sub(self, mask: np.ndarray) -> Context:
        return Context(
            self.watermark,
            self.now,
            self.end[mask],
            self.timer_horizon,
            None if self.count is None else self.count[mask],
        )


class Trigger:
    """Base of triggers. Subclasses implement the column-wise state machine."""

    #: Children, in order; their paths are ``f"{path}{i}/"``.
    def children(self) -> tuple[Trigger, ...]:
        return ()

    def child_paths(self, path: str) -> list[tuple[Trigger, str]]:
        return [(t, f"{path}{i}/") for i, t in enumerate(self.children())]

    def own_fields(self) -> dict[str, Field]:
        return {}

    def fields(self, path: str = "") -> dict[str, Field]:
        """All state columns of this subtree, by full name."""
        out = {f"{path}{name}": f for name, f in self.own_fields().items()}
        for child, child_path in self.child_paths(path):
            out.update(child.fields(child_path))
        return out

    def sets_end_of_window_timer(self) -> bool:
        """Whether this subtree may wait for the watermark (has an ON_TIME pane).

        The reducer then keeps an end-of-window timer for every window with
        data, so the ON_TIME pane fires even when the watermark part of the
        tree was not yet active when the data arrived (rule 2).
        """
        return any(t.sets_end_of_window_timer() for t in self.children())

    def on_element(self, path: str, cols: Cols, rows: np.ndarray, ctx: Context) -> None:
        for child, child_path in self.child_paths(path):
            child.on_element(child_path, cols, rows, ctx)

    def should_fire(self, path: str, cols: Cols, rows: np.ndarray, ctx: Context) -> np.ndarray:
        raise NotImplementedError

    def on_fire(self, path: str, cols: Cols, rows: np.ndarray, ctx: Context) -> np.ndarray:
        """Update state for ``rows`` that fire; return which of them finished."""
        raise NotImplementedError

    def reset(self, path: str, cols: Cols, rows: np.ndarray) -> None:
        for name, f in self.own_fields().items():
            cols[f"{path}{name}"][rows] = f.default
        for child, child_path in self.child_paths(path):
            child.reset(child_path, cols, rows)

    def on_timers(self, path: str, cols: Cols, rows: np.ndarray, time: int) -> None:
        """Processing time reached ``time`` for ``rows``: mark due timers fired."""
        for child, child_path in self.child_paths(path):
            child.on_timers(child_path, cols, rows, time)

    def next_timer(self, path: str, cols: Cols, rows: np.ndarray) -> np.ndarray:
        """Earliest unfired processing-time timer of the active part of the subtree."""
        out = np.full(len(rows), NO_TIMER, dtype=np.int64)
        for child, child_path in self.child_paths(path):
            out = np.minimum(out, child.next_timer(child_path, cols, rows))
        return out


@dataclass(frozen=True)
class Default(Trigger):
    """Fire when the watermark passes the end of the window, then once for every
    bundle of late data (Beam's default trigger)."""

    def sets_end_of_window_timer(self) -> bool:
        return True

    def should_fire(self, path, cols, rows, ctx):
        return ctx.watermark >= ctx.end

    def on_fire(self, path, cols, rows, ctx):
        return np.zeros(len(rows), dtype=bool)

    def __repr__(self) -> str:
        return "Default()"


@dataclass(frozen=True)
class Never(Trigger):
    """Never fires; the window's data is emitted when it is garbage-collected."""

    def should_fire(self, path, cols, rows, ctx):
        return np.zeros(len(rows), dtype=bool)

    def on_fire(self, path, cols, rows, ctx):
        return np.ones(len(rows), dtype=bool)

    def __repr__(self) -> str:
        return "Never()"


@dataclass(frozen=True)
class AfterCount(Trigger):
    """Fire once the pane holds at least ``count`` elements."""

    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.count, (int, np.integer)) or self.count < 1:
            raise ValueError(f"AfterCount needs a positive integer, got {self.count!r}")

    def own_fields(self):
        return {"count": Field(np.int64, 0, "sum")}

    def on_element(self, path, cols, rows, ctx):
        cols[f"{path}count"][rows] += ctx.count

    def should_fire(self, path, cols, rows, ctx):
        return cols[f"{path}count"][rows] >= self.count

    def on_fire(self, path, cols, rows, ctx):
        return np.ones(len(rows), dtype=bool)

    def __repr__(self) -> str:
        return f"AfterCount({self.count})"


@dataclass(frozen=True, init=False)
class AfterProcessingTime(Trigger):
    """Fire at a processing time set by the pane's first element.

    ``AfterProcessingTime(delay)`` fires ``delay`` after the first element
    arrived. ``AfterProcessingTime(period=p, offset=o)`` fires at the first
    boundary ``o + k*p`` strictly after it (aligned, the paper's AtPeriod), so
    all keys and windows fire together.
    """

    delay: int
    period: int
    offset: int

    def __init__(self, delay=None, *, period=None, offset=0) -> None:
        if (delay is None) == (period is None):
            if delay is None:
                delay = 0
            else:
                raise ValueError("AfterProcessingTime takes a delay or a period, not both")
        object.__setattr__(self, "delay", to_millis(delay) if delay is not None else 0)
        object.__setattr__(self, "period", to_millis(period) if period is not None else 0)
        object.__setattr__(self, "offset", to_millis(offset))
        if self.delay < 0 or self.period < 0:
            raise ValueError("AfterProcessingTime delay and period must not be negative")

    def own_fields(self):
        return {"timer": Field(np.int64, NO_TIMER, "min"), "fired": Field(bool, False, "any")}

    def _timer_for(self, now: int) -> int:
        if self.period:
            return self.offset + ((now - self.offset) // self.period + 1) * self.period
        return now + self.delay

    def on_element(self, path, cols, rows, ctx):
        timer = cols[f"{path}timer"]
        unset = rows[timer[rows] == NO_TIMER]
        timer[unset] = self._timer_for(ctx.now)

    def should_fire(self, path, cols, rows, ctx):
        # A fired timer stays true until reset (as in Beam Java), so
        # AfterAll(AfterCount(2), AfterProcessingTime(10)) fires on the second
        # element even when the delay passed before it.
        return cols[f"{path}fired"][rows] | (cols[f"{path}timer"][rows] <= ctx.timer_horizon)

    def on_fire(self, path, cols, rows, ctx):
        return np.ones(len(rows), dtype=bool)

    def on_timers(self, path, cols, rows, time):
        due = rows[cols[f"{path}timer"][rows] <= time]
        cols[f"{path}fired"][due] = True

    def next_timer(self, path, cols, rows):
        return np.where(cols[f"{path}fired"][rows], NO_TIMER, cols[f"{path}timer"][rows])

    def __repr__(self) -> str:
        if self.period:
            return f"AfterProcessingTime(period={self.period}ms, offset={self.offset}ms)"
        return f"AfterProcessingTime({self.delay}ms)"


@dataclass(frozen=True)
class Repeatedly(Trigger):
    """Fire whenever ``trigger`` fires, resetting it each time it finishes."""

    trigger: Trigger

    def children(self):
        return (self.trigger,)

    def should_fire(self, path, cols, rows, ctx):
        return self.trigger.should_fire(f"{path}0/", cols, rows, ctx)

    def on_fire(self, path, cols, rows, ctx):
        finished = self.trigger.on_fire(f"{path}0/", cols, rows, ctx)
        self.trigger.reset(f"{path}0/", cols, rows[finished])
        return np.zeros(len(rows), dtype=bool)

    def __repr__(self) -> str:
        return f"Repeatedly({self.trigger!r})"


def _repeated(trigger: Trigger | None) -> Trigger | None:
    if trigger is None or isinstance(trigger, Repeatedly):
        return trigger
    return Repeatedly(trigger)


@dataclass(frozen=True, init=False)
class AfterWatermark(Trigger):
    """Fire ON_TIME when the watermark passes the end of the window.

    ``early`` fires speculative panes before that, ``late`` fires for late data
    after it; both repeat (they are wrapped in :class:`Repeatedly`).
    """

    early: Trigger | None = None
    late: Trigger | None = None

    def __init__(self, early: Trigger | None = None, late: Trigger | None = None) -> None:
        object.__setattr__(self, "early", _repeated(early))
        object.__setattr__(self, "late", _repeated(late))

    def sets_end_of_window_timer(self) -> bool:
        return True

    def child_paths(self, path):
        out = []
        if self.early is not None:
            out.append((self.early, f"{path}early/"))
        if self.late is not None:
            out.append((self.late, f"{path}late/"))
        return out

    def own_fields(self):
        return {"is_late": Field(bool, False, "any")} if self.late is not None else {}

    def _is_late(self, path, cols, rows) -> np.ndarray:
        if self.late is None:
            return np.zeros(len(rows), dtype=bool)
        return cols[f"{path}is_late"][rows]

    def on_element(self, path, cols, rows, ctx):
        late = self._is_late(path, cols, rows)
        if self.late is not None and late.any():
            self.late.on_element(f"{path}late/", cols, rows[late], ctx.sub(late))
        if self.early is not None and (~late).any():
            self.early.on_element(f"{path}early/", cols, rows[~late], ctx.sub(~late))

    def should_fire(self, path, cols, rows, ctx):
        late = self._is_late(path, cols, rows)
        out = ctx.watermark >= ctx.end
        if self.late is not None and late.any():
            out[late] = self.late.should_fire(f"{path}late/", cols, rows[late], ctx.sub(late))
        early = ~late & ~out
        if self.early is not None and early.any():
            out[early] = self.early.should_fire(f"{path}early/", cols, rows[early], ctx.sub(early))
        return out

    def on_fire(self, path, cols, rows, ctx):
        late = self._is_late(path, cols, rows)
        finished = np.zeros(len(rows), dtype=bool)
        if self.late is not None and late.any():
            finished[late] = self.late.on_fire(f"{path}late/", cols, rows[late], ctx.sub(late))
        on_time = ~late & (ctx.watermark >= ctx.end)
        if on_time.any():
            if self.late is not None:
                cols[f"{path}is_late"][rows[on_time]] = True
            else:
                finished[on_time] = True
        early = ~late & ~on_time
        if self.early is not None and early.any():
            self.early.on_fire(f"{path}early/", cols, rows[early], ctx.sub(early))
        return finished

    def next_timer(self, path, cols, rows):
        out = np.full(len(rows), NO_TIMER, dtype=np.int64)
        late = self._is_late(path, cols, rows)
        if self.late is not None and late.any():
            out[late] = self.late.next_timer(f"{path}late/", cols, rows[late])
        if self.early is not None and (~late).any():
            out[~late] = self.early.next_timer(f"{path}early/", cols, rows[~late])
        return out

    def __repr__(self) -> str:
        parts = []
        if self.early is not None:
            parts.append(f"early={self.early.trigger!r}")
        if self.late is not None:
            parts.append(f"late={self.late.trigger!r}")
        return f"AfterWatermark({', '.join(parts)})"


@dataclass(frozen=True, init=False)
class _Parallel(Trigger):
    triggers: tuple[Trigger, ...] = field(default=())

    def __init__(self, *triggers: Trigger) -> None:
        if not triggers:
            raise ValueError(f"{type(self).__name__} needs at least one trigger")
        object.__setattr__(self, "triggers", tuple(triggers))

    def children(self):
        return self.triggers

    def _child_results(self, path, cols, rows, ctx):
        return [t.should_fire(p, cols, rows, ctx) for t, p in self.child_paths(path)]

    def _fire_children(self, path, cols, rows, ctx):
        fired, finished = [], []
        for (child, child_path), should in zip(
            self.child_paths(path), self._child_results(path, cols, rows, ctx), strict=True
        ):
            done = np.zeros(len(rows), dtype=bool)
            if should.any():
                done[should] = child.on_fire(child_path, cols, rows[should], ctx.sub(should))
            fired.append(should)
            finished.append(done)
        return fired, finished

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.triggers))})"


class AfterAny(_Parallel):
    """Fire when any sub-trigger fires; finish when a firing one finishes."""

    def should_fire(self, path, cols, rows, ctx):
        return np.logical_or.reduce(self._child_results(path, cols, rows, ctx))

    def on_fire(self, path, cols, rows, ctx):
        fired, finished = self._fire_children(path, cols, rows, ctx)
        return np.logical_or.reduce([f & d for f, d in zip(fired, finished, strict=True)])


class AfterAll(_Parallel):
    """Fire when all sub-triggers are ready to fire; finish when all finish."""

    def should_fire(self, path, cols, rows, ctx):
        return np.logical_and.reduce(self._child_results(path, cols, rows, ctx))

    def on_fire(self, path, cols, rows, ctx):
        fired, finished = self._fire_children(path, cols, rows, ctx)
        return np.logical_and.reduce([~f | d for f, d in zip(fired, finished, strict=True)])


class OrFinally(AfterAny):
    """Fire as ``trigger`` does until ``until`` fires; then fire and finish."""

    def __init__(self, trigger: Trigger, until: Trigger) -> None:
        super().__init__(trigger, until)

    def __repr__(self) -> str:
        return f"OrFinally({self.triggers[0]!r}, {self.triggers[1]!r})"


@dataclass(frozen=True, init=False)
class AfterEach(Trigger):
    """Run sub-triggers in sequence: each fires until it finishes, then the next."""

    triggers: tuple[Trigger, ...] = field(default=())

    def __init__(self, *triggers: Trigger) -> None:
        if not triggers:
            raise ValueError("AfterEach needs at least one trigger")
        object.__setattr__(self, "triggers", tuple(triggers))

    def children(self):
        return self.triggers

    def own_fields(self):
        return {"index": Field(np.int64, 0, "max")}

    def _by_child(self, path, cols, rows):
        index = cols[f"{path}index"][rows]
        for i, (child, child_path) in enumerate(self.child_paths(path)):
            mask = index == i
            if mask.any():
                yield child, child_path, mask

    def on_element(self, path, cols, rows, ctx):
        for child, child_path, mask in self._by_child(path, cols, rows):
            child.on_element(child_path, cols, rows[mask], ctx.sub(mask))

    def should_fire(self, path, cols, rows, ctx):
        out = np.zeros(len(rows), dtype=bool)
        for child, child_path, mask in self._by_child(path, cols, rows):
            out[mask] = child.should_fire(child_path, cols, rows[mask], ctx.sub(mask))
        return out

    def on_fire(self, path, cols, rows, ctx):
        index = cols[f"{path}index"]
        for child, child_path, mask in list(self._by_child(path, cols, rows)):
            done = child.on_fire(child_path, cols, rows[mask], ctx.sub(mask))
            index[rows[mask][done]] += 1
        return index[rows] >= len(self.triggers)

    def next_timer(self, path, cols, rows):
        out = np.full(len(rows), NO_TIMER, dtype=np.int64)
        for child, child_path, mask in self._by_child(path, cols, rows):
            out[mask] = child.next_timer(child_path, cols, rows[mask])
        return out

    def __repr__(self) -> str:
        return f"AfterEach({', '.join(map(repr, self.triggers))})"
