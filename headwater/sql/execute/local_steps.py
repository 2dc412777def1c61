"""The local runner's step driver for SQL: a recorded stream replayed step by
step through the model's reducer, each step's panes through a maintainer to the
changelog. Both SQL paths (general and fast) run on it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headwater.model.arrays import distinct_sorted
from headwater.model.idle import IdleKeys
from headwater.model.reducer import Reducer
from headwater.model.schema import DropReason
from headwater.model.steps import Bundle, MicroBatch, apply_step
from headwater.model.time import MIN_TIMESTAMP, past_end
from headwater.sql.plan.catalog import PTIME

Letters = Callable[[pd.DataFrame], pd.DataFrame]
#: The reason of a row whose event time is NULL.
NULL_EVENT_TIME = DropReason.NULL_EVENT_TIME.value


@dataclass(frozen=True)
class StepInput:
    """The replayed rows (with :data:`PTIME`) and the names of their event-time
    and key columns and of the columns the aggregations read."""

    rows: pd.DataFrame
    event_time: str
    key: str
    values: Sequence[str]


@dataclass(frozen=True)
class DeadLetterForms:
    """How the path turns rows into its dead letters: rows whose event time is
    NULL, and the rows the reducer dropped (the model's dropped frame)."""

    null_event_time: Letters
    dropped: Letters


def expiry_times(keys: np.ndarray, ptimes: np.ndarray, ttl: int) -> np.ndarray:
    """The processing times at which a key's state expires: ``ttl`` after a row of
    the key (``keys[i]`` arrived at ``ptimes[i]``) that no other row of it follows
    within the TTL. One sort over the rows."""
    if not len(keys):
        return np.zeros(0, np.int64)
    codes = pd.factorize(pd.Series(keys, dtype=object))[0]
    order = np.lexsort((ptimes, codes))
    key, at = codes[order], np.asarray(ptimes, np.int64)[order]
    same = np.r_[key[1:] == key[:-1], False]
    follows = np.r_[at[1:], 0]
    idle = ~same | (follows >= at + ttl)
    return distinct_sorted(at[idle] + ttl)


def _expire(idle: IdleKeys | None, reducer: Reducer, maintainer: Any, state: Any, now: int):
    """The keys idle for the TTL at ``now`` and the changelog withdrawing their
    results (None: nothing expired), their state dropped from the reducer and the
    maintainer."""
    gone = idle.expired(now) if idle is not None else np.zeros(0, object)
    if not len(gone):
        return gone, None
    reducer.forget(gone)
    return gone, maintainer.forget(state, gone, now)


def _timed_rows(data: StepInput, letters: DeadLetterForms, as_of: int | None):
    """The dead letters of the rows of NULL event time arrived by ``as_of`` (a
    list, to which later ones are added), and the other rows in arrival order."""
    rows = data.rows
    null = np.isnan(rows[data.event_time].to_numpy(np.float64))
    arrived = rows[PTIME].to_numpy(np.int64) <= (as_of if as_of is not None else np.inf)
    dead = [letters.null_event_time(rows[null & arrived])]
    return dead, rows[~null].sort_values(PTIME, kind="stable")


def _concat_letters(dead: list[pd.DataFrame]) -> pd.DataFrame:
    """The dead letters of a run (the first part's columns when there are none)."""
    full = [d for d in dead if len(d)]
    return pd.concat(full, ignore_index=True) if full else dead[0]


def replay(
    data: StepInput,
    steps: tuple[np.ndarray, np.ndarray],
    reducer: Reducer,
    maintainer: Any,
    letters: DeadLetterForms,
    as_of: int | None,
    ttl: int | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The changelog and the dead letters of the run up to ``as_of``. ``steps``:
    the processing times and the watermark after each; ``ttl``: the state
    time-to-live of the keys (ms), checked at each step before its rows."""
    ptimes, marks = steps
    idle = IdleKeys(ttl) if ttl is not None else None
    state = maintainer.restore(None)
    dead, valid = _timed_rows(data, letters, as_of)
    arrival = valid[PTIME].to_numpy(np.int64)
    begin = np.searchsorted(arrival, ptimes, side="left")
    end = np.searchsorted(arrival, ptimes, side="right")
    values = list(data.values)
    changes = []
    previous = MIN_TIMESTAMP
    for i, ptime in enumerate(ptimes):  # a step each: the model's processing time
        part = valid.iloc[begin[i] : end[i]]
        gone, expired = _expire(idle, reducer, maintainer, state, int(ptime))
        if expired is not None:
            changes.append(expired)
        bundle = None
        if len(part):
            ts = part[data.event_time].to_numpy(np.float64).astype(np.int64)
            bundle = Bundle(part[data.key].to_numpy(), ts, part[values].reset_index(drop=True))
            if idle is not None:
                idle.touch(bundle.keys, int(ptime))
        wm = int(marks[i]) if marks[i] > previous else None
        previous = max(previous, int(marks[i]))
        emission = apply_step(reducer, MicroBatch(bundle, watermark=wm, now=int(ptime)))
        if len(emission.dropped):
            dead.append(letters.dropped(emission.dropped))
        changes.append(maintainer.apply(emission.panes, int(ptime), state))
        if len(gone):  # expired and not started again in this step
            again = pd.Index(bundle.keys if bundle is not None else []).unique()
            maintainer.forget_versions(state, gone[~pd.Index(gone).isin(again)])
        # every step: a group is forgotten at the step its window settles
        maintainer.expire(state, reducer.settled())
    full = [c for c in changes if len(c)]
    changelog = (
        pd.concat(full, ignore_index=True)
        if full
        else maintainer.apply(pd.DataFrame(), 0, maintainer.restore(None))
    )
    return changelog, _concat_letters(dead)


def replay_each_row(
    data: StepInput,
    steps: tuple[np.ndarray, np.ndarray],
    lateness: int,
    maintainer: Any,
    letters: DeadLetterForms,
    as_of: int | None,
    wait: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`replay` of a query whose operators take each row on its own
    (:mod:`headwater.sql.plan.stateless`), without stepping: its groups are
    instants ``[t, t + 1)``, so a row is late when its instant, with
    ``lateness``, ends by the watermark of the steps before its own (as the
    reducer judges a row against the watermark it holds), and the changes of all
    steps are one maintainer query over the rows on time. Each row's changes come
    at its arrival step, or, if ``wait`` (``EMIT AFTER WATERMARK``), at
    :func:`completed_at`."""
    ptimes, marks = steps
    dead, valid = _timed_rows(data, letters, as_of)
    at = valid[PTIME].to_numpy(np.int64)
    step = np.searchsorted(ptimes, at, side="left")
    valid, at, step = valid[step < len(ptimes)], at[step < len(ptimes)], step[step < len(ptimes)]
    held = np.maximum.accumulate(np.asarray(marks, np.int64)) if len(marks) else marks
    before = np.r_[MIN_TIMESTAMP, held][:-1]
    t = valid[data.event_time].to_numpy(np.float64).astype(np.int64)
    end = t + 1
    late = past_end(end, lateness) <= before[step]  # as the reducer judges a row
    if late.any():
        dead.append(letters.dropped(_late_rows(data, valid, late, t)))
    if wait:
        step = np.maximum(step, completed_at(held, end))
    state = maintainer.restore(None)
    due = ~late & (step < len(ptimes))  # the others wait for a watermark not yet come
    if not due.any():
        changelog = maintainer.apply(pd.DataFrame(), 0, state)
    else:
        rows = valid[due].reset_index(drop=True)
        changelog = maintainer.each_row(rows, np.asarray(ptimes, np.int64)[step[due]], state)
    return changelog, _concat_letters(dead)


def completed_at(held: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The first step whose watermark (``held``: after each step, monotone) passes
    each group's ``end``, that is reaches it (``AfterWatermark`` fires when the
    watermark is at least the end): ``len(held)`` when none does yet."""
    return np.searchsorted(held, end, side="left")


def _late_rows(data: StepInput, valid: pd.DataFrame, late: np.ndarray, t: np.ndarray):
    """The rows of ``valid`` the reducer would drop as ``late``, in the model's
    dropped frame (each row its instant's window)."""
    dropped = pd.DataFrame(
        {
            "key": valid[data.key].to_numpy()[late],
            "timestamp": t[late],
            "window_start": t[late],
            "window_end": t[late] + 1,
            "reason": DropReason.LATE.value,
        }
    )
    for name in data.values:
        dropped[name] = valid[name].to_numpy()[late]
    return dropped
